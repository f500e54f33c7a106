package loop_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// notingCommitter closes committed once a turn's commit has been tried.
type notingCommitter struct {
	*store.Badger
	once      sync.Once
	committed chan struct{}
}

func (c *notingCommitter) CommitTurn(ctx context.Context, tc loop.TurnCommit) error {
	err := c.Badger.CommitTurn(ctx, tc)
	c.once.Do(func() { close(c.committed) })
	return err
}

// A turn given Queued (its task's write queued, not yet durable) that runs
// no tool commits its end behind that write without waiting for Stored:
// Stored here returns only once the commit was tried. When the task's
// write is refused, the commit behind it is refused by its lease's fence,
// nothing of the turn is stored, and the agent is as before the turn (its
// next turn neither sees the refused one's messages nor counts it).
func TestQueuedTurnCommitsBehindItsTask(t *testing.T) {
	t.Parallel()
	b, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	l, err := loop.New(loop.Config{Model: echoModel()})
	if err != nil {
		t.Fatal(err)
	}
	nc := &notingCommitter{Badger: b}
	a := newAgent(t, b, l, func(c *loop.AgentConfig) { c.Commit = nc })
	ctx := context.Background()
	run := func(id, msg string) (loop.Outcome, error) {
		nc.committed, nc.once = make(chan struct{}), sync.Once{}
		now := time.Now().UTC()
		rec := loop.TaskRecord{ID: id, ContextID: "ctx-a", Owner: "alice", Status: loop.TaskWorking,
			History: []loop.Message{{Role: loop.RoleUser, Content: msg}}, TurnInput: 1, CreatedAt: now, UpdatedAt: now}
		lease, wait, err := b.SubmitTaskLeased(ctx, rec, nil, "host-a", "ctx-a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		stored := rec
		stored.Version = 1
		return a.RunTask(ctx, loop.RunInput{TaskID: id, Task: &stored,
			Queued: func() (*loop.Lease, error) { return &lease, nil },
			Stored: func() (*loop.Lease, error) {
				select {
				case <-nc.committed:
				case <-time.After(time.Minute):
					return nil, errors.New("the turn waited for Stored before committing its end")
				}
				return &lease, wait()
			}})
	}

	out, err := run("t-one", "first")
	if err != nil || out.Status != loop.TaskCompleted {
		t.Fatalf("turn: %s, %v, %v; want completed", out.Status, out.Err, err)
	}
	rec, err := b.LoadTask(ctx, "t-one")
	if err != nil || rec.Status != loop.TaskCompleted || rec.Version != 2 {
		t.Fatalf("task %s v%d, %v; want completed at version 2", rec.Status, rec.Version, err)
	}

	// The task's write refused: another host holds a lease of its id.
	if _, err := b.AcquireLease(ctx, "t-two", "host-b", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	out, err = run("t-two", "refused")
	if err != nil || out.Status != loop.TaskFailed || !errors.Is(out.Err, loop.ErrLeaseLost) {
		t.Fatalf("turn: %s, %v, %v; want failed, its commit refused by the fence", out.Status, out.Err, err)
	}
	if _, err := b.LoadTask(ctx, "t-two"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("refused task: %v; want not stored", err)
	}
	if st := a.Status(); st != loop.AgentReady {
		t.Fatalf("agent %s after a turn whose task was not stored; want ready", st)
	}
	if m := a.Metadata(); m.TurnCount != 1 || m.Error != "" {
		t.Fatalf("agent counts %d turns, error %q; want 1 and none (the refused turn undone)", m.TurnCount, m.Error)
	}

	out, err = run("t-three", "third")
	if err != nil || out.Status != loop.TaskCompleted {
		t.Fatalf("next turn: %s, %v, %v; want completed", out.Status, out.Err, err)
	}
	if strings.Contains(out.Content, "refused") || !strings.Contains(out.Content, "first | third") {
		t.Fatalf("next turn saw %q; want the first and third messages only", out.Content)
	}
	msgs, err := b.Recent(ctx, "ctx-a", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Content == "refused" {
			t.Fatalf("the refused turn's message is stored: %+v", msgs)
		}
	}
	if len(msgs) != 4 {
		t.Fatalf("%d messages stored, want 4 (two turns)", len(msgs))
	}
}
