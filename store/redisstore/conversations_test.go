package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store/redisstore"
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

// The expiry reads the index members older than its cutoff only; agent
// records written without a member (before the index existed, or by a
// host of an older version) get one at the first expiry of each Store, so
// they expire too; the index holds one member per record at its score.
func TestRedisConversationIndex(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := opener(srv)(t)
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	rdb := s.Client()
	oldLayout := func(id string, last time.Time) {
		t.Helper()
		v, _ := json.Marshal(loop.AgentMetadata{ContextID: id, CreatedAt: last, LastActivity: last})
		if err := rdb.Set(ctx, s.Prefix()+"a:"+id, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, id, loop.Message{Role: loop.RoleUser, Content: id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		if err := s.SaveAgent(ctx, loop.AgentMetadata{ContextID: "recent-" + strconv.Itoa(i), CreatedAt: now, LastActivity: now}); err != nil {
			t.Fatal(err)
		}
	}
	oldLayout("old-idle", old)
	oldLayout("old-recent", now)
	if err := s.SaveAgent(ctx, loop.AgentMetadata{ContextID: "idle", CreatedAt: old, LastActivity: old}); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitTurn(ctx, loop.TurnCommit{ContextID: "turn", Agent: loop.AgentMetadata{ContextID: "turn", CreatedAt: old, LastActivity: old},
		Messages: []loop.Message{{Role: loop.RoleUser, Content: "turn"}}}); err != nil {
		t.Fatal(err)
	}
	listed := 0
	redisstore.SetConvListed(func(n int) { listed += n })
	t.Cleanup(func() { redisstore.SetConvListed(nil) })
	gone, err := s.ExpireConversations(ctx, now.Add(-time.Hour))
	slices.Sort(gone)
	if err != nil || !slices.Equal(gone, []string{"idle", "old-idle", "turn"}) {
		t.Fatalf("deleted %v (%v), want [idle old-idle turn]", gone, err)
	}
	if listed != 3 {
		t.Fatalf("the expiry listed %d members, want the 3 idle", listed)
	}
	wantIndex := func(s *redisstore.Store) {
		t.Helper()
		zs, err := rdb.ZRangeWithScores(ctx, s.Prefix()+"ca", 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		keys, err := rdb.Keys(ctx, s.Prefix()+"a:*").Result()
		if err != nil || len(zs) != len(keys) {
			t.Fatalf("%d index members for %d agent records (%v)", len(zs), len(keys), err)
		}
		for _, z := range zs {
			m, err := s.LoadAgent(ctx, z.Member.(string))
			if err != nil || float64(m.LastActivity.UnixMilli()) != z.Score {
				t.Fatalf("member %v: record %v, %v", z, m.LastActivity, err)
			}
		}
	}
	wantIndex(s)
	// An older host writes a record without its member after the
	// backfill: a Store opened later (a restart) indexes and expires it.
	oldLayout("late", old)
	if gone, err := s.ExpireConversations(ctx, now.Add(-time.Hour)); err != nil || len(gone) != 0 {
		t.Fatalf("the same Store: %v, %v", gone, err)
	}
	s2 := openAt(t, srv, s.Prefix())
	if gone, err := s2.ExpireConversations(ctx, now.Add(-time.Hour)); err != nil || !slices.Equal(gone, []string{"late"}) {
		t.Fatalf("a Store opened later: %v, %v; want [late]", gone, err)
	}
	if n, err := s2.Count(ctx, "late"); err != nil || n != 0 {
		t.Fatalf("late holds %d messages (%v)", n, err)
	}
	for _, id := range []string{"old-recent", "recent-7"} {
		if _, err := s2.LoadAgent(ctx, id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if err := s2.DeleteAgent(ctx, "recent-7"); err != nil {
		t.Fatal(err)
	}
	wantIndex(s2)
}

// DeleteConversation on a real redis-server: now, whatever the activity;
// kept with an unfinished task; an unknown id is not found.
func TestRedisDeleteConversation(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := opener(srv)(t)
	ctx := context.Background()
	now := time.Now()
	for _, id := range []string{"recent", "paused"} {
		if err := s.SaveAgent(ctx, loop.AgentMetadata{ContextID: id, CreatedAt: now, LastActivity: now}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, id, loop.Message{Role: loop.RoleUser, Content: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SaveTask(ctx, loop.TaskRecord{ID: "t", ContextID: "paused", Status: loop.TaskWaitingInput, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.DeleteConversation(ctx, "recent"); !ok || err != nil {
		t.Fatalf("delete recent: %v, %v", ok, err)
	}
	if n, _ := s.Count(ctx, "recent"); n != 0 {
		t.Fatalf("%d messages left", n)
	}
	if n, _ := s.Client().ZCard(ctx, s.Prefix()+"ca").Result(); n != 1 {
		t.Fatalf("%d index members, want 1", n)
	}
	if ok, err := s.DeleteConversation(ctx, "paused"); ok || err != nil {
		t.Fatalf("delete paused: %v, %v; want kept", ok, err)
	}
	if n, _ := s.Count(ctx, "paused"); n != 1 {
		t.Fatalf("paused holds %d messages, want 1", n)
	}
	if _, err := s.DeleteConversation(ctx, "recent"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	// The deletion to finish, entered with it, until done.
	if got, err := s.PendingConversationDeletes(ctx); err != nil || len(got) != 1 || got["recent"].Before(now) {
		t.Fatalf("pending conversation deletes: %v %v, want recent", got, err)
	}
	if err := s.ConversationDeleteDone(ctx, "recent"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.PendingConversationDeletes(ctx); err != nil || len(got) != 0 {
		t.Fatalf("pending conversation deletes once done: %v %v", got, err)
	}
}
