package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// TestGracefulShutdown: Close lets a running turn finish within the grace
// period and ends its stream with the final status; one that would not
// finish is handed on, as a crash would leave it: its stream ends with
// SHUTTING_DOWN (subscribe again), never a final status, and the next
// start resumes it (here: it runs again, and a cancel ends it).
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
		err   error
	}
	stream := func(text string) (<-chan a2a.TaskID, <-chan result) {
		started, done := make(chan a2a.TaskID, 1), make(chan result, 1)
		go func() {
			var r result
			for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg(text)}) {
				if err != nil {
					r.err = err
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
	// The host handed it on: no final status, an error telling the
	// client to subscribe again.
	if long.state != a2a.TaskStateWorking || long.err == nil || !strings.Contains(long.err.Error(), "subscribe again") {
		t.Fatalf("a turn longer than the grace period ended %s (%v), want still working and an error to subscribe again", long.state, long.err)
	}

	h2 := startHost(t, cfg)
	c2 := client10(t, h2.URL(), "")
	got, err := c2.GetTask(ctx, &a2a.GetTaskRequest{ID: short.id})
	if err != nil || got.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("after a restart task %s is %v (%v), want completed", short.id, got, err)
	}
	// The next start resumed the long one: it runs (a cancel reaches it).
	got, err = c2.GetTask(ctx, &a2a.GetTaskRequest{ID: long.id})
	if err != nil || got.Status.State != a2a.TaskStateWorking {
		t.Fatalf("after a restart the handed-on task %s is %v (%v), want working", long.id, got, err)
	}
	if _, err := c2.CancelTask(ctx, &a2a.CancelTaskRequest{ID: long.id}); err != nil {
		t.Fatalf("cancel the resumed task: %v", err)
	}
}

// On Redis, a graceful stop hands a turn its grace could not finish to
// another host at once (its leases released, not left to lapse): host B
// takes it over and completes it, and a client following the task on B
// sees it end completed; the client streaming it from A is told to
// subscribe again, never given a final status.
func TestGracefulStopHandsTheTurnToAnotherHost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	start := func(id string) *testHost {
		cfg := baseConfig(t.TempDir())
		cfg.Store.Backend = "redis"
		cfg.Store.Redis = host.RedisConfig{Addr: srv.Addr, Password: srv.Password, Prefix: "handon:"}
		cfg.Limits.HostID = id
		cfg.Limits.LeaseTTL = host.Duration(2 * time.Second)
		cfg.Limits.ShutdownGrace = host.Duration(500 * time.Millisecond)
		return startHost(t, cfg)
	}
	ha, hb := start("host-a"), start("host-b")
	ca, cb := client10(t, ha.URL(), ""), client10(t, hb.URL(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	onB := make(chan a2a.TaskState, 1)
	var aErr error
	closed := false
	for ev, err := range ca.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("slow 3")}) {
		if err != nil {
			aErr = err
			break
		}
		switch e := ev.(type) {
		case *a2a.Task:
			go func() {
				var last a2a.TaskState
				for ev, err := range cb.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: e.ID}) {
					if err != nil {
						break
					}
					if st, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
						last = st.Status.State
					}
				}
				onB <- last
			}()
		case *a2a.TaskArtifactUpdateEvent:
			if !closed {
				closed = true
				go func() { _ = ha.Close() }()
			}
		case *a2a.TaskStatusUpdateEvent:
			if e.Status.State.Terminal() {
				t.Fatalf("A's stream ended with %s, want an error telling the client to subscribe again", e.Status.State)
			}
		}
	}
	if aErr == nil || !strings.Contains(aErr.Error(), "subscribe again") {
		t.Fatalf("A's stream ended with %v, want an error telling the client to subscribe again", aErr)
	}
	select {
	case st := <-onB:
		if st != a2a.TaskStateCompleted {
			t.Fatalf("the task followed on B ended %q, want completed (taken over from A)", st)
		}
	case <-ctx.Done():
		t.Fatal("B never completed the task A handed on")
	}
}
