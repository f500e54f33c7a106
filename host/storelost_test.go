package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// Redis loses its data (FLUSHALL) while a turn runs on host A, streamed
// on A and followed from host B: no one will ever write that task's end,
// so both streams end with a clear task-not-found error instead of
// staying open, silent, for ever. Both hosts serve on.
func TestStreamsEndWhenTheStoreLosesTheTask(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	start := func(id string) *testHost {
		cfg := baseConfig(t.TempDir())
		cfg.Store.Backend = "redis"
		cfg.Store.Redis = host.RedisConfig{Addr: srv.Addr, Password: srv.Password, Prefix: "lost:"}
		cfg.Limits.HostID = id
		return startHost(t, cfg)
	}
	ha, hb := start("host-a"), start("host-b")
	ca, cb := client10(t, ha.URL(), ""), client10(t, hb.URL(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	subFirst := make(chan struct{})
	subEnd := make(chan error, 1)
	var aErr error
	flushed := false
	for ev, err := range ca.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("slow 400")}) {
		if err != nil {
			aErr = err
			break
		}
		switch e := ev.(type) {
		case *a2a.Task:
			go func() {
				first := true
				for _, err := range cb.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: e.ID}) {
					if first {
						first = false
						close(subFirst)
					}
					if err != nil {
						subEnd <- err
						return
					}
				}
				subEnd <- errors.New("B's stream ended without an error")
			}()
		case *a2a.TaskArtifactUpdateEvent:
			if flushed {
				continue
			}
			select {
			case <-subFirst:
			case <-ctx.Done():
				t.Fatal("B's subscription got nothing")
			}
			rc := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: srv.Password})
			if err := rc.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			_ = rc.Close()
			flushed = true
		case *a2a.TaskStatusUpdateEvent:
			if e.Status.State.Terminal() {
				t.Fatalf("A's stream ended with %s, want an error: the task is gone", e.Status.State)
			}
		}
	}
	if ctx.Err() != nil {
		t.Fatal("A's stream did not end after the store lost its task")
	}
	if !errors.Is(aErr, a2a.ErrTaskNotFound) {
		t.Fatalf("A's stream ended with %v, want task not found", aErr)
	}
	select {
	case err := <-subEnd:
		if !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("B's stream ended with %v, want task not found", err)
		}
	case <-ctx.Done():
		t.Fatal("B's stream did not end after the store lost its task")
	}
	// Both hosts serve new turns.
	for _, c := range []*a2aclient.Client{ca, cb} {
		if task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("hello")}); task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("a new turn after the loss: %s", task.Status.State)
		}
	}
}
