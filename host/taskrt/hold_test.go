package taskrt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// The model calls of one turn's sub-agents (on one host), made at once, each hold their
// own reservation (loop.TurnUsage.Call): one settles alone, the turn's
// end settles the rest. Usage reports what they hold on every backend
// (on Redis, before, it reported nothing held). Calls made over MCP hold
// and settle the same way (Hold, Settle).
func TestSubAgentCallsHoldApart(t *testing.T) {
	const limit = 1000
	for name, hosts := range usageHosts(t, map[string]UsageLimit{"alice": {Tokens: limit}}) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			tr := &loop.Turn{TaskID: "t", Auth: alice()}
			for i, call := range []string{"t.c1#1", "t.c2#1", "t.c3#1", "t.c4#1"} {
				// used 0 + held 300*i < 1000: each is held.
				if err := hosts[0].Budget(ctx, tr, loop.TurnUsage{Call: call, PendingTokens: 300}); err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
			}
			if got := hosts[1].Usage(ctx, "alice"); got.ReservedTokens != 1200 || got.TotalTokens != 0 {
				t.Fatalf("usage while 4 calls hold 300: %+v", got)
			}
			err := hosts[0].Budget(ctx, tr, loop.TurnUsage{Call: "t.c5#1", PendingTokens: 10})
			if err == nil || !strings.Contains(err.Error(), "model calls running now hold 1200 more") {
				t.Fatalf("a fifth call while 1200 are held: %v", err)
			}
			// The first call ends having used 100: only its hold goes.
			used := loop.TurnUsage{Usage: loop.Usage{TotalTokens: 100}, Call: "t.c1#1"}
			_ = hosts[0].Budget(ctx, tr, used)
			if got := hosts[1].Usage(ctx, "alice"); got.ReservedTokens != 900 || got.TotalTokens != 100 {
				t.Fatalf("usage after one call settled: %+v", got)
			}
			// Over MCP: a hold of its own, settled with what it used.
			if err := hosts[1].Hold(ctx, "alice", "mcp a", 50); err == nil {
				t.Fatal("an MCP call while 1000 are used and held was allowed")
			}
			used.Final = true
			_ = hosts[0].Budget(ctx, tr, used)
			if got := hosts[1].Usage(ctx, "alice"); got.ReservedTokens != 0 || got.TotalTokens != 100 || got.Turns != 1 {
				t.Fatalf("usage after the turn's end: %+v", got)
			}
			if err := hosts[1].Hold(ctx, "alice", "mcp a", 900); err != nil {
				t.Fatalf("an MCP call within the limit: %v", err)
			}
			if err := hosts[0].Hold(ctx, "alice", "mcp b", 10); err == nil {
				t.Fatal("an MCP call while another holds the rest was allowed")
			}
			if got := hosts[0].Usage(ctx, "alice"); got.ReservedTokens != 900 {
				t.Fatalf("usage while an MCP call holds 900: %+v", got)
			}
			hosts[1].Settle(ctx, "alice", "mcp a", loop.Usage{PromptTokens: 5, CompletionTokens: 15, TotalTokens: 20})
			if got := hosts[0].Usage(ctx, "alice"); got.ReservedTokens != 0 || got.TotalTokens != 120 || got.PromptTokens != 5 {
				t.Fatalf("usage after the MCP call settled: %+v", got)
			}
		})
	}
}

// A host killed while its model calls hold tokens does not take the
// principal's budget with it. In memory and on Badger a hold lives in the
// process only: nothing of it is saved (the totals written while it held
// carry none), so the store reopened after the kill holds nothing. On
// Redis it lapses after ReserveTTL, and Usage stops reporting it then.
func TestHoldsOfAKilledHostDoNotLast(t *testing.T) {
	const limit = 1000
	limits := map[string]UsageLimit{"alice": {Tokens: limit}}
	ctx := context.Background()
	t.Run("badger", func(t *testing.T) {
		dir := t.TempDir()
		db, err := store.Open(store.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		u, err := NewUsage(db, limits, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A turn's sub-agent and an MCP call hold the whole limit; another
		// turn ends meanwhile (its totals are saved).
		if err := u.Budget(ctx, &loop.Turn{TaskID: "a", Auth: alice()}, loop.TurnUsage{Call: "a.c1#1", PendingTokens: 600}); err != nil {
			t.Fatal(err)
		}
		if err := u.Hold(ctx, "alice", "mcp x", 400); err != nil {
			t.Fatal(err)
		}
		_ = u.Budget(ctx, &loop.Turn{TaskID: "b", Auth: alice()}, loop.TurnUsage{Usage: loop.Usage{TotalTokens: 7}, Final: true})
		u.Saved(ctx, "alice")
		if got := u.Usage(ctx, "alice"); got.ReservedTokens != 1000 {
			t.Fatalf("before the kill: %+v", got)
		}
		// Killed: nothing settles; the store is opened again.
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db, err = store.Open(store.Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		u, err = NewUsage(db, limits, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := u.Usage(ctx, "alice"); got.ReservedTokens != 0 || got.TotalTokens != 7 {
			t.Fatalf("after the restart: %+v, want the 7 tokens used and nothing held", got)
		}
		if err := u.Budget(ctx, &loop.Turn{TaskID: "c", Auth: alice()}, loop.TurnUsage{PendingTokens: 900}); err != nil {
			t.Fatalf("a call after the restart: %v", err)
		}
	})
	t.Run("redis", func(t *testing.T) {
		hosts := usageHosts(t, limits)["redis"]
		dead := hosts[0]
		dead.ReserveTTL = 300 * time.Millisecond
		if err := dead.Budget(ctx, &loop.Turn{TaskID: "a", Auth: alice()}, loop.TurnUsage{Call: "a.c1#1", PendingTokens: 600}); err != nil {
			t.Fatal(err)
		}
		if err := dead.Hold(ctx, "alice", "mcp x", 400); err != nil {
			t.Fatal(err)
		}
		if got := hosts[1].Usage(ctx, "alice"); got.ReservedTokens != 1000 {
			t.Fatalf("while the dead host's calls hold: %+v", got)
		}
		deadline := time.Now().Add(time.Minute) // a hang guard: the holds lapse after 300 ms
		for hosts[1].Usage(ctx, "alice").ReservedTokens != 0 {
			if time.Now().After(deadline) {
				t.Fatal("a dead host's holds never lapsed")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := hosts[1].Budget(ctx, &loop.Turn{TaskID: "c", Auth: alice()}, loop.TurnUsage{PendingTokens: 900}); err != nil {
			t.Fatalf("a call once the dead host's holds lapsed: %v", err)
		}
	})
}
