package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// SaveTaskLeased writes the lease, the task and the agent metadata in one
// commit, and nothing when either is refused.
func TestSaveTaskLeased(t *testing.T) {
	b, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	now := time.Now().UTC()
	rec := loop.TaskRecord{ID: "t1", ContextID: "c1", Owner: "alice", Status: loop.TaskWorking,
		History: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, TurnInput: 1, CreatedAt: now, UpdatedAt: now}

	meta := loop.AgentMetadata{ContextID: "c1", Owner: "alice", Status: loop.AgentReady, CreatedAt: now}
	before := b.Commits()
	l, err := b.SaveTaskLeased(ctx, rec, &meta, "host-a", "c1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.Commits() - before; n != 1 {
		t.Fatalf("lease, task and agent took %d commits, want 1", n)
	}
	if m, err := b.LoadAgent(ctx, "c1"); err != nil || m.Owner != "alice" {
		t.Fatalf("agent = %+v, %v", m, err)
	}
	if l.Key != "t1" || l.Owner != "host-a" || l.Data != "c1" || l.Token != 1 {
		t.Fatalf("lease = %+v", l)
	}
	got, err := b.LoadTask(ctx, "t1")
	if err != nil || got.Version != 1 || got.History[0].Content != "hi" {
		t.Fatalf("task = %+v, %v", got, err)
	}

	// Another owner while the lease is held: refused, the task untouched.
	other := got
	other.Status = loop.TaskFailed
	mallory := loop.AgentMetadata{ContextID: "c1", Owner: "mallory", Status: loop.AgentReady, CreatedAt: now}
	if _, err := b.SaveTaskLeased(ctx, other, &mallory, "host-b", "c1", time.Minute); !errors.Is(err, loop.ErrLeaseHeld) {
		t.Fatalf("save under another's lease: err = %v, want ErrLeaseHeld", err)
	}
	if cur, _ := b.LoadTask(ctx, "t1"); cur.Status != loop.TaskWorking || cur.Version != 1 {
		t.Fatalf("task after a refused lease = %s v%d, want working v1", cur.Status, cur.Version)
	}
	if m, _ := b.LoadAgent(ctx, "c1"); m.Owner != "alice" {
		t.Fatalf("agent after a refused lease owned by %q, want alice", m.Owner)
	}

	// A stale version: refused, and the lease not taken.
	if err := b.ReleaseLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	stale := rec // version 0, stored is 1
	stale.ContextID = "c2"
	fresh := loop.AgentMetadata{ContextID: "c2", Owner: "alice", Status: loop.AgentReady, CreatedAt: now}
	if _, err := b.SaveTaskLeased(ctx, stale, &fresh, "host-b", "c2", time.Minute); !errors.Is(err, loop.ErrConflict) {
		t.Fatalf("save of a stale version: err = %v, want ErrConflict", err)
	}
	if _, err := b.LoadAgent(ctx, "c2"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("agent of a refused task stored: %v", err)
	}
	leases, err := b.ListLeases(ctx)
	if err != nil || len(leases) != 0 {
		t.Fatalf("leases after a refused task = %+v, %v; want none", leases, err)
	}
}
