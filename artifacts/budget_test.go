package artifacts

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// TestOwnerBudget: an owner's stored artifacts cannot pass Config.OwnerBudget
// (inline parts and blobs, appends and replaces); another owner still
// writes; a delete, an expiry's sweep and an abandon give the bytes back;
// a refused write leaves nothing and the artifact building.
func TestOwnerBudget(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	for _, b := range backends(t, Config{InlineMax: 10, OwnerBudget: 100, Now: clk.Now}) {
		t.Run(b.name, func(t *testing.T) {
			s := b.store
			used := func(owner string) int64 { return must[int64](t)(s.Usage(owner)) }
			a := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, Binary: true, TaskID: "t1", ContextID: "c", Owner: "bob"}))
			must[Info](t)(s.AppendChunk(ctxb, a.ID, bytes.Repeat([]byte("x"), 60), false)) // a blob
			must[Info](t)(s.AppendChunk(ctxb, a.ID, bytes.Repeat([]byte("y"), 8), false))  // inline
			if u := used("bob"); u != 68 {
				t.Fatalf("bob uses %d, want 68", u)
			}
			_, err := s.AppendChunk(ctxb, a.ID, bytes.Repeat([]byte("z"), 40), false)
			var be *BudgetError
			if !errors.As(err, &be) || !errors.Is(err, ErrBudget) || be.Owner != "bob" || be.Used != 68 || be.Need != 40 || be.Budget != 100 {
				t.Fatalf("write past the budget: %v", err)
			}
			if info := must[Info](t)(s.Get(ctxb, a.ID)); info.Size != 68 || info.Status != StatusBuilding {
				t.Fatalf("after the refusal %+v", info)
			}
			if b.dir != "" && len(blobFiles(t, b.dir)) != 1 {
				t.Fatalf("the refused blob was written: %v", blobFiles(t, b.dir))
			}
			must[Info](t)(s.AppendChunk(ctxb, a.ID, bytes.Repeat([]byte("w"), 8), false)) // 76 fits
			a2 := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t2", ContextID: "c", Owner: "bob"}))
			if _, err := s.AppendChunk(ctxb, a2.ID, bytes.Repeat([]byte("v"), 30), false); !errors.Is(err, ErrBudget) {
				t.Fatalf("second artifact past the budget: %v", err)
			}
			// A replace that shrinks is taken, one that grows past is not.
			if _, err := s.ReplaceChunk(ctxb, a.ID, 0, bytes.Repeat([]byte("x"), 90)); !errors.Is(err, ErrBudget) {
				t.Fatalf("growing replace: %v", err)
			}
			must[Info](t)(s.ReplaceChunk(ctxb, a.ID, 0, bytes.Repeat([]byte("x"), 20)))
			want := used("bob")
			if info := must[Info](t)(s.Get(ctxb, a.ID)); info.Size != want {
				t.Fatalf("bob uses %d, his artifact holds %d", want, info.Size)
			}
			// Another owner has a budget of its own.
			c := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t3", ContextID: "c2", Owner: "carol"}))
			must[Info](t)(s.AppendChunk(ctxb, c.ID, bytes.Repeat([]byte("c"), 90), true))
			if u := used("carol"); u != 90 {
				t.Fatalf("carol uses %d", u)
			}
			// A delete gives the bytes back.
			if err := s.Delete(ctxb, a.ID); err != nil {
				t.Fatal(err)
			}
			if u := used("bob"); u != 0 {
				t.Fatalf("bob uses %d after the delete", u)
			}
			must[Info](t)(s.AppendChunk(ctxb, a2.ID, bytes.Repeat([]byte("v"), 90), true))
			// An expiry gives them back when it is swept.
			if err := s.ExpireTask(ctxb, "t2", time.Hour); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Hour)
			if u := used("bob"); u != 90 {
				t.Fatalf("bob uses %d before the sweep", u)
			}
			if _, err := s.Sweep(ctxb); err != nil {
				t.Fatal(err)
			}
			if u := used("bob"); u != 0 {
				t.Fatalf("bob uses %d after the sweep", u)
			}
			// An abandoned artifact gives back what it held.
			d := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t4", ContextID: "c", Owner: "bob"}))
			must[Info](t)(s.AppendChunk(ctxb, d.ID, bytes.Repeat([]byte("d"), 50), false))
			if _, err := s.AbandonTask(ctxb, "t4", "gone"); err != nil {
				t.Fatal(err)
			}
			if u := used("bob"); u != 0 {
				t.Fatalf("bob uses %d after the abandon", u)
			}
			// At the budget, even a new artifact is refused.
			e := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t5", ContextID: "c", Owner: "bob"}))
			must[Info](t)(s.AppendChunk(ctxb, e.ID, bytes.Repeat([]byte("e"), 100), true))
			if _, err := s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t5", ContextID: "c", Owner: "bob"}); !errors.Is(err, ErrBudget) {
				t.Fatalf("create at the budget: %v", err)
			}
		})
	}
}

// TestOwnerBudgetSurvivesReopen: the count is kept with the records.
func TestOwnerBudgetSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	db := openBadger(t, dir)
	s := must[*DB](t)(Open(db, nil, Config{InlineMax: 10, OwnerBudget: 100}))
	a := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c", Owner: "bob"}))
	must[Info](t)(s.AppendChunk(ctxb, a.ID, bytes.Repeat([]byte("x"), 70), true))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openBadger(t, dir)
	defer db.Close()
	s = must[*DB](t)(Open(db, nil, Config{InlineMax: 10, OwnerBudget: 100}))
	if u := must[int64](t)(s.Usage("bob")); u != 70 {
		t.Fatalf("bob uses %d after reopen, want 70", u)
	}
	b := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c", Owner: "bob"}))
	if _, err := s.AppendChunk(ctxb, b.ID, bytes.Repeat([]byte("y"), 40), true); !errors.Is(err, ErrBudget) {
		t.Fatalf("after reopen: %v", err)
	}
}
