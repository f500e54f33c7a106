package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// CommitStores is a store that commits whole turns, with the stores a
// commit writes to.
type CommitStores struct {
	Commit      loop.TurnCommitter
	Messages    loop.MessageStore
	Agents      loop.AgentStore
	Tasks       loop.TaskStore
	Checkpoints loop.CheckpointStore
	Leases      loop.LeaseStore
}

// RunTurnCommit runs the suite of loop.TurnCommitter: a commit saves all
// of a turn or none of it; it is versioned like SaveTask and fenced by its
// lease.
func RunTurnCommit(t *testing.T, open func(t *testing.T) CommitStores) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s CommitStores)
	}{
		{"Whole", testCommitWhole},
		{"ConflictSavesNothing", testCommitConflict},
		{"LostLeaseSavesNothing", testCommitLease},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func commitOf(tr *loop.TaskRecord) loop.TurnCommit {
	return loop.TurnCommit{ContextID: "c",
		Messages: []loop.Message{msg(loop.RoleUser, "q"), msg(loop.RoleAssistant, "a")},
		Agent:    loop.AgentMetadata{ContextID: "c", TurnCount: 1, Status: loop.AgentReady},
		Task:     tr, DeleteCheckpoint: tr.ID}
}

// wantNothingCommitted checks that a refused commit left the stores as
// they were.
func wantNothingCommitted(t *testing.T, s CommitStores, taskVersion uint64) {
	t.Helper()
	ctx := context.Background()
	wantCount(t, s.Messages, "c", 0)
	if _, err := s.Agents.LoadAgent(ctx, "c"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("refused commit saved the agent: %v", err)
	}
	if got, err := s.Tasks.LoadTask(ctx, "t"); err != nil || got.Status != loop.TaskWorking || got.Version != taskVersion {
		t.Fatalf("refused commit changed the task: %s version %d, %v", got.Status, got.Version, err)
	}
	if _, err := s.Checkpoints.LoadCheckpoint(ctx, "t"); err != nil {
		t.Fatalf("refused commit deleted the checkpoint: %v", err)
	}
}

func setupCommit(t *testing.T, s CommitStores) loop.TaskRecord {
	t.Helper()
	tr := mustSaveTask(t, s.Tasks, task("t", "c", 1, loop.TaskWorking))
	if err := s.Checkpoints.SaveCheckpoint(context.Background(), loop.Checkpoint{TaskID: "t", ContextID: "c", Iteration: 1, Stage: loop.StageModel}); err != nil {
		t.Fatal(err)
	}
	return tr
}

func testCommitWhole(t *testing.T, s CommitStores) {
	ctx := context.Background()
	tr := setupCommit(t, s)
	tr.Status = loop.TaskCompleted
	if err := s.Commit.CommitTurn(ctx, commitOf(&tr)); err != nil {
		t.Fatalf("CommitTurn: %v", err)
	}
	wantContents(t, s.Messages, "c", 0, "q", "a")
	if md, err := s.Agents.LoadAgent(ctx, "c"); err != nil || md.TurnCount != 1 {
		t.Fatalf("agent after commit = %+v, %v", md, err)
	}
	got, err := s.Tasks.LoadTask(ctx, "t")
	if err != nil || got.Status != loop.TaskCompleted || got.Version != tr.Version+1 {
		t.Fatalf("task after commit = %s version %d, %v; want completed version %d", got.Status, got.Version, err, tr.Version+1)
	}
	if _, err := s.Checkpoints.LoadCheckpoint(ctx, "t"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("checkpoint after commit: err = %v, want ErrNotFound", err)
	}
}

func testCommitConflict(t *testing.T, s CommitStores) {
	tr := setupCommit(t, s)
	stale := tr
	stale.Version--
	stale.Status = loop.TaskCompleted
	if err := s.Commit.CommitTurn(context.Background(), commitOf(&stale)); !errors.Is(err, loop.ErrConflict) {
		t.Fatalf("CommitTurn of a stale task version: err = %v, want ErrConflict", err)
	}
	wantNothingCommitted(t, s, tr.Version)
}

func testCommitLease(t *testing.T, s CommitStores) {
	ctx := context.Background()
	tr := setupCommit(t, s)
	old, err := s.Leases.AcquireLease(ctx, "t", "host-a", "c", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(guard)
	for {
		_, err := s.Leases.AcquireLease(ctx, "t", "host-b", "c", time.Minute)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease never lapsed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tr.Status = loop.TaskCompleted
	c := commitOf(&tr)
	c.Lease = &old
	if err := s.Commit.CommitTurn(ctx, c); !errors.Is(err, loop.ErrLeaseLost) {
		t.Fatalf("CommitTurn fenced by a lease taken over: err = %v, want ErrLeaseLost", err)
	}
	wantNothingCommitted(t, s, tr.Version)
}
