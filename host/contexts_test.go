package host_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// TestContextsAreScopedPerPrincipal: a context id names a conversation of
// one principal. Two principals who pick the same id have two
// conversations; neither can take an id the other will use, nor tell
// whether the other has used it; clients only ever see the id they chose.
// A conversation begun before ids were scoped goes on under its old id.
func TestContextsAreScopedPerPrincipal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A conversation of alice's from before ids were scoped.
	st, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	now := time.Now().UTC()
	if err := st.SaveAgent(bg, loop.AgentMetadata{ContextID: "legacy-1", Owner: "alice", Status: loop.AgentReady,
		CreatedAt: now, LastActivity: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.Append(bg, "legacy-1", loop.Message{Role: loop.RoleUser, Content: "remember the walrus"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	cfg := baseConfig(dir)
	cfg.Auth.Enabled = true
	cfg.Auth.Keys = []host.APIKey{{Key: "alice-key", Principal: "alice"}, {Key: "bob-key", Principal: "bob"}}
	h := startHost(t, cfg)
	alice, bob := client10(t, h.URL(), "alice-key"), client10(t, h.URL(), "bob-key")
	say := func(c interface {
		SendMessage(context.Context, *a2a.SendMessageRequest) (a2a.SendMessageResult, error)
	}, contextID, text string) (*a2a.Task, error) {
		m := userMsg(text)
		m.ContextID = contextID
		r, err := c.SendMessage(bg, &a2a.SendMessageRequest{Message: m})
		if err != nil {
			return nil, err
		}
		return r.(*a2a.Task), nil
	}

	// Bob takes "shared-1" first; alice can still use it, for her own.
	for _, step := range []struct {
		who  string
		text string
	}{{"bob", "bob was here"}, {"alice", "alice was here"}, {"bob", "bob again"}, {"alice", "alice again"}} {
		c := alice
		if step.who == "bob" {
			c = bob
		}
		task, err := say(c, "shared-1", step.text)
		if err != nil {
			t.Fatalf("%s in shared-1: %v", step.who, err)
		}
		if task.ContextID != "shared-1" {
			t.Fatalf("%s sees context id %q, want the one it chose", step.who, task.ContextID)
		}
		got := artifactText(task)
		other := "alice"
		if step.who == "alice" {
			other = "bob"
		}
		if strings.Contains(got, other+" was here") {
			t.Fatalf("%s's answer shows the other principal's conversation: %q", step.who, got)
		}
		if strings.HasSuffix(step.text, "again") && !strings.Contains(got, step.who+" was here") {
			t.Fatalf("%s's second turn lost its own history: %q", step.who, got)
		}
	}

	// The legacy conversation goes on under its old id, with its history.
	task, err := say(alice, "legacy-1", "what did I say?")
	if err != nil {
		t.Fatalf("alice continues legacy-1: %v", err)
	}
	if !strings.Contains(artifactText(task), "walrus") || task.ContextID != "legacy-1" {
		t.Fatalf("legacy conversation: context %q, answer %q", task.ContextID, artifactText(task))
	}
	// Bob using the same id gets a conversation of his own, not alice's.
	task, err = say(bob, "legacy-1", "what did she say?")
	if err != nil || strings.Contains(artifactText(task), "walrus") {
		t.Fatalf("bob in legacy-1: %v, %q", err, artifactText(task))
	}

	// Event streams: one's own context, under the id the client knows.
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	resp := openSSE(t, ctx, h.URL()+"/events/shared-1?kinds=task-created,task-complete", "alice-key", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's events of shared-1: %d", resp.StatusCode)
	}
	n := 0
	frames := readFrames(t, resp.Body, func(f frame) bool {
		if f.Event == "task-complete" {
			n++
		}
		return n == 2
	})
	for _, f := range frames {
		if !strings.Contains(f.Data, `"contextId":"shared-1"`) || strings.Contains(f.Data, "~") {
			t.Fatalf("alice's event shows another context id: %s", f.Data)
		}
	}
	if len(frames) != 4 {
		t.Fatalf("alice's stream of shared-1 has %d frames, want her two turns' created and complete: %+v", len(frames), frames)
	}
	// The A2A stream too.
	m := userMsg("stream it")
	m.ContextID = "shared-1"
	for ev, err := range alice.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: m}) {
		if err != nil {
			t.Fatalf("alice streams: %v", err)
		}
		var got string
		switch e := ev.(type) {
		case *a2a.Task:
			got = e.ContextID
		case *a2a.TaskStatusUpdateEvent:
			got = e.ContextID
		case *a2a.TaskArtifactUpdateEvent:
			got = e.ContextID
		}
		if got != "shared-1" {
			t.Fatalf("A2A event %T with context id %q", ev, got)
		}
	}
	list, err := alice.ListTasks(bg, &a2a.ListTasksRequest{ContextID: "shared-1"})
	if err != nil || len(list.Tasks) != 3 {
		t.Fatalf("alice lists shared-1: %v (%v), want her 3 tasks", list, err)
	}
	for _, tk := range list.Tasks {
		if tk.ContextID != "shared-1" {
			t.Fatalf("listed task with context id %q", tk.ContextID)
		}
	}

	// A context only alice used and one nobody used look the same to bob.
	if _, err := say(alice, "alice-only", "mine"); err != nil {
		t.Fatal(err)
	}
	get := func(id string) (int, string) {
		resp := openSSE(t, ctx, h.URL()+"/events/"+id, "bob-key", "")
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.ReplaceAll(string(b), id, "ID")
	}
	c1, b1 := get("alice-only")
	c2, b2 := get("never-used")
	if c1 != http.StatusNotFound || c1 != c2 || b1 != b2 {
		t.Fatalf("bob tells alice's context from an unused one: %d %q vs %d %q", c1, b1, c2, b2)
	}
	// Ids that look scoped are not a client's to name.
	_, err = say(bob, loop.ScopedContextID("alice", "alice-only"), "let me in")
	if !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("a scoped-looking context id: %v, want invalid params", err)
	}
}
