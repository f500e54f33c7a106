package host_test

import (
	"context"
	"strings"
	"testing"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
)

// rendered is what a client that follows A2A's artifact rules shows: an
// update without append replaces the artifact, with append adds to it.
type rendered struct {
	order  []string
	text   map[string]string
	names  map[string]string
	closed map[string]bool // ids whose last chunk came
}

func newRendered() *rendered {
	return &rendered{text: map[string]string{}, names: map[string]string{}, closed: map[string]bool{}}
}

func (r *rendered) apply(t *testing.T, id, name, text string, appendTo, last bool) {
	t.Helper()
	if _, seen := r.text[id]; !seen {
		r.order = append(r.order, id)
	} else if !appendTo {
		t.Fatalf("artifact %s sent again without append: a client replaces %q with %q", id, r.text[id], text)
	}
	if r.closed[id] {
		t.Fatalf("artifact %s gets a chunk after its last chunk", id)
	}
	if appendTo {
		r.text[id] += text
	} else {
		r.text[id] = text
	}
	r.names[id] = name
	r.closed[id] = last
}

func (r *rendered) all() string {
	var sb strings.Builder
	for _, id := range r.order {
		sb.WriteString(r.text[id])
	}
	return sb.String()
}

// checkRendered: the two steps of "calc 2+2" (text, a tool call, text)
// render as the model wrote them, each step's text once, in artifacts named
// "response" that all got their last chunk; wire counts the text sent.
func checkRendered(t *testing.T, version string, r *rendered, wire string) {
	t.Helper()
	want := "Let me work that out.\n2+2 = 4"
	if got := r.all(); got != want {
		t.Fatalf("%s: the stream renders %q, want %q", version, got, want)
	}
	if wire != want {
		t.Fatalf("%s: the stream sent the text %q, want each step's text once: %q", version, wire, want)
	}
	if len(r.order) != 2 {
		t.Fatalf("%s: %d text artifacts %v, want one per step", version, len(r.order), r.order)
	}
	for _, id := range r.order {
		if r.names[id] != "response" || !r.closed[id] {
			t.Fatalf("%s: artifact %s named %q, last chunk %v", version, id, r.names[id], r.closed[id])
		}
	}
}

// An A2A client renders the stream as it comes: text once (no chunks then
// the whole text again), each model response in an artifact of its own (the
// second step does not replace the first), the tool call as working
// statuses that say what runs. Both protocol versions, official clients.
func TestA2AStreamRendersAsIs(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	ctx := context.Background()

	r, wire := newRendered(), ""
	var activity []string
	for ev, err := range client10(t, h.URL(), "").SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("calc 2+2")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch v := ev.(type) {
		case *a2a.TaskArtifactUpdateEvent:
			var sb strings.Builder
			for _, p := range v.Artifact.Parts {
				sb.WriteString(p.Text())
			}
			r.apply(t, string(v.Artifact.ID), v.Artifact.Name, sb.String(), v.Append, v.LastChunk)
			wire += sb.String()
		case *a2a.TaskStatusUpdateEvent:
			if v.Metadata["activity"] != nil {
				if v.Status.State != a2a.TaskStateWorking || v.Status.Message == nil || v.Metadata["toolName"] != "calc" {
					t.Fatalf("tool activity status %+v, metadata %v", v.Status, v.Metadata)
				}
				activity = append(activity, v.Metadata["activity"].(string)+": "+v.Status.Message.Parts[0].Text())
			}
		}
	}
	checkRendered(t, "1.0", r, wire)
	if strings.Join(activity, "; ") != "tool-start: Running calc; tool-complete: calc done" {
		t.Fatalf("1.0 tool activity %q", activity)
	}

	r, wire = newRendered(), ""
	activity = nil
	for ev, err := range client03For(t, h.URL(), "").SendStreamingMessage(ctx, msg03("calc 2+2", "")) {
		if err != nil {
			t.Fatalf("0.3 stream: %v", err)
		}
		switch v := ev.(type) {
		case *a2a03.TaskArtifactUpdateEvent:
			var sb strings.Builder
			for _, p := range v.Artifact.Parts {
				if tp, ok := p.(a2a03.TextPart); ok {
					sb.WriteString(tp.Text)
				}
			}
			r.apply(t, string(v.Artifact.ID), v.Artifact.Name, sb.String(), v.Append, v.LastChunk)
			wire += sb.String()
		case *a2a03.TaskStatusUpdateEvent:
			if v.Metadata["activity"] != nil {
				if v.Status.State != a2a03.TaskStateWorking || v.Final || v.Status.Message == nil {
					t.Fatalf("0.3 tool activity status %+v", v)
				}
				activity = append(activity, v.Metadata["activity"].(string)+": "+v.Status.Message.Parts[0].(a2a03.TextPart).Text)
			}
		}
	}
	checkRendered(t, "0.3", r, wire)
	if strings.Join(activity, "; ") != "tool-start: Running calc; tool-complete: calc done" {
		t.Fatalf("0.3 tool activity %q", activity)
	}
}
