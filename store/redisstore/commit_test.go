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

// A real redis-server: a turn's end is one script with its commit. The
// records before the end, the commit and the end's records are written
// together; a commit refused (the task written meanwhile, a lease lost)
// appends the records before it and neither the end nor any part of the
// commit.
func TestRedisAppendCommit(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := opener(srv)(t)
	other := opener(srv)(t)
	ev := s.Events()
	ctx := context.Background()
	if !ev.Commits(s) || ev.Commits(other) || ev.Commits(nil) {
		t.Fatal("Commits: want true for its own store only")
	}
	now := time.Now()
	if err := s.SaveTask(ctx, loop.TaskRecord{ID: "t", ContextID: "c", Status: loop.TaskWorking, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	working, err := s.LoadTask(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	read := func(stream string) []string {
		t.Helper()
		recs, err := ev.Read(ctx, stream, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, r := range recs {
			if r.Seq != uint64(i+1) {
				t.Fatalf("%s: record %d has seq %d", stream, i, r.Seq)
			}
			out = append(out, string(r.Data))
		}
		return out
	}
	appends := func(before string, after ...string) []loop.CommitAppend {
		var a [][]byte
		for _, s := range after {
			a = append(a, []byte(s))
		}
		return []loop.CommitAppend{{Stream: "task-t", Before: [][]byte{[]byte(before)}, After: a},
			{Stream: "ctx-c", Before: [][]byte{[]byte(before)}, After: a}}
	}
	done := working
	done.Status = loop.TaskCompleted
	commit := loop.TurnCommit{ContextID: "c", Agent: loop.AgentMetadata{ContextID: "c", CreatedAt: now, LastActivity: now},
		Messages: []loop.Message{{Role: loop.RoleAssistant, Content: "answer"}}, Task: &done}

	first, commitErr, err := ev.AppendCommit(ctx, appends("text", "status", "complete"), commit)
	if err != nil || commitErr != nil || !slices.Equal(first, []uint64{1, 1}) {
		t.Fatalf("AppendCommit: first %v, commit %v, err %v", first, commitErr, err)
	}
	want := []string{"text", "status", "complete"}
	if got := read("task-t"); !slices.Equal(got, want) {
		t.Fatalf("task stream %v, want %v", got, want)
	}
	if got := read("ctx-c"); !slices.Equal(got, want) {
		t.Fatalf("context stream %v, want %v", got, want)
	}
	stored, err := s.LoadTask(ctx, "t")
	if err != nil || stored.Status != loop.TaskCompleted || stored.Version != working.Version+1 {
		t.Fatalf("task after the commit: %s v%d (%v), want completed v%d", stored.Status, stored.Version, err, working.Version+1)
	}
	if msgs, err := s.Recent(ctx, "c", 10); err != nil || len(msgs) != 1 || msgs[0].Content != "answer" {
		t.Fatalf("history after the commit: %v, %v", msgs, err)
	}

	// The same commit again: its version is stale now.
	stale := working
	stale.Status = loop.TaskFailed
	commit.Task = &stale
	commit.Messages = []loop.Message{{Role: loop.RoleAssistant, Content: "never"}}
	first, commitErr, err = ev.AppendCommit(ctx, appends("late", "status-2", "complete-2"), commit)
	if err != nil || !errors.Is(commitErr, loop.ErrConflict) || !slices.Equal(first, []uint64{4, 4}) {
		t.Fatalf("stale AppendCommit: first %v, commit %v, err %v; want the records before at 4 and a conflict", first, commitErr, err)
	}
	want = append(want, "late")
	if got := read("task-t"); !slices.Equal(got, want) {
		t.Fatalf("task stream after a refused commit %v, want %v", got, want)
	}
	if stored, _ := s.LoadTask(ctx, "t"); stored.Status != loop.TaskCompleted {
		t.Fatalf("a refused commit wrote the task: %s", stored.Status)
	}
	if n, _ := s.Count(ctx, "c"); n != 1 {
		t.Fatalf("a refused commit wrote its messages: %d in the history", n)
	}

	// A lease the committer no longer holds.
	lease, err := s.AcquireLease(ctx, "task:t", "host-a", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := s.LoadTask(ctx, "t")
	commit.Task = &fresh
	lost := lease
	lost.Token++
	commit.Lease = &lost
	first, commitErr, err = ev.AppendCommit(ctx, []loop.CommitAppend{{Stream: "task-t", After: [][]byte{[]byte("x")}}}, commit)
	if err != nil || !errors.Is(commitErr, loop.ErrLeaseLost) || !slices.Equal(first, []uint64{0}) {
		t.Fatalf("AppendCommit under a lost lease: first %v, commit %v, err %v; want nothing appended and the lease lost", first, commitErr, err)
	}
	if got := read("task-t"); !slices.Equal(got, want) {
		t.Fatalf("task stream after a lost lease %v, want %v", got, want)
	}
	commit.Lease = &lease
	if _, commitErr, err = ev.AppendCommit(ctx, []loop.CommitAppend{{Stream: "task-t", After: [][]byte{[]byte("x")}}}, commit); err != nil || commitErr != nil {
		t.Fatalf("AppendCommit under the lease held: %v, %v", commitErr, err)
	}

	// Streams named twice, or none, are refused before anything is written.
	if _, _, err := ev.AppendCommit(ctx, []loop.CommitAppend{{Stream: "a"}, {Stream: "a"}}, commit); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("a stream named twice: %v", err)
	}
	if _, _, err := ev.AppendCommit(ctx, nil, commit); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("no streams: %v", err)
	}
}

// AppendStreams writes each stream's records in one script and answers
// each stream's first sequence number.
func TestRedisAppendStreams(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ev := opener(srv)(t).Events()
	ctx := context.Background()
	if _, err := ev.Append(ctx, "b", []byte("b1"), []byte("b2")); err != nil {
		t.Fatal(err)
	}
	first, err := ev.AppendStreams(ctx, []loop.StreamAppend{{Stream: "a", Data: [][]byte{[]byte("a1")}},
		{Stream: "b", Data: [][]byte{[]byte("b3"), nil}}})
	if err != nil || !slices.Equal(first, []uint64{1, 3}) {
		t.Fatalf("AppendStreams: %v, %v; want [1 3]", first, err)
	}
	recs, err := ev.Read(ctx, "b", 2, 0)
	if err != nil || len(recs) != 2 || string(recs[0].Data) != "b3" || recs[1].Seq != 4 || len(recs[1].Data) != 0 {
		t.Fatalf("stream b after it: %v, %v", recs, err)
	}
	if _, err := ev.AppendStreams(ctx, []loop.StreamAppend{{Stream: "a"}}); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("a stream without records: %v", err)
	}
}
