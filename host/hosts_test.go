package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// twoHosts starts two hosts of one service: one Redis, one key prefix,
// each its own host id and data directory.
func twoHosts(t *testing.T) (a, b *testHost) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	start := func(id string) *testHost {
		cfg := baseConfig(t.TempDir())
		cfg.Store.Backend = "redis"
		cfg.Store.Redis = host.RedisConfig{Addr: srv.Addr, Password: srv.Password, Prefix: "svc:"}
		cfg.Limits.HostID = id
		return startHost(t, cfg)
	}
	return start("host-a"), start("host-b")
}

// Through the official A2A client: a task streamed from host A is
// canceled with CancelTask sent to host B. B answers with the canceled
// task; A's stream and a subscriber on B both end with the canceled
// status. While the turn ran, a second message to its context through B
// was answered busy, as it would be on A.
func TestCancelAndBusyAcrossHosts(t *testing.T) {
	t.Parallel()
	ha, hb := twoHosts(t)
	ca, cb := client10(t, ha.URL(), ""), client10(t, hb.URL(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var taskID a2a.TaskID
	var contextID string
	var last a2a.Event
	chunks := 0
	subEnd := make(chan a2a.Event, 1)
	for ev, err := range ca.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("slow 400")}) {
		if err != nil {
			t.Fatalf("stream from A: %v", err)
		}
		last = ev
		switch e := ev.(type) {
		case *a2a.Task:
			taskID, contextID = e.ID, e.ContextID
			go func() {
				var end a2a.Event
				for ev, err := range cb.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: taskID}) {
					if err != nil {
						t.Errorf("subscription on B: %v", err)
						break
					}
					end = ev
				}
				subEnd <- end
			}()
		case *a2a.TaskArtifactUpdateEvent:
			chunks++
			if chunks != 2 {
				continue
			}
			msg := userMsg("hello")
			msg.ContextID = contextID
			_, err := cb.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg})
			if err == nil || !strings.Contains(err.Error(), "busy") {
				t.Errorf("a second turn of the context through B while A runs one: err = %v, want busy", err)
			}
			got, err := cb.CancelTask(ctx, &a2a.CancelTaskRequest{ID: taskID})
			if err != nil {
				t.Fatalf("cancel through B: %v", err)
			}
			if got.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("cancel through B returned state %s, want canceled", got.Status.State)
			}
		}
	}
	su, ok := last.(*a2a.TaskStatusUpdateEvent)
	if !ok || su.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("A's stream ended with %#v, want a canceled status", last)
	}
	if chunks >= 400 {
		t.Fatalf("the turn ran to its end (%d chunks) despite the cancel", chunks)
	}
	select {
	case end := <-subEnd:
		su, ok := end.(*a2a.TaskStatusUpdateEvent)
		if !ok || su.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("B's subscription ended with %#v, want a canceled status", end)
		}
	case <-ctx.Done():
		t.Fatal("B's subscription did not end")
	}
	if _, err := cb.CancelTask(ctx, &a2a.CancelTaskRequest{ID: taskID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("second cancel: %v, want TaskNotCancelable", err)
	}
	// The context takes its next turn, on B.
	msg := userMsg("hello")
	msg.ContextID = contextID
	if task := send(t, cb, ctx, &a2a.SendMessageRequest{Message: msg}); task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("next turn through B: %s", task.Status.State)
	}
}
