package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// testTaskVersions: each write stores version+1; a write over another
// version, or a creation over a stored task, is refused with ErrConflict
// and changes nothing.
func testTaskVersions(t *testing.T, s Stores) {
	ctx := context.Background()
	tr := task("v", "c", 1, loop.TaskWorking)
	mustSaveTask(t, s.Tasks, tr)
	got, err := s.Tasks.LoadTask(ctx, "v")
	if err != nil || got.Version != 1 {
		t.Fatalf("LoadTask after the first write: version %d, %v; want 1", got.Version, err)
	}
	stale := got
	got.Status = loop.TaskCompleted
	got = mustSaveTask(t, s.Tasks, got)
	if got.Version != 2 {
		t.Fatalf("version after the second write = %d, want 2", got.Version)
	}
	// The writer that read version 1 lost the race.
	stale.Status = loop.TaskFailed
	if err := s.Tasks.SaveTask(ctx, stale); !errors.Is(err, loop.ErrConflict) {
		t.Fatalf("SaveTask over a newer version: err = %v, want ErrConflict", err)
	}
	// A creation (version 0) over a stored task is a conflict too.
	fresh := task("v", "c", 9, loop.TaskSubmitted)
	if err := s.Tasks.SaveTask(ctx, fresh); !errors.Is(err, loop.ErrConflict) {
		t.Fatalf("SaveTask of version 0 over a stored task: err = %v, want ErrConflict", err)
	}
	// A version from the future is refused as well.
	future := got
	future.Version = 7
	if err := s.Tasks.SaveTask(ctx, future); !errors.Is(err, loop.ErrConflict) {
		t.Fatalf("SaveTask of an unknown version: err = %v, want ErrConflict", err)
	}
	now, err := s.Tasks.LoadTask(ctx, "v")
	if err != nil || now.Status != loop.TaskCompleted || now.Version != 2 {
		t.Fatalf("after refused writes: %s version %d, %v; want completed version 2", now.Status, now.Version, err)
	}
	// A deleted task can be created again from version 0.
	if err := s.Tasks.DeleteTask(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Tasks.SaveTask(ctx, fresh); err != nil {
		t.Fatalf("SaveTask of version 0 after delete: %v", err)
	}
}

// testTaskVersionRace: of many writers that read the same version, exactly
// one wins.
func testTaskVersionRace(t *testing.T, s Stores) {
	ctx := context.Background()
	base := mustSaveTask(t, s.Tasks, task("race", "c", 1, loop.TaskWorking))
	const writers = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, conflicts := 0, 0
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := base
			tr.Message = string(rune('a' + i))
			err := s.Tasks.SaveTask(ctx, tr)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, loop.ErrConflict):
				conflicts++
			default:
				t.Errorf("SaveTask: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != writers-1 {
		t.Fatalf("%d writers of version %d: %d won, %d conflicts; want exactly one winner", writers, base.Version, wins, conflicts)
	}
	got, err := s.Tasks.LoadTask(ctx, "race")
	if err != nil || got.Version != base.Version+1 {
		t.Fatalf("after the race: version %d, %v; want %d", got.Version, err, base.Version+1)
	}
}

// testTaskOwner: LoadTaskOf finds the owner's task and answers another
// owner exactly as it answers an unknown id.
func testTaskOwner(t *testing.T, s Stores) {
	ctx := context.Background()
	tr := task("owned", "c", 1, loop.TaskCompleted)
	tr.Owner = "alice"
	tr.History = []loop.Message{msg(loop.RoleUser, "secret")}
	mustSaveTask(t, s.Tasks, tr)
	got, err := s.Tasks.LoadTaskOf(ctx, "owned", "alice")
	if err != nil || got.Owner != "alice" || len(got.History) != 1 {
		t.Fatalf("LoadTaskOf(owner) = %+v, %v", got, err)
	}
	_, foreign := s.Tasks.LoadTaskOf(ctx, "owned", "bob")
	_, unknown := s.Tasks.LoadTaskOf(ctx, "nope", "bob")
	var nf1, nf2 *loop.NotFoundError
	if !errors.As(foreign, &nf1) || !errors.As(unknown, &nf2) {
		t.Fatalf("LoadTaskOf(another owner) = %v, LoadTaskOf(unknown) = %v; want both not found", foreign, unknown)
	}
	if nf1.What != nf2.What {
		t.Fatalf("foreign and unknown differ: %v / %v", foreign, unknown)
	}
	if _, err := s.Tasks.LoadTaskOf(ctx, "owned", ""); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("LoadTaskOf with no owner: err = %v, want not found", err)
	}
	if p, ok := s.Tasks.(loop.TaskPresence); ok {
		if ok, err := p.TaskExists(ctx, "owned"); err != nil || !ok {
			t.Fatalf("TaskExists(stored) = %v, %v; want true", ok, err)
		}
		if ok, err := p.TaskExists(ctx, "nope"); err != nil || ok {
			t.Fatalf("TaskExists(unknown) = %v, %v; want false", ok, err)
		}
		if err := s.Tasks.DeleteTask(ctx, "owned"); err != nil {
			t.Fatal(err)
		}
		if ok, err := p.TaskExists(ctx, "owned"); err != nil || ok {
			t.Fatalf("TaskExists(deleted) = %v, %v; want false", ok, err)
		}
	}
}
