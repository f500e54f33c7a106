package taskrt

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
	"github.com/looopy-go/looopy/store/redisstore"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// usageHosts returns, for each way of keeping the counters, the Usage of
// two hosts (the same one twice when the counters are a process's own).
func usageHosts(t *testing.T, limits map[string]UsageLimit) map[string][2]*Usage {
	t.Helper()
	out := map[string][2]*Usage{}
	mem, err := NewUsage(nil, limits, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out["memory"] = [2]*Usage{mem, mem}
	db, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	kv, err := NewUsage(db, limits, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out["badger"] = [2]*Usage{kv, kv}
	srv := redistest.Start(t, redistest.Options{})
	var shared [2]*Usage
	for i := range shared {
		st, err := redisstore.Open(context.Background(), redisstore.Options{Addr: srv.Addr, Password: srv.Password,
			Prefix: "usage:", SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		if shared[i], err = NewSharedUsage(st, limits, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	out["redis"] = shared
	return out
}

// A limit holds for calls made at once: checking it and counting the call
// are one step (Reserve for calls made outside a turn, over MCP; the
// budget's report before a round of tool calls, PendingToolCalls, for
// turns), in memory and on the counters hosts share in Redis, where two
// hosts reserve against the same totals. Before, N concurrent calls each
// passed the check before any was counted, and the limit was passed by up
// to N.
func TestToolCallLimitHoldsForConcurrentCalls(t *testing.T) {
	const limit, callers = 5, 40
	limits := map[string]UsageLimit{"mcp": {ToolCalls: limit}, "turns": {ToolCalls: limit}}
	for name, hosts := range usageHosts(t, limits) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			run := func(call func(i int, u *Usage) error) (ok int64, refusal error) {
				var n atomic.Int64
				var mu sync.Mutex
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						if err := call(i, hosts[i%2]); err != nil {
							mu.Lock()
							refusal = err
							mu.Unlock()
							return
						}
						n.Add(1)
					}()
				}
				close(start)
				wg.Wait()
				return n.Load(), refusal
			}

			// Outside a turn (MCP): one call each.
			ok, refusal := run(func(_ int, u *Usage) error { return u.Reserve(ctx, "mcp", 1) })
			if ok != limit {
				t.Fatalf("%d of %d concurrent MCP calls allowed, the limit is %d (refusal: %v)", ok, callers, limit, refusal)
			}
			if got := hosts[0].Usage(ctx, "mcp").ToolCalls; got != limit {
				t.Fatalf("%d tool calls counted for the MCP calls, want %d", got, limit)
			}
			if refusal == nil || refusal.Error() != fmt.Sprintf(`principal "mcp" has made %d tool calls, its limit is %d`, limit, limit) {
				t.Fatalf("refusal: %v", refusal)
			}

			// Turns: each about to run one tool call.
			turn := func(i int) *loop.Turn {
				return &loop.Turn{TaskID: fmt.Sprintf("task-%d", i), Auth: &loop.AuthContext{Principal: "turns"}}
			}
			var admitted sync.Map
			ok, refusal = run(func(i int, u *Usage) error {
				err := u.Budget(ctx, turn(i), loop.TurnUsage{ToolCalls: 1, PendingToolCalls: 1})
				if err == nil {
					admitted.Store(i, true)
				}
				return err
			})
			if ok != limit || refusal == nil {
				t.Fatalf("%d of %d concurrent turns' tool calls allowed, the limit is %d (refusal: %v)", ok, callers, limit, refusal)
			}
			// Each turn ends: the calls that ran are counted once, the
			// refused ones not at all.
			for i := range callers {
				ran := 0
				if _, ok := admitted.Load(i); ok {
					ran = 1
				}
				_ = hosts[i%2].Budget(ctx, turn(i), loop.TurnUsage{ToolCalls: ran, Final: true})
			}
			got := hosts[1].Usage(ctx, "turns")
			if got.ToolCalls != limit || got.Turns != callers {
				t.Fatalf("after the turns: %+v, want %d tool calls and %d turns", got, limit, callers)
			}
		})
	}
}

// A turn reserving several calls at once is refused when they would pass
// the limit, though the limit is not reached yet; what it reserved before
// stays counted.
func TestReserveRefusesARoundPastTheLimit(t *testing.T) {
	u, err := NewUsage(nil, map[string]UsageLimit{"alice": {ToolCalls: 3}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tr := &loop.Turn{TaskID: "t1", Auth: alice()}
	if err := u.Budget(ctx, tr, loop.TurnUsage{ToolCalls: 2, PendingToolCalls: 2}); err != nil {
		t.Fatalf("2 of 3: %v", err)
	}
	err = u.Budget(ctx, tr, loop.TurnUsage{ToolCalls: 4, PendingToolCalls: 2})
	if err == nil || err.Error() != `principal "alice" has made 2 tool calls, its limit is 3: 2 more would pass it` {
		t.Fatalf("2 more past 3: %v", err)
	}
	if got := u.Usage(ctx, "alice").ToolCalls; got != 2 {
		t.Fatalf("%d tool calls counted after the refused round, want 2", got)
	}
	if err := u.Budget(ctx, tr, loop.TurnUsage{ToolCalls: 3, PendingToolCalls: 1}); err != nil {
		t.Fatalf("1 more, to 3 of 3: %v", err)
	}
	if err := u.Budget(ctx, tr, loop.TurnUsage{ToolCalls: 3}); err == nil {
		t.Fatal("a model call at 3 of 3 was allowed")
	}
}
