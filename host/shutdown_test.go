package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

// TestGracefulShutdown: Close lets a running turn finish within the grace
// period, stops one that would not (it ends failed: the host shut down, the client did not cancel it), ends their streams with the final
// status, and the stores say so after a restart.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := baseConfig(dir)
	// Wide enough for a one-second turn on a loaded machine; the long turn
	// outlasts it by far.
	cfg.Limits.ShutdownGrace = host.Duration(15 * time.Second)
	h := startHost(t, cfg)
	c := client10(t, h.URL(), "")
	ctx := context.Background()

	type result struct {
		id    a2a.TaskID
		state a2a.TaskState
	}
	stream := func(text string) (<-chan a2a.TaskID, <-chan result) {
		started, done := make(chan a2a.TaskID, 1), make(chan result, 1)
		go func() {
			var r result
			for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg(text)}) {
				if err != nil {
					break
				}
				switch e := ev.(type) {
				case *a2a.Task:
					r.id = e.ID
				case *a2a.TaskArtifactUpdateEvent:
					select {
					case started <- r.id:
					default:
					}
				case *a2a.TaskStatusUpdateEvent:
					r.state = e.Status.State
				}
			}
			done <- r
		}()
		return started, done
	}
	shortStarted, shortDone := stream("slow 1")
	longStarted, longDone := stream("slow 120")
	<-shortStarted
	<-longStarted
	if err := h.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	short, long := <-shortDone, <-longDone
	if short.state != a2a.TaskStateCompleted {
		t.Fatalf("a turn shorter than the grace period ended %s, want completed", short.state)
	}
	// The host stopped it, the client did not cancel it: it ends failed
	// (its status says the host shut down).
	if long.state != a2a.TaskStateFailed {
		t.Fatalf("a turn longer than the grace period ended %s, want failed", long.state)
	}

	h2 := startHost(t, cfg)
	c2 := client10(t, h2.URL(), "")
	for _, r := range []result{short, long} {
		got, err := c2.GetTask(ctx, &a2a.GetTaskRequest{ID: r.id})
		if err != nil || got.Status.State != r.state {
			t.Fatalf("after a restart task %s is %v (%v), want %s", r.id, got, err, r.state)
		}
	}
}
