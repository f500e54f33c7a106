package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	client03 "github.com/a2aproject/a2a-go/a2aclient"
	card03 "github.com/a2aproject/a2a-go/a2aclient/agentcard"
)

// client03For is the official a2a-go 0.3 client, from the same agent card.
func client03For(t *testing.T, base, token string) *client03.Client {
	t.Helper()
	ctx := context.Background()
	card, err := card03.NewResolver(httpClient(token)).Resolve(ctx, base)
	if err != nil {
		t.Fatalf("resolve card (0.3): %v", err)
	}
	if !strings.HasSuffix(card.URL, "/a2a/v0.3") || card.PreferredTransport != a2a03.TransportProtocolJSONRPC {
		t.Fatalf("0.3 card points at %s over %s", card.URL, card.PreferredTransport)
	}
	c, err := client03.NewFromCard(ctx, card, client03.WithJSONRPCTransport(httpClient(token)))
	if err != nil {
		t.Fatalf("new 0.3 client: %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

func msg03(text, contextID string) *a2a03.MessageSendParams {
	m := a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.TextPart{Text: text})
	m.ContextID = contextID
	return &a2a03.MessageSendParams{Message: m}
}

func text03(t *a2a03.Task) string {
	var sb strings.Builder
	for _, a := range t.Artifacts {
		for _, p := range a.Parts {
			if tp, ok := p.(a2a03.TextPart); ok {
				sb.WriteString(tp.Text)
			}
		}
	}
	return sb.String()
}

func TestA2A03Client(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client03For(t, h.URL(), "")
	ctx := context.Background()

	res, err := c.SendMessage(ctx, msg03("first", ""))
	if err != nil {
		t.Fatalf("message/send: %v", err)
	}
	task, ok := res.(*a2a03.Task)
	if !ok {
		t.Fatalf("message/send returned %T", res)
	}
	if task.Status.State != a2a03.TaskStateCompleted || text03(task) != "You said: first" {
		t.Fatalf("task %s %q", task.Status.State, text03(task))
	}

	// Streaming, multi-turn on the same context.
	var events []a2a03.Event
	for ev, err := range c.SendStreamingMessage(ctx, msg03("second", task.ContextID)) {
		if err != nil {
			t.Fatalf("message/stream: %v", err)
		}
		events = append(events, ev)
	}
	if _, ok := events[0].(*a2a03.Task); !ok {
		t.Fatalf("stream opened with %T", events[0])
	}
	last, ok := events[len(events)-1].(*a2a03.TaskStatusUpdateEvent)
	if !ok || last.Status.State != a2a03.TaskStateCompleted || !last.Final {
		t.Fatalf("stream ended with %#v", events[len(events)-1])
	}
	got, err := c.GetTask(ctx, &a2a03.TaskQueryParams{ID: last.TaskID, HistoryLength: ptr(1)})
	if err != nil {
		t.Fatalf("tasks/get: %v", err)
	}
	if text03(got) != "You said: first | second" || len(got.History) != 1 {
		t.Fatalf("tasks/get: %q, %d history messages", text03(got), len(got.History))
	}

	// Cancel a slow task through 0.3, from its stream.
	var slowID a2a03.TaskID
	var end a2a03.Event
	for ev, err := range c.SendStreamingMessage(ctx, msg03("slow 300", "")) {
		if err != nil {
			t.Fatalf("message/stream: %v", err)
		}
		end = ev
		switch e := ev.(type) {
		case *a2a03.Task:
			slowID = e.ID
		case *a2a03.TaskArtifactUpdateEvent:
			if _, err := c.CancelTask(ctx, &a2a03.TaskIDParams{ID: slowID}); err != nil {
				t.Fatalf("tasks/cancel: %v", err)
			}
		}
	}
	if su, ok := end.(*a2a03.TaskStatusUpdateEvent); !ok || su.Status.State != a2a03.TaskStateCanceled {
		t.Fatalf("canceled stream ended with %#v", end)
	}
	if _, err := c.CancelTask(ctx, &a2a03.TaskIDParams{ID: slowID}); !errors.Is(err, a2a03.ErrTaskNotCancelable) {
		t.Fatalf("second cancel: %v, want TaskNotCancelable", err)
	}
	if _, err := c.GetTask(ctx, &a2a03.TaskQueryParams{ID: "missing"}); !errors.Is(err, a2a03.ErrTaskNotFound) {
		t.Fatalf("unknown task: %v, want TaskNotFound", err)
	}

	// Resubscribe to a running task.
	var runID a2a03.TaskID
	sctx, stop := context.WithCancel(ctx)
	for ev, err := range c.SendStreamingMessage(sctx, msg03("slow 2", "")) {
		if err != nil {
			t.Fatalf("message/stream: %v", err)
		}
		if tk, ok := ev.(*a2a03.Task); ok {
			runID = tk.ID
			break
		}
	}
	stop()
	var final a2a03.Event
	for ev, err := range c.ResubscribeToTask(ctx, &a2a03.TaskIDParams{ID: runID}) {
		if err != nil {
			t.Fatalf("tasks/resubscribe: %v", err)
		}
		final = ev
	}
	if su, ok := final.(*a2a03.TaskStatusUpdateEvent); !ok || su.Status.State != a2a03.TaskStateCompleted {
		t.Fatalf("resubscribe ended with %#v", final)
	}
}
