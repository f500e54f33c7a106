package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// newTask is a new task of alice's, working, with one message.
func newTask(id, ctxID string) loop.TaskRecord {
	now := time.Now().UTC()
	return loop.TaskRecord{ID: id, ContextID: ctxID, Owner: "alice", Status: loop.TaskWorking,
		History: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, TurnInput: 1, CreatedAt: now, UpdatedAt: now}
}

// endOf is the commit of rec's turn fenced by l: its messages, the task
// completed.
func endOf(rec loop.TaskRecord, l loop.Lease) loop.TurnCommit {
	done := rec
	done.Version, done.Status = 1, loop.TaskCompleted
	return loop.TurnCommit{ContextID: rec.ContextID, Lease: &l, Task: &done,
		Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}, {Role: loop.RoleAssistant, Content: "hello"}},
		Agent:    loop.AgentMetadata{ContextID: rec.ContextID, Owner: "alice", Status: loop.AgentReady}}
}

// holdCommits stops the commit goroutine until the returned func is
// called: what is submitted meanwhile is applied, in its order, once it
// goes on.
func holdCommits(t *testing.T, b *Badger) (release func()) {
	t.Helper()
	held, hold := make(chan struct{}), make(chan struct{})
	op := &writeOp{run: func() error {
		close(held)
		<-hold
		return nil
	}}
	if err := b.submit(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	<-held
	return func() {
		close(hold)
		if err := <-op.res; err != nil {
			t.Error(err)
		}
	}
}

// A new task's write queued with SubmitTaskLeased returns its lease before
// it is durable; a turn's commit fenced by that lease, submitted after, is
// stored only if the task's write was: when the task's write is refused
// (a lease of its id is stored, its record exists), the commit behind it
// is refused by its fence and writes nothing. A fence of a counted token
// (1, the first of a lease acquired by AcquireLease) never passes for it.
func TestSubmitTaskLeasedFencesWhatFollows(t *testing.T) {
	t.Parallel()
	b, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	// submitThenCommit holds the commit goroutine, queues the task and its
	// commit behind it, and lets both go in one batch.
	submitThenCommit := func(rec loop.TaskRecord) (l loop.Lease, taskErr, commitErr error) {
		release := holdCommits(t, b)
		l, wait, err := b.SubmitTaskLeased(ctx, rec, &loop.AgentMetadata{ContextID: rec.ContextID, Owner: "alice", Status: loop.AgentReady},
			"host-a", rec.ContextID, time.Minute)
		if err != nil {
			release()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- b.CommitTurn(ctx, endOf(rec, l)) }()
		// The commit is queued behind the task's write (the held write
		// was taken off the queue): wait until it is.
		for len(b.ops) < 2 {
			time.Sleep(time.Millisecond)
		}
		release()
		commitErr = <-done
		return l, wait(), commitErr
	}

	// Stored: both, in that order.
	rec := newTask("t-ok", "c-ok")
	l, taskErr, commitErr := submitThenCommit(rec)
	if taskErr != nil || commitErr != nil {
		t.Fatalf("task write %v, commit %v; want both stored", taskErr, commitErr)
	}
	if l.Token < 2 || l.Token >= 1<<53 || l.Owner != "host-a" || l.Key != "t-ok" {
		t.Fatalf("lease %+v: want the task's key, its owner and a drawn token in [2, 2^53)", l)
	}
	got, err := b.LoadTask(ctx, "t-ok")
	if err != nil || got.Status != loop.TaskCompleted || got.Version != 2 {
		t.Fatalf("task %+v, %v; want completed at version 2", got, err)
	}
	if msgs, err := b.Recent(ctx, "c-ok", 10); err != nil || len(msgs) != 2 {
		t.Fatalf("messages %d, %v; want 2", len(msgs), err)
	}

	// Refused because another host holds a lease of the id: nothing of
	// the commit behind it is stored.
	if _, err := b.AcquireLease(ctx, "t-held", "host-b", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, taskErr, commitErr = submitThenCommit(newTask("t-held", "c-held"))
	if !errors.Is(taskErr, loop.ErrLeaseHeld) || !errors.Is(commitErr, loop.ErrLeaseLost) {
		t.Fatalf("task write %v, commit %v; want ErrLeaseHeld and ErrLeaseLost", taskErr, commitErr)
	}
	if _, err := b.LoadTask(ctx, "t-held"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("task under another's lease: %v; want not found", err)
	}
	if msgs, _ := b.Recent(ctx, "c-held", 10); len(msgs) != 0 {
		t.Fatalf("the refused turn stored %d messages", len(msgs))
	}

	// Refused because the task exists (its version is not 0): the lease
	// was not stored either, so the fence fails.
	if err := b.SaveTask(ctx, newTask("t-exists", "c-exists")); err != nil {
		t.Fatal(err)
	}
	_, taskErr, commitErr = submitThenCommit(newTask("t-exists", "c-exists"))
	if !errors.Is(taskErr, loop.ErrConflict) || !errors.Is(commitErr, loop.ErrLeaseLost) {
		t.Fatalf("task write %v, commit %v; want ErrConflict and ErrLeaseLost", taskErr, commitErr)
	}
	if msgs, _ := b.Recent(ctx, "c-exists", 10); len(msgs) != 0 {
		t.Fatalf("the refused turn stored %d messages", len(msgs))
	}
	ls, err := b.ListLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ls {
		if x.Key == "t-exists" {
			t.Fatalf("lease %+v stored by a refused write", x)
		}
	}

	// A lease acquired the counted way is refused to SubmitTaskLeased, and
	// a fence with the counted first token does not pass for a drawn one.
	rec = newTask("t-counted", "c-counted")
	if _, err := b.AcquireLease(ctx, "t-counted", "host-a", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, wait, err := b.SubmitTaskLeased(ctx, rec, nil, "host-a", "c-counted", time.Minute); err != nil || !errors.Is(wait(), loop.ErrLeaseHeld) {
		t.Fatalf("a task whose lease its own owner holds: %v; want ErrLeaseHeld", err)
	}
	fresh := newTask("t-drawn", "c-drawn")
	l, wait, err := b.SubmitTaskLeased(ctx, fresh, nil, "host-a", "c-drawn", time.Minute)
	if err != nil || wait() != nil {
		t.Fatal(err, wait())
	}
	counted := l
	counted.Token = 1
	if err := b.CommitTurn(ctx, endOf(fresh, counted)); !errors.Is(err, loop.ErrLeaseLost) {
		t.Fatalf("commit fenced by token 1 under a drawn lease: %v; want ErrLeaseLost", err)
	}
}

// A new task's write held back with DeferTaskLeased goes with the commit
// of its turn's end, fenced by its lease: one write (one sync), the task's
// first, each answered on its own; not in the store before. Alone, it
// goes when flushed, at its deadline, or at Close (it is then found after
// the store opens again). Refused (another's lease), the commit behind it
// is refused too and writes nothing.
func TestDeferTaskLeasedGoesWithItsCommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()

	rec := newTask("t-one", "c-one")
	l, _, wait, err := b.DeferTaskLeased(ctx, rec, nil, "host-a", "c-one", time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.LoadTask(ctx, "t-one"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("a held task write is in the store before its commit: %v", err)
	}
	before := b.Commits()
	if err := b.CommitTurn(ctx, endOf(rec, l)); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if n := b.Commits() - before; n != 1 {
		t.Fatalf("the task and its turn's commit took %d commits, want 1", n)
	}
	if got, err := b.LoadTask(ctx, "t-one"); err != nil || got.Status != loop.TaskCompleted || got.Version != 2 {
		t.Fatalf("task %+v, %v; want completed at version 2", got, err)
	}

	// Flushed, and at its deadline: alone.
	_, flush, wait, err := b.DeferTaskLeased(ctx, newTask("t-flushed", "c-two"), nil, "host-a", "c-two", time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	flush()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	_, _, wait, err = b.DeferTaskLeased(ctx, newTask("t-deadline", "c-three"), nil, "host-a", "c-three", time.Minute, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t-flushed", "t-deadline"} {
		if got, err := b.LoadTask(ctx, id); err != nil || got.Status != loop.TaskWorking {
			t.Fatalf("task %s: %+v, %v; want stored, working", id, got, err)
		}
	}

	// Refused: the commit behind it writes nothing.
	if _, err := b.AcquireLease(ctx, "t-held", "host-b", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	rec = newTask("t-held", "c-held")
	l, _, wait, err = b.DeferTaskLeased(ctx, rec, nil, "host-a", "c-held", time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CommitTurn(ctx, endOf(rec, l)); !errors.Is(err, loop.ErrLeaseLost) {
		t.Fatalf("commit behind a refused task write: %v; want ErrLeaseLost", err)
	}
	if err := wait(); !errors.Is(err, loop.ErrLeaseHeld) {
		t.Fatalf("task write under another's lease: %v; want ErrLeaseHeld", err)
	}
	if msgs, _ := b.Recent(ctx, "c-held", 10); len(msgs) != 0 {
		t.Fatalf("the refused turn stored %d messages", len(msgs))
	}

	// Held at Close: written before the store closes.
	_, _, wait, err = b.DeferTaskLeased(ctx, newTask("t-closing", "c-four"), nil, "host-a", "c-four", time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("held write at Close: %v", err)
	}
	b2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b2.Close() })
	if got, err := b2.LoadTask(ctx, "t-closing"); err != nil || got.Status != loop.TaskWorking {
		t.Fatalf("task held at Close: %+v, %v; want stored", got, err)
	}
	if _, _, _, err := b.DeferTaskLeased(ctx, newTask("t-late", "c-five"), nil, "host-a", "c-five", time.Minute, time.Hour); !errors.Is(err, ErrClosed) {
		t.Fatalf("defer on a closed store: %v; want ErrClosed", err)
	}
}
