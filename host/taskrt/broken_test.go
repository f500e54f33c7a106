package taskrt

import (
	"context"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// A task record that no longer decodes (a crash of the disk, or a record
// stored before the host bounded nesting depth) must not be met again at
// every start: recovery replaces it by a failed record that says why and
// announces the end; the tasks around it are listed as before.
func TestRecoverSettlesAnUndecodableTask(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	h := newHarness(t, dir, &scriptModel{}, nil)
	now := time.Now().UTC()
	for _, id := range []string{"t1", "t2", "t3"} {
		if _, err := h.db.AcquireLease(ctx, id, "host-dead", "c1", time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.db.SaveTask(ctx, loop.TaskRecord{ID: "t1", ContextID: "c1", Owner: "alice", Status: loop.TaskWorking,
		CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	// t3 is sound, its client's metadata holds the key "broken": it is
	// resumed, not failed as damaged (and its record not replaced).
	if err := h.db.SaveTask(ctx, loop.TaskRecord{ID: "t3", ContextID: "c1", Owner: "alice", Status: loop.TaskWorking,
		CreatedAt: now.Add(2 * time.Second), UpdatedAt: now, Metadata: map[string]any{"broken": true},
		History: []loop.Message{{Role: loop.RoleUser, Content: "hello"}}, TurnInput: 1}); err != nil {
		t.Fatal(err)
	}
	// t2 ended, its end not announced.
	if err := h.db.SaveTask(ctx, loop.TaskRecord{ID: "t2", ContextID: "c1", Owner: "alice", Status: loop.TaskCompleted,
		CreatedAt: now.Add(time.Second), UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	h.close()
	raw, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	deep := []byte(`{"id":"x","history":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`)
	if err := raw.Update(func(txn *badger.Txn) error {
		if err := txn.Set([]byte("task/t1"), deep); err != nil {
			return err
		}
		return txn.Set([]byte("task/t2"), []byte("garbage"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the dead host's leases lapse

	h = newHarness(t, dir, &scriptModel{}, nil)
	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2"} {
		rec, err := h.db.LoadTask(ctx, id)
		if err != nil || rec.Status != loop.TaskFailed || rec.Owner != "alice" || !strings.Contains(rec.Message, "could not be read back") {
			t.Fatalf("%s after recovery: %v %+v", id, err, rec)
		}
		evs, err := h.ev.events(ctx, id)
		if err != nil || len(evs) == 0 {
			t.Fatalf("%s: no end announced: %v", id, err)
		}
		if tc, ok := evs[len(evs)-1].(*loop.TaskComplete); !ok || tc.Status != loop.TaskFailed {
			t.Fatalf("%s: last event %+v, want its failed end", id, evs[len(evs)-1])
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rec, err := h.db.LoadTask(ctx, "t3")
		if err != nil || strings.Contains(rec.Message, "could not be read back") || rec.Status == loop.TaskFailed {
			t.Fatalf("t3 (sound, a client's metadata key \"broken\") after recovery: %v %+v", err, rec)
		}
		if rec.Status == loop.TaskCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("t3 not resumed to its end: %+v", rec)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		leases, _ := h.db.ListLeases(ctx) // t3's is released just after its end
		if len(leases) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leases after recovery = %+v, want none", leases)
		}
	}
	list, err := h.db.ListTasks(ctx, loop.TaskFilter{Owner: "alice"})
	if err != nil || len(list) != 3 {
		t.Fatalf("ListTasks after recovery: %v %+v", err, list)
	}
}

// The same on Redis: a task whose record does not decode is listed from
// its index entry and settled by recovery, also one saved before the
// index entry kept its status.
func TestRecoverSettlesAnUndecodableTaskRedis(t *testing.T) {
	t.Parallel()
	h := newCluster(t, 1, &scriptModel{}, nil)[0]
	ctx := context.Background()
	now := time.Now().UTC()
	for i, id := range []string{"t1", "t2"} {
		if _, err := h.st.AcquireLease(ctx, id, "host-dead", "c1", time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := h.st.SaveTask(ctx, loop.TaskRecord{ID: id, ContextID: "c1", Owner: "alice", Status: loop.TaskWorking,
			CreatedAt: now.Add(time.Duration(i) * time.Second), UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := h.st.Client().HSet(ctx, h.st.Prefix()+"t:"+id, "d", "garbage").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// t2's index entry is as an earlier version of the store wrote it:
	// no status, no update time.
	if err := h.st.Client().HDel(ctx, h.st.Prefix()+"tx:t2", "s", "u").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the dead host's leases lapse

	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2"} {
		rec, err := h.st.LoadTask(ctx, id)
		if err != nil || rec.Status != loop.TaskFailed || rec.Owner != "alice" || !strings.Contains(rec.Message, "could not be read back") {
			t.Fatalf("%s after recovery: %v %+v", id, err, rec)
		}
		evs, err := h.ev.events(ctx, id)
		if err != nil || len(evs) == 0 {
			t.Fatalf("%s: no end announced: %v", id, err)
		}
		if tc, ok := evs[len(evs)-1].(*loop.TaskComplete); !ok || tc.Status != loop.TaskFailed {
			t.Fatalf("%s: last event %+v, want its failed end", id, evs[len(evs)-1])
		}
	}
	if leases, _ := h.st.ListLeases(ctx); len(leases) != 0 {
		t.Fatalf("leases after recovery = %+v, want none", leases)
	}
	list, err := h.st.ListTasks(ctx, loop.TaskFilter{Owner: "alice"})
	if err != nil || len(list) != 2 {
		t.Fatalf("ListTasks after recovery: %v %+v", err, list)
	}
}
