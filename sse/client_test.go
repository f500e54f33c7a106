package sse_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	a2aclient03 "github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// taskEvents is what the Agent emits for a turn, in order.
func taskEvents(task string, final loop.TaskStatus) []loop.Event {
	return []loop.Event{
		&loop.TaskCreated{Header: hdr(loop.KindTaskCreated, "c1", task), Initiator: "user"},
		&loop.TaskStatusEvent{Header: hdr(loop.KindTaskStatus, "c1", task), Status: loop.TaskWorking},
		&loop.InternalLLMCall{Header: hdr(loop.KindInternalLLMCall, "c1", task), Iteration: 1},
		&loop.ContentDelta{Header: hdr(loop.KindContentDelta, "c1", task), Delta: "Hel", Index: 0},
		&loop.ContentDelta{Header: hdr(loop.KindContentDelta, "c1", task), Delta: "lo", Index: 1},
		&loop.ContentComplete{Header: hdr(loop.KindContentComplete, "c1", task), Content: "Hello"},
		&loop.TaskStatusEvent{Header: hdr(loop.KindTaskStatus, "c1", task), Status: final, Message: "done"},
		&loop.TaskComplete{Header: hdr(loop.KindTaskComplete, "c1", task), Status: final, Content: "Hello"},
	}
}

// streamServer answers a JSON-RPC streaming request for a task by serving
// the task's stream as SSE, the way the host does.
func streamServer(t *testing.T, h *sse.Hub, version string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ID string `json:"id"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sub, err := h.Subscribe(r.Context(), sse.TaskStream(req.Params.ID), 0, sse.Filter{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer sub.Close()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		var enc sse.Encoder = sse.A2AEncoder{RequestID: req.ID}
		if version == "0.3" {
			enc = sse.A2A03Encoder{RequestID: req.ID}
		}
		flush := func() error { return http.NewResponseController(w).Flush() }
		if err := sse.Serve(r.Context(), w, flush, sub, enc, sse.ServeOptions{}); err != nil {
			t.Errorf("serve %s: %v", req.Method, err)
		}
	}))
}

func TestOfficialA2AClientReadsTheStream(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx := t.Context()
	evs := taskEvents("t1", loop.TaskCompleted)
	// Half before the client connects (replay), half after (live).
	for _, e := range evs[:3] {
		if _, err := h.Publish(ctx, sse.TaskStream("t1"), e); err != nil {
			t.Fatal(err)
		}
	}
	srv := streamServer(t, h, "1.0")
	defer srv.Close()

	tr := a2aclient.NewJSONRPCTransport(srv.URL, srv.Client())
	var got []a2a.Event
	n := 0
	for ev, err := range tr.SubscribeToTask(ctx, nil, &a2a.SubscribeToTaskRequest{ID: "t1"}) {
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		got = append(got, ev)
		n++
		if n == 1 {
			for _, e := range evs[3:] {
				if _, err := h.Publish(ctx, sse.TaskStream("t1"), e); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// Task, working, two deltas, the whole text, completed; the stream
	// ends after the final status (task-complete is not carried).
	if len(got) != 6 {
		t.Fatalf("client got %d events, want 6: %#v", len(got), got)
	}
	if task, ok := got[0].(*a2a.Task); !ok || task.Status.State != a2a.TaskStateSubmitted {
		t.Fatalf("first event %#v, want the submitted Task", got[0])
	}
	text := ""
	for _, ev := range got[2:5] {
		au := ev.(*a2a.TaskArtifactUpdateEvent)
		if au.Append {
			text += au.Artifact.Parts[0].Text()
		} else {
			text = au.Artifact.Parts[0].Text()
		}
	}
	if text != "Hello" {
		t.Fatalf("artifact text %q", text)
	}
	if su, ok := got[5].(*a2a.TaskStatusUpdateEvent); !ok || su.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("last event %#v, want completed", got[5])
	}
}

func TestOfficialA2A03ClientReadsTheStream(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx := t.Context()
	for _, e := range taskEvents("t2", loop.TaskWaitingInput) {
		if _, err := h.Publish(ctx, sse.TaskStream("t2"), e); err != nil {
			t.Fatal(err)
		}
	}
	srv := streamServer(t, h, "0.3")
	defer srv.Close()

	tr := a2aclient03.NewJSONRPCTransport(srv.URL, srv.Client())
	var got []a2a03.Event
	for ev, err := range tr.ResubscribeToTask(ctx, &a2a03.TaskIDParams{ID: "t2"}) {
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		got = append(got, ev)
	}
	if len(got) != 6 {
		t.Fatalf("client got %d events, want 6", len(got))
	}
	su, ok := got[5].(*a2a03.TaskStatusUpdateEvent)
	if !ok || su.Status.State != a2a03.TaskStateInputRequired || !su.Final {
		t.Fatalf("last event %#v, want a final input-required status", got[5])
	}
	if au, ok := got[4].(*a2a03.TaskArtifactUpdateEvent); !ok || !au.LastChunk || au.Artifact.Parts[0].(a2a03.TextPart).Text != "Hello" {
		t.Fatalf("fifth event %#v, want the last chunk of the text", got[4])
	}
}
