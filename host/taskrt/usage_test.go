package taskrt

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// gatedKV is the real store whose usage writes wait for a gate.
type gatedKV struct {
	*store.Badger
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedKV) KVSet(ctx context.Context, ns, key string, v []byte) error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	return g.Badger.KVSet(ctx, ns, key, v)
}

// KVSetQueued queues the write at once, as the store does, and holds its
// completion until the gate opens.
func (g *gatedKV) KVSetQueued(ns, key string, v []byte) func() error {
	wait := g.Badger.KVSetQueued(ns, key, v)
	select {
	case g.entered <- struct{}{}:
	default:
	}
	return func() error {
		<-g.gate
		return wait()
	}
}

func storedUsage(t *testing.T, db *store.Badger, p string) PrincipalUsage {
	t.Helper()
	b, err := db.KVGet(context.Background(), usageNamespace, p)
	if err != nil {
		t.Fatalf("usage of %s: %v", p, err)
	}
	var u PrincipalUsage
	if err := json.Unmarshal(b, &u); err != nil {
		t.Fatal(err)
	}
	return u
}

// Many turns of one principal ending at once: the totals are written in
// the background, and what is stored last is the newest snapshot.
func TestUsageSavesNewestTotals(t *testing.T) {
	t.Parallel()
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	u, err := NewUsage(db, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const turns = 40
	var wg sync.WaitGroup
	for i := range turns {
		wg.Go(func() {
			tr := &loop.Turn{TaskID: fmt.Sprint("t", i), Auth: alice()}
			_ = u.Budget(context.Background(), tr, loop.TurnUsage{Usage: loop.Usage{TotalTokens: 10}, Final: true})
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	u.Saved(ctx, "alice")
	if got := storedUsage(t, db, "alice"); got.Turns != turns || got.TotalTokens != 10*turns {
		t.Fatalf("stored totals = %+v, want %d turns and %d tokens", got, turns, 10*turns)
	}
}

// A turn is not answered (Wait) before its principal's totals are saved.
func TestTurnAnsweredAfterUsageSaved(t *testing.T) {
	t.Parallel()
	var kv *gatedKV
	h := newHarness(t, t.TempDir(), &scriptModel{}, func(c *Config) {
		kv = &gatedKV{Badger: c.Stores.Tasks.(*store.Badger), entered: make(chan struct{}, 1), gate: make(chan struct{})}
		u, err := NewUsage(kv, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := loop.New(loop.Config{Model: &scriptModel{}, Checkpoints: kv.Badger, Journal: kv.Badger, Budget: u.Budget})
		if err != nil {
			t.Fatal(err)
		}
		c.Loop, c.Usage = l, u
	})
	ctx := context.Background()
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("hi")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-kv.entered:
	case <-time.After(guard):
		t.Fatal("the usage totals were never written")
	}
	waitFor(t, "final events in the log", func() bool {
		e, _ := h.ev.LastEvent(ctx, st.Run.TaskID)
		_, ok := e.(*loop.TaskComplete)
		return ok
	})
	// The final events went out while the totals are held back: the turn
	// must not be answered yet.
	select {
	case <-st.Run.Done():
		t.Fatal("turn answered before its usage totals were saved")
	case <-time.After(200 * time.Millisecond):
	}
	close(kv.gate)
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	if got := storedUsage(t, kv.Badger, "alice"); got.Turns != 1 {
		t.Fatalf("stored totals after the answer = %+v, want 1 turn", got)
	}
}

// Work counted outside a turn (Charge: an MCP call) goes into the same
// totals as turns and is saved; Allow refuses once a limit is reached,
// and a turn's budget then refuses too.
func TestChargeCountsIntoTheTurnsTotals(t *testing.T) {
	t.Parallel()
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	u, err := NewUsage(db, map[string]UsageLimit{"alice": {ToolCalls: 2, Tokens: 100}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := u.Allow(ctx, "alice"); err != nil {
		t.Fatalf("alice within her limit: %v", err)
	}
	u.Charge(ctx, "alice", loop.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}, 1)
	if err := u.Allow(ctx, "alice"); err != nil {
		t.Fatalf("alice after 1 of 2 tool calls: %v", err)
	}
	u.Charge(ctx, "alice", loop.Usage{}, 1)
	if err := u.Allow(ctx, "alice"); err == nil {
		t.Fatal("alice at 2 of 2 tool calls was allowed")
	}
	tr := &loop.Turn{TaskID: "t1", Auth: alice()}
	if err := u.Budget(ctx, tr, loop.TurnUsage{}); err == nil {
		t.Fatal("a turn of alice after her MCP calls was not refused")
	}
	if err := u.Allow(ctx, "bob"); err != nil {
		t.Fatalf("bob, without a limit: %v", err)
	}
	gctx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	u.Saved(gctx, "alice")
	if got := storedUsage(t, db, "alice"); got.ToolCalls != 2 || got.TotalTokens != 7 || got.PromptTokens != 3 {
		t.Fatalf("stored totals = %+v, want 2 tool calls and 7 tokens", got)
	}
}
