package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// A real redis-server: an idle conversation without an unfinished task is
// deleted (agent record and history, a context id with a glob character
// too), a paused one, a working one and a recent one are kept.
func TestRedisExpireConversations(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := opener(srv)(t)
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	save := func(id string, last time.Time, state loop.TaskStatus) {
		t.Helper()
		if err := s.SaveAgent(ctx, loop.AgentMetadata{ContextID: id, CreatedAt: last, LastActivity: last}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, id, loop.Message{Role: loop.RoleUser, Content: id}); err != nil {
			t.Fatal(err)
		}
		if state != "" {
			if err := s.SaveTask(ctx, loop.TaskRecord{ID: "task-" + id, ContextID: id, Status: state, CreatedAt: last, UpdatedAt: last}); err != nil {
				t.Fatal(err)
			}
		}
	}
	save("idle", old, loop.TaskCompleted)
	save("idle*2", old, "")
	save("paused", old, loop.TaskWaitingInput)
	save("working", old, loop.TaskWorking)
	save("recent", now, "")
	gone, err := s.ExpireConversations(ctx, now.Add(-time.Hour))
	slices.Sort(gone)
	if err != nil || !slices.Equal(gone, []string{"idle", "idle*2"}) {
		t.Fatalf("deleted %v (%v), want [idle idle*2]", gone, err)
	}
	for _, id := range gone {
		if _, err := s.LoadAgent(ctx, id); !errors.Is(err, loop.ErrNotFound) {
			t.Fatalf("agent of the deleted %s: %v", id, err)
		}
		if n, err := s.Count(ctx, id); err != nil || n != 0 {
			t.Fatalf("deleted %s holds %d messages (%v)", id, n, err)
		}
	}
	for _, id := range []string{"paused", "working", "recent"} {
		if _, err := s.LoadAgent(ctx, id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if n, _ := s.Count(ctx, id); n != 1 {
			t.Fatalf("%s holds %d messages, want 1", id, n)
		}
	}
	if gone, err := s.ExpireConversations(ctx, now.Add(-time.Hour)); err != nil || len(gone) != 0 {
		t.Fatalf("second sweep: %v, %v", gone, err)
	}
}
