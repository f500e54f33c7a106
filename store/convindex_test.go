package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// saveOldLayout writes an agent record as a store without the index by
// last activity did (the record alone), and n messages.
func saveOldLayout(t fataler, b *Badger, id string, last time.Time, n int) {
	t.Helper()
	ctx := context.Background()
	v, err := json.Marshal(loop.AgentMetadata{ContextID: id, CreatedAt: last.Add(-time.Minute), LastActivity: last})
	if err != nil {
		t.Fatal(err)
	}
	k := agentKey(id)
	if err := b.write(ctx, &writeOp{apply: func(*badger.Txn) ([]mutation, error) {
		return []mutation{set(k, v)}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]loop.Message, n)
	for i := range msgs {
		msgs[i] = loop.Message{Role: loop.RoleUser, Content: id + "-" + strconv.Itoa(i+1)}
	}
	if n > 0 {
		if err := b.Append(ctx, id, msgs...); err != nil {
			t.Fatal(err)
		}
	}
}

type fataler interface {
	Helper()
	Fatal(args ...any)
}

// panicking is a fataler for a test's child process.
type panicking struct{}

func (panicking) Helper()           {}
func (panicking) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// wantIndexed checks that the index by last activity holds exactly one
// entry per agent record, at the record's time, and the built marker.
func wantIndexed(t *testing.T, b *Badger) {
	t.Helper()
	err := b.db.View(func(txn *badger.Txn) error {
		want := map[string]bool{}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfxAgent)})
		for it.Rewind(); it.Valid(); it.Next() {
			k, ok := storedConvIdx(txn, it.Item().KeyCopy(nil))
			if !ok {
				t.Errorf("agent record %q unreadable", it.Item().Key())
			}
			want[string(k)] = true
		}
		it.Close()
		it = txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfxConvIdx)})
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if !want[string(it.Item().Key())] {
				t.Errorf("index entry %q names no agent record at its time", it.Item().Key())
			}
			n++
		}
		if n != len(want) {
			t.Errorf("%d index entries for %d agent records", n, len(want))
		}
		if _, err := txn.Get([]byte(convIdxBuiltKey)); err != nil {
			t.Errorf("built marker: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The index follows the record: saved again later, one entry at the new
// time; deleted, none. A turn's commit and a leased task save keep it too.
func TestConversationIndexFollowsTheRecord(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	now := time.Now()
	if _, err := b.ExpireConversations(ctx, now.Add(-time.Hour)); err != nil {
		t.Fatal(err) // an empty store: marked built
	}
	for i := range 3 {
		at := now.Add(time.Duration(i) * time.Minute)
		if err := b.SaveAgent(ctx, loop.AgentMetadata{ContextID: "a/b%c", CreatedAt: now, LastActivity: at}); err != nil {
			t.Fatal(err)
		}
		if k := rawKeys(t, b, pfxConvIdx); k != 1 {
			t.Fatalf("save %d: %d index entries, want 1", i, k)
		}
	}
	err := b.CommitTurn(ctx, loop.TurnCommit{ContextID: "t", Agent: loop.AgentMetadata{ContextID: "t", CreatedAt: now, LastActivity: now},
		Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SaveTaskLeased(ctx, loop.TaskRecord{ID: "task-l", ContextID: "l", Status: loop.TaskWorking, CreatedAt: now},
		&loop.AgentMetadata{ContextID: "l", CreatedAt: now, LastActivity: now}, "me", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	wantIndexed(t, b)
	if k := rawKeys(t, b, pfxConvIdx); k != 3 {
		t.Fatalf("%d index entries, want 3", k)
	}
	for _, id := range []string{"a/b%c", "t", "l"} {
		if err := b.DeleteAgent(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if k := rawKeys(t, b, pfxConvIdx); k != 0 {
		t.Fatalf("%d index entries after the deletes, want 0", k)
	}
}

// The expiry reads the index entries older than its cutoff, not every
// conversation: 200 recent ones are not listed.
func TestExpireConversationsReadsIdleEntriesOnly(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	now := time.Now()
	for i := range 200 {
		conversation(t, b, "recent-"+strconv.Itoa(i), now, 0, "")
	}
	conversation(t, b, "idle-1", now.Add(-3*time.Hour), 2, "")
	conversation(t, b, "idle-2", now.Add(-2*time.Hour), 2, loop.TaskCompleted)
	conversation(t, b, "paused", now.Add(-2*time.Hour), 2, loop.TaskWaitingInput)
	if _, err := b.ExpireConversations(ctx, now.Add(-24*time.Hour)); err != nil {
		t.Fatal(err) // builds the (already complete) index's marker
	}
	listed := 0
	convListed = func(n int) { listed += n }
	t.Cleanup(func() { convListed = nil })
	gone, err := b.ExpireConversations(ctx, now.Add(-time.Hour))
	slices.Sort(gone)
	if err != nil || !slices.Equal(gone, []string{"idle-1", "idle-2"}) {
		t.Fatalf("deleted %v (%v), want [idle-1 idle-2]", gone, err)
	}
	if listed != 3 {
		t.Fatalf("the expiry listed %d entries, want the 3 idle ones", listed)
	}
	wantConversation(t, b, "idle-1", -1)
	wantConversation(t, b, "paused", 2)
	wantIndexed(t, b)
	listed = 0
	if gone, err := b.ExpireConversations(ctx, now.Add(-time.Hour)); err != nil || len(gone) != 0 || listed != 1 {
		t.Fatalf("second sweep: %v, %v, listed %d; want the paused one only", gone, err, listed)
	}
}

// A store written before the index existed: its idle conversations
// expire, its recent ones stay, and the index is complete afterwards.
func TestExpireConversationsOldLayout(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	now := time.Now()
	convBackfillPage = 2 // several writes
	t.Cleanup(func() { convBackfillPage = 256 })
	for i := range 5 {
		saveOldLayout(t, b, "idle-"+strconv.Itoa(i), now.Add(-2*time.Hour), 3)
	}
	saveOldLayout(t, b, "recent", now, 2)
	if k := rawKeys(t, b, pfxConvIdx); k != 0 {
		t.Fatalf("%d index entries in the old layout", k)
	}
	gone, err := b.ExpireConversations(ctx, now.Add(-time.Hour))
	if err != nil || len(gone) != 5 {
		t.Fatalf("deleted %v (%v), want the 5 idle", gone, err)
	}
	for i := range 5 {
		wantConversation(t, b, "idle-"+strconv.Itoa(i), -1)
	}
	wantConversation(t, b, "recent", 2)
	wantIndexed(t, b)
}

const convIdxCrashEnv = "LOOOPY_STORE_CONVIDX_CRASH"

// A kill -9 between two writes of the backfill of an old-layout store, or
// between two writes of the expiry's first step, never deletes a
// conversation that got a message since, and never leaves an idle one
// undeletable: the next expiry (after a restart) finishes.
func TestConversationIndexKilledMidway(t *testing.T) {
	if v := os.Getenv(convIdxCrashEnv); v != "" {
		convIndexAndDie(v[:1], v[2:])
		return
	}
	for _, mode := range []string{"b", "e"} {
		name := map[string]string{"b": "backfill", "e": "expiry"}[mode]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestConversationIndexKilledMidway$", "-test.count=1")
			cmd.Env = append(os.Environ(), convIdxCrashEnv+"="+mode+":"+dir)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child was to die of SIGKILL midway: %v\n%s", err, out)
			}
			b := openSweepless(t, dir, nil)
			ctx := context.Background()
			idle := 0
			for i := range 6 {
				if _, err := b.LoadAgent(ctx, "idle-"+strconv.Itoa(i)); err == nil {
					idle++
				}
			}
			if mode == "b" {
				if idle != 6 {
					t.Fatalf("%d idle conversations left after a kill in the backfill, want 6", idle)
				}
				if k := rawKeys(t, b, pfxConvIdx); k == 0 || k >= 8 {
					t.Fatalf("%d index entries after the kill: the kill did not fall midway", k)
				}
				if k := rawKeys(t, b, convIdxBuiltKey); k != 0 {
					t.Fatal("marked built after a kill in the backfill")
				}
			} else if idle == 0 || idle == 6 {
				t.Fatalf("%d of 6 idle conversations left: the kill did not fall midway", idle)
			}
			// idle-5 gets a message (its turn saves its record) after the
			// restart: it is kept, whatever its index entry said.
			if _, err := b.LoadAgent(ctx, "idle-5"); err != nil {
				t.Fatalf("idle-5 was to be left for the next expiry: %v", err)
			}
			if err := b.CommitTurn(ctx, loop.TurnCommit{ContextID: "idle-5",
				Agent:    loop.AgentMetadata{ContextID: "idle-5", CreatedAt: time.Now().Add(-3 * time.Hour), LastActivity: time.Now()},
				Messages: []loop.Message{{Role: loop.RoleUser, Content: "idle-5-4"}}}); err != nil {
				t.Fatal(err)
			}
			gone, err := b.ExpireConversations(ctx, time.Now().Add(-time.Hour))
			if err != nil || len(gone) != idle-1 {
				t.Fatalf("after the restart deleted %v (%v), want the %d idle left but idle-5", gone, err, idle-1)
			}
			for i := range 5 {
				wantConversation(t, b, "idle-"+strconv.Itoa(i), -1)
			}
			wantConversation(t, b, "idle-5", 4)
			wantConversation(t, b, "recent", 2)
			wantConversation(t, b, "recent-old", 2)
			wantIndexed(t, b)
		})
	}
}

// convIndexAndDie is the child of TestConversationIndexKilledMidway: an
// old-layout store of six idle conversations and one recent one (and, for
// the expiry, a recent one indexed), SIGKILL after the second write of the
// backfill (mode b, two records a write) or of the expiry's first step
// (mode e, one conversation a write).
func convIndexAndDie(mode, dir string) {
	b, err := Open(Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	old := time.Now().Add(-2 * time.Hour)
	t := panicking{}
	for i := range 6 {
		saveOldLayout(t, b, "idle-"+strconv.Itoa(i), old, 3)
	}
	saveOldLayout(t, b, "recent-old", time.Now(), 2)
	writes := 0
	die := func() {
		if writes++; writes == 2 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	if mode == "b" {
		convBackfillPage = 2
		convIdxBackfillWrote = die
	} else {
		if err := b.backfillConvIndex(ctx); err != nil {
			panic(err)
		}
		convPerWrite = 1
		convWrote = die
	}
	if err := b.SaveAgent(ctx, loop.AgentMetadata{ContextID: "recent", CreatedAt: time.Now(), LastActivity: time.Now()}); err != nil {
		panic(err)
	}
	if err := b.Append(ctx, "recent", loop.Message{Role: loop.RoleUser, Content: "recent-1"}, loop.Message{Role: loop.RoleUser, Content: "recent-2"}); err != nil {
		panic(err)
	}
	_, _ = b.ExpireConversations(ctx, time.Now().Add(-time.Hour))
	panic("the expiry finished without being killed")
}

// The in-memory index: a conversation is in one bucket, the one of its
// last activity; the expiry's candidates are the buckets before its
// cutoff, in order.
func TestMemConvIndex(t *testing.T) {
	x := newMemConvIndex()
	base := time.Unix(1_700_000_000, 0)
	x.put("a", base)
	x.put("b", base.Add(10*time.Minute))
	x.put("c", base.Add(-5*time.Minute))
	x.put("a", base.Add(20*time.Minute)) // active again: moved
	if got := x.before(base.Add(time.Minute)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("before +1m: %v, want [c]", got)
	}
	got := x.before(base.Add(15 * time.Minute))
	if !slices.Equal(got, []string{"c", "b"}) {
		t.Fatalf("before +15m: %v, want [c b]", got)
	}
	x.remove("c")
	x.remove("b")
	x.remove("nobody")
	if len(x.order) != 1 || len(x.buckets) != 1 || len(x.at) != 1 {
		t.Fatalf("after the removals: %d buckets in order, %d sets, %d ids; want 1 each", len(x.order), len(x.buckets), len(x.at))
	}
	if got := x.before(base.Add(time.Hour)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("before +1h: %v, want [a]", got)
	}
}

// DeleteConversation deletes a conversation now, whatever its activity,
// with its history and index entry; one with an unfinished task is kept
// whole; an unknown one is not found.
func TestDeleteConversation(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	b := openSweepless(t, t.TempDir(), nil)
	conversation(t, b, "recent", now, 3, loop.TaskCompleted)
	conversation(t, b, "paused", now, 2, loop.TaskWaitingInput)
	conversation(t, b, "other", now, 2, "")
	if ok, err := b.DeleteConversation(ctx, "recent"); !ok || err != nil {
		t.Fatalf("delete recent: %v, %v", ok, err)
	}
	wantConversation(t, b, "recent", -1)
	if ok, err := b.DeleteConversation(ctx, "paused"); ok || err != nil {
		t.Fatalf("delete paused: %v, %v; want kept", ok, err)
	}
	wantConversation(t, b, "paused", 2)
	wantConversation(t, b, "other", 2)
	if _, err := b.DeleteConversation(ctx, "nobody"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("delete unknown: %v", err)
	}
	if _, err := b.ExpireConversations(ctx, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantIndexed(t, b)
	// The deletions to finish: the deleted conversations (the unknown one
	// too: what is left of it is the host's to delete), not the kept one,
	// until done.
	wantPending := func(p interface {
		PendingConversationDeletes(context.Context) (map[string]time.Time, error)
	}, want ...string) {
		t.Helper()
		got, err := p.PendingConversationDeletes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := slices.Sorted(maps.Keys(got))
		if !slices.Equal(ids, want) {
			t.Fatalf("pending conversation deletes: %v, want %v", ids, want)
		}
		for id, at := range got {
			if at.Before(now.Add(-time.Minute)) || at.After(time.Now()) {
				t.Fatalf("pending delete of %s at %v, want about %v", id, at, now)
			}
		}
	}
	wantPending(b, "nobody", "recent")
	if err := b.ConversationDeleteDone(ctx, "nobody"); err != nil {
		t.Fatal(err)
	}
	wantPending(b, "recent")

	m := NewMemory(MemoryOptions{SweepInterval: -1})
	t.Cleanup(func() { _ = m.Close() })
	for _, id := range []string{"recent", "paused"} {
		if err := m.SaveAgent(ctx, loop.AgentMetadata{ContextID: id, CreatedAt: now, LastActivity: now}); err != nil {
			t.Fatal(err)
		}
		if err := m.Append(ctx, id, loop.Message{Role: loop.RoleUser, Content: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.SaveTask(ctx, loop.TaskRecord{ID: "t", ContextID: "paused", Status: loop.TaskWaitingInput, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.DeleteConversation(ctx, "recent"); !ok || err != nil {
		t.Fatalf("memory: delete recent: %v, %v", ok, err)
	}
	if n, _ := m.Count(ctx, "recent"); n != 0 {
		t.Fatalf("memory: %d messages left", n)
	}
	if ok, err := m.DeleteConversation(ctx, "paused"); ok || err != nil {
		t.Fatalf("memory: delete paused: %v, %v; want kept", ok, err)
	}
	if _, err := m.DeleteConversation(ctx, "recent"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("memory: delete again: %v", err)
	}
	wantPending(m, "recent")
	if err := m.ConversationDeleteDone(ctx, "recent"); err != nil {
		t.Fatal(err)
	}
	wantPending(m)
}

// The in-memory store counts each conversation's unfinished tasks as
// they are saved, finished and deleted: the expiry keeps a conversation
// while the count is above zero and looks at no task.
func TestMemoryUnfinishedTaskCount(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{SweepInterval: -1})
	t.Cleanup(func() { _ = m.Close() })
	old := time.Now().Add(-2 * time.Hour)
	for _, id := range []string{"a", "b"} {
		if err := m.SaveAgent(ctx, loop.AgentMetadata{ContextID: id, CreatedAt: old, LastActivity: old}); err != nil {
			t.Fatal(err)
		}
	}
	save := func(id, conv string, st loop.TaskStatus) {
		t.Helper()
		rec, err := m.LoadTask(ctx, id)
		if errors.Is(err, loop.ErrNotFound) {
			rec = loop.TaskRecord{ID: id, ContextID: conv, CreatedAt: old}
		} else if err != nil {
			t.Fatal(err)
		}
		rec.Status = st
		if err := m.SaveTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	save("a1", "a", loop.TaskWorking)
	save("a2", "a", loop.TaskWaitingInput)
	save("b1", "b", loop.TaskWorking)
	expire := func(want ...string) {
		t.Helper()
		gone, err := m.ExpireConversations(ctx, time.Now().Add(-time.Hour))
		slices.Sort(gone)
		if err != nil || !slices.Equal(gone, want) {
			t.Fatalf("expired %v (%v), want %v", gone, err, want)
		}
	}
	expire()
	save("a1", "a", loop.TaskCompleted)
	expire() // a2 still waits
	if err := m.DeleteTask(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	save("b1", "b", loop.TaskWaitingInput) // still unfinished
	expire("a")
	save("b1", "b", loop.TaskCanceled)
	expire("b")
	if len(m.openTasks) != 0 {
		t.Fatalf("counts left: %v", m.openTasks)
	}
}
