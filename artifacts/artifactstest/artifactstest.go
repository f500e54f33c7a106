// Package artifactstest is a conformance suite for implementations of
// artifacts.Store: any store (Badger, memory, a future Redis/S3 one) runs
// Run against fresh instances and must pass every case.
package artifactstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/loop"
)

// Run runs the suite. newStore returns a fresh, empty store for each case;
// its cleanup belongs to the caller (t.Cleanup).
func Run(t *testing.T, newStore func(t *testing.T) artifacts.Store) {
	cases := []struct {
		name string
		fn   func(*testing.T, artifacts.Store)
	}{
		{"FileLifecycle", fileLifecycle},
		{"DataVersions", dataVersions},
		{"DatasetSchema", datasetSchema},
		{"ReplaceChunk", replaceChunk},
		{"ListAndDelete", listAndDelete},
		{"ExpireNow", expireNow},
		{"ConcurrentAppends", concurrentAppends},
		{"LargeParts", largeParts},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

var ctx = context.Background()

func read(t *testing.T, s artifacts.Store, id string) []byte {
	t.Helper()
	rc, _, err := s.Open(ctx, id)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	return b
}

func create(t *testing.T, s artifacts.Store, spec artifacts.Spec) artifacts.Info {
	t.Helper()
	if spec.TaskID == "" {
		spec.TaskID = "task"
	}
	if spec.ContextID == "" {
		spec.ContextID = "ctx"
	}
	info, err := s.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return info
}

func fileLifecycle(t *testing.T, s artifacts.Store) {
	f := create(t, s, artifacts.Spec{Kind: artifacts.KindFile, Name: "a.txt"})
	if f.Status != artifacts.StatusBuilding {
		t.Fatalf("new artifact is %s", f.Status)
	}
	for i, c := range []string{"alpha ", "beta ", "gamma"} {
		info, err := s.AppendChunk(ctx, f.ID, []byte(c), i == 2)
		if err != nil {
			t.Fatal(err)
		}
		if info.Parts != i+1 {
			t.Fatalf("after chunk %d: %d parts", i, info.Parts)
		}
	}
	if got := string(read(t, s, f.ID)); got != "alpha beta gamma" {
		t.Fatalf("content %q", got)
	}
	info, err := s.Get(ctx, f.ID)
	if err != nil || info.Status != artifacts.StatusComplete || info.Size != 16 {
		t.Fatalf("get: %+v %v", info, err)
	}
	if _, err := s.AppendChunk(ctx, f.ID, []byte("x"), false); !errors.Is(err, artifacts.ErrCompleted) {
		t.Fatalf("append to complete: %v", err)
	}
	if _, err := s.Get(ctx, "art-unknown"); !errors.Is(err, artifacts.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	g := create(t, s, artifacts.Spec{Kind: artifacts.KindFile})
	if _, err := s.Fail(ctx, g.ID, "broken"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendChunk(ctx, g.ID, []byte("x"), false); !errors.Is(err, artifacts.ErrFailed) {
		t.Fatalf("append to failed: %v", err)
	}
}

func dataVersions(t *testing.T, s artifacts.Store) {
	d := create(t, s, artifacts.Spec{Kind: artifacts.KindData})
	for i := 1; i <= 3; i++ {
		info, err := s.WriteData(ctx, d.ID, map[string]any{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		if info.Version != i {
			t.Fatalf("write %d: version %d", i, info.Version)
		}
	}
	if got := string(read(t, s, d.ID)); got != `{"n":3}` {
		t.Fatalf("data %s", got)
	}
	if _, err := s.AppendChunk(ctx, d.ID, []byte("x"), false); !errors.Is(err, artifacts.ErrWrongKind) {
		t.Fatalf("chunk into data: %v", err)
	}
}

var schema = &loop.DatasetSchema{Columns: []loop.DatasetColumn{{Name: "name", Type: "string"}, {Name: "n", Type: "integer"}}}

func datasetSchema(t *testing.T, s artifacts.Store) {
	ds := create(t, s, artifacts.Spec{Kind: artifacts.KindDataset, Schema: schema})
	if _, _, err := s.AppendRows(ctx, ds.ID, []artifacts.Row{{"name": "a", "n": 1}}, false); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.AppendRows(ctx, ds.ID, []artifacts.Row{{"name": "b", "n": 2}, {"name": "c", "n": "3"}}, false)
	var re *artifacts.RowError
	if !errors.As(err, &re) || re.Row != 1 || re.Column != "n" || re.Offset != 1 {
		t.Fatalf("bad row: %v", err)
	}
	info, _, err := s.AppendRows(ctx, ds.ID, []artifacts.Row{{"name": "b"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if info.Rows != 2 || info.Status != artifacts.StatusComplete {
		t.Fatalf("info %+v", info)
	}
	want := `{"name":"a","n":1}` + "\n" + `{"name":"b","n":null}` + "\n"
	if got := string(read(t, s, ds.ID)); got != want {
		t.Fatalf("rows %q", got)
	}
	rc, _, _, err := artifacts.Export(ctx, s, ds.ID, artifacts.FormatCSV)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); string(b) != "name,n\na,1\nb,\n" {
		t.Fatalf("csv %q", b)
	}
}

func replaceChunk(t *testing.T, s artifacts.Store) {
	f := create(t, s, artifacts.Spec{Kind: artifacts.KindFile})
	for _, c := range []string{"one ", "two ", "three"} {
		if _, err := s.AppendChunk(ctx, f.ID, []byte(c), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ReplaceChunk(ctx, f.ID, 1, []byte("TWO ")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReplaceChunk(ctx, f.ID, 3, []byte("x")); !errors.Is(err, artifacts.ErrPartRange) {
		t.Fatalf("out of range: %v", err)
	}
	if got := string(read(t, s, f.ID)); got != "one TWO three" {
		t.Fatalf("content %q", got)
	}
	rc, err := s.OpenPart(ctx, f.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); string(b) != "TWO " {
		t.Fatalf("part 1 %q", b)
	}
}

func listAndDelete(t *testing.T, s artifacts.Store) {
	a := create(t, s, artifacts.Spec{Kind: artifacts.KindFile, TaskID: "t1", ContextID: "c"})
	b := create(t, s, artifacts.Spec{Kind: artifacts.KindFile, TaskID: "t2", ContextID: "c"})
	create(t, s, artifacts.Spec{Kind: artifacts.KindFile, TaskID: "t3", ContextID: "other"})
	byCtx, err := s.ListByContext(ctx, "c")
	if err != nil || len(byCtx) != 2 || byCtx[0].ID != a.ID || byCtx[1].ID != b.ID {
		t.Fatalf("context list %v %v", byCtx, err)
	}
	byTask, err := s.ListByTask(ctx, "t2")
	if err != nil || len(byTask) != 1 || byTask[0].ID != b.ID {
		t.Fatalf("task list %v %v", byTask, err)
	}
	if err := s.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, a.ID); !errors.Is(err, artifacts.ErrNotFound) {
		t.Fatalf("deleted: %v", err)
	}
	if err := s.DeleteTask(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ListByContext(ctx, "c"); len(l) != 0 {
		t.Fatalf("context still lists %d", len(l))
	}
}

func expireNow(t *testing.T, s artifacts.Store) {
	a := create(t, s, artifacts.Spec{Kind: artifacts.KindFile, TaskID: "gone"})
	b := create(t, s, artifacts.Spec{Kind: artifacts.KindFile, TaskID: "later"})
	if err := s.ExpireTask(ctx, "gone", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.ExpireTask(ctx, "later", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, a.ID); !errors.Is(err, artifacts.ErrNotFound) {
		t.Fatalf("expired now: %v", err)
	}
	info, err := s.Get(ctx, b.ID)
	if err != nil || info.ExpiresAt.IsZero() {
		t.Fatalf("expiring later: %+v %v", info, err)
	}
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, b.ID); err != nil {
		t.Fatalf("swept before its time: %v", err)
	}
}

// concurrentAppends: every chunk stored whole, each goroutine's chunks in
// its own order.
func concurrentAppends(t *testing.T, s artifacts.Store) {
	f := create(t, s, artifacts.Spec{Kind: artifacts.KindFile})
	const writers, chunks = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range chunks {
				if _, err := s.AppendChunk(ctx, f.ID, fmt.Appendf(nil, "%d.%02d;", g, i), false); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	next := map[int]int{}
	for _, c := range strings.Split(strings.TrimSuffix(string(read(t, s, f.ID)), ";"), ";") {
		var g, i int
		if _, err := fmt.Sscanf(c, "%d.%d", &g, &i); err != nil {
			t.Fatalf("torn chunk %q", c)
		}
		if i != next[g] {
			t.Fatalf("writer %d: chunk %d where %d was due", g, i, next[g])
		}
		next[g]++
	}
	for g := range writers {
		if next[g] != chunks {
			t.Fatalf("writer %d: %d chunks stored", g, next[g])
		}
	}
}

// largeParts: parts of 3 MiB (over the default inline size) stream back
// intact and are refused after completion like any other.
func largeParts(t *testing.T, s artifacts.Store) {
	f := create(t, s, artifacts.Spec{Kind: artifacts.KindFile, Binary: true})
	big := bytes.Repeat([]byte{0, 1, 2, 0xff}, 3<<18)
	for i := range 2 {
		if _, err := s.AppendChunk(ctx, f.ID, big, i == 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(t, s, f.ID); !bytes.Equal(got, append(append([]byte{}, big...), big...)) {
		t.Fatalf("read %d bytes, want %d", len(got), 2*len(big))
	}
	if err := s.Delete(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
}
