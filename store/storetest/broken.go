package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// testBrokenTask: a task record that does not decode takes down neither
// the lists nor their pages. It is listed as broken beside the others,
// from what the store's index knows (id, context, owner, agent, status),
// with metadata.broken and the reason in its message, under every filter
// it matches, and a page token naming it works; deleting it and saving
// the task again replaces it. Recovery relies on all of it to settle such
// a task (host/taskrt).
func testBrokenTask(t *testing.T, s Stores) {
	if s.Damage == nil {
		t.Skip("this store keeps task records as Go values: there are no bytes to damage")
	}
	ctx := context.Background()
	ts := s.Tasks
	now := time.Now().UTC().Truncate(time.Millisecond)
	recs := []loop.TaskRecord{
		{ID: "a", ContextID: "c1", Owner: "alice", AgentID: "g1", Status: loop.TaskWorking, CreatedAt: now.Add(-2 * time.Second), UpdatedAt: now.Add(-time.Second)},
		{ID: "b", ContextID: "c1", Owner: "alice", Status: loop.TaskCompleted, CreatedAt: now.Add(-time.Second), UpdatedAt: now},
		// A client's own metadata may hold the key "broken": the task is
		// sound all the same (only Broken says a record does not decode).
		{ID: "c", ContextID: "c2", Owner: "bob", Status: loop.TaskWorking, CreatedAt: now, UpdatedAt: now,
			Metadata: map[string]any{"broken": true}},
	}
	for _, r := range recs {
		if err := ts.SaveTask(ctx, r); err != nil {
			t.Fatalf("SaveTask(%q): %v", r.ID, err)
		}
	}
	s.Damage(t, "a")
	if _, err := ts.LoadTask(ctx, "a"); !errors.Is(err, loop.ErrCorrupt) {
		t.Fatalf("LoadTask of the damaged record: %v, want loop.ErrCorrupt", err)
	}
	list := func(f loop.TaskFilter) []loop.TaskRecord {
		t.Helper()
		got, err := ts.ListTasks(ctx, f)
		if err != nil {
			t.Fatalf("ListTasks(%+v) beside a damaged record: %v", f, err)
		}
		return got
	}
	ids := func(rs []loop.TaskRecord) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.ID
		}
		return out
	}
	want := func(f loop.TaskFilter, wantIDs ...string) []loop.TaskRecord {
		t.Helper()
		got := list(f)
		if g := ids(got); !slices.Equal(g, wantIDs) {
			t.Fatalf("ListTasks(%+v) = %q, want %q", f, g, wantIDs)
		}
		return got
	}
	all := want(loop.TaskFilter{}, "c", "b", "a")
	br := all[2]
	if !br.Broken || br.Metadata["broken"] != true || br.Message == "" || br.ContextID != "c1" || br.Owner != "alice" ||
		br.AgentID != "g1" || br.Status != loop.TaskWorking || !br.CreatedAt.Equal(recs[0].CreatedAt) {
		t.Fatalf("the damaged task is listed as %+v, want it marked broken with its context, owner, agent, status, creation time and a reason", br)
	}
	for _, r := range all[:2] {
		if r.Broken {
			t.Fatalf("a sound task listed as broken: %+v", r)
		}
	}
	want(loop.TaskFilter{Owner: "alice"}, "b", "a")
	want(loop.TaskFilter{ContextID: "c1"}, "b", "a")
	want(loop.TaskFilter{AgentID: "g1"}, "a")
	want(loop.TaskFilter{Owner: "bob"}, "c")
	want(loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskSubmitted, loop.TaskWorking}}, "c", "a")
	want(loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskCompleted}}, "b")
	// Pages: one may end with the broken task, and the next starts after it.
	want(loop.TaskFilter{Limit: 2}, "c", "b")
	want(loop.TaskFilter{After: "b", Limit: 2}, "a")
	want(loop.TaskFilter{After: "a"})
	want(loop.TaskFilter{Owner: "alice", After: "a"})

	// Deleting it and saving the task again replaces it.
	if err := ts.DeleteTask(ctx, "a"); err != nil {
		t.Fatalf("DeleteTask of the damaged record: %v", err)
	}
	want(loop.TaskFilter{}, "c", "b")
	again := recs[0]
	again.Status = loop.TaskFailed
	if err := ts.SaveTask(ctx, again); err != nil {
		t.Fatalf("SaveTask over the deleted damaged record: %v", err)
	}
	got := want(loop.TaskFilter{Owner: "alice"}, "b", "a")
	if got[1].Status != loop.TaskFailed || got[1].Broken || got[1].Metadata["broken"] != nil {
		t.Fatalf("the task saved again is listed as %+v", got[1])
	}
	if r, err := ts.LoadTask(ctx, "a"); err != nil || r.Status != loop.TaskFailed {
		t.Fatalf("LoadTask of the task saved again: %v %+v", err, r)
	}
}
