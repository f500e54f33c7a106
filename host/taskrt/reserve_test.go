package taskrt

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

var _ UsageCounters = (*redisstore.Store)(nil)

// A token limit holds for model calls made at once: before each call the
// turn's report reserves what the call may use (PendingTokens), checked
// and held in one step, in memory and on the counters hosts share in
// Redis. 40 turns of one principal check at once, then each call uses its
// whole reservation: the principal's tokens pass its limit by less than
// one call's reservation. Before, each turn passed the check before any
// counted its tokens, and the 40 calls used 40 times a call (4,000
// tokens against a limit of 1,000).
func TestTokenLimitHoldsForConcurrentModelCalls(t *testing.T) {
	const limit, perCall, callers = 1000, 100, 40
	for name, hosts := range usageHosts(t, map[string]UsageLimit{"turns": {Tokens: limit}}) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			turn := func(i int) *loop.Turn {
				return &loop.Turn{TaskID: fmt.Sprintf("task-%d", i), Auth: &loop.AuthContext{Principal: "turns"}}
			}
			var checked, ended sync.WaitGroup
			var admitted atomic.Int64
			var refusal atomic.Value
			start := make(chan struct{})
			for i := range callers {
				checked.Add(1)
				ended.Add(1)
				go func() {
					defer ended.Done()
					<-start
					err := hosts[i%2].Budget(ctx, turn(i), loop.TurnUsage{PendingTokens: perCall})
					checked.Done()
					// Every turn has checked before any call's tokens are
					// counted: what a check-then-count lets through.
					checked.Wait()
					used := loop.TurnUsage{Final: true}
					if err == nil {
						admitted.Add(1)
						used.Usage = loop.Usage{PromptTokens: 60, CompletionTokens: 40, TotalTokens: perCall}
					} else {
						refusal.Store(err)
					}
					_ = hosts[i%2].Budget(ctx, turn(i), used)
				}()
			}
			close(start)
			ended.Wait()
			got := hosts[1].Usage(ctx, "turns")
			if got.TotalTokens >= limit+perCall {
				t.Fatalf("%d of %d concurrent model calls admitted: %d tokens used, the limit is %d (one call reserves %d)",
					admitted.Load(), callers, got.TotalTokens, limit, perCall)
			}
			if got.TotalTokens != admitted.Load()*perCall || got.ReservedTokens != 0 || got.Turns != callers {
				t.Fatalf("after the turns: %+v, %d admitted; want every call's tokens counted, nothing held", got, admitted.Load())
			}
			if err, _ := refusal.Load().(error); err == nil || !strings.Contains(err.Error(), `principal "turns" has used`) {
				t.Fatalf("refusal: %v", err)
			}
		})
	}
}

// A model call's reservation is given back when the call fails or is
// canceled (the turn's next report counts nothing for it), and on shared
// counters a reservation its host never settled (the host died) lapses.
func TestTokenReservationReleased(t *testing.T) {
	const limit = 1000
	for name, hosts := range usageHosts(t, map[string]UsageLimit{"alice": {Tokens: limit}}) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a := &loop.Turn{TaskID: "a", Auth: alice()}
			b := &loop.Turn{TaskID: "b", Auth: alice()}
			if err := hosts[0].Budget(ctx, a, loop.TurnUsage{PendingTokens: limit}); err != nil {
				t.Fatalf("a call reserving the whole limit: %v", err)
			}
			err := hosts[1].Budget(ctx, b, loop.TurnUsage{PendingTokens: 10})
			if err == nil || !strings.Contains(err.Error(), "model calls running now hold 1000 more") {
				t.Fatalf("a second call while the first holds the limit: %v", err)
			}
			// a's call fails: the turn ends having used nothing.
			if err := hosts[0].Budget(ctx, a, loop.TurnUsage{Final: true}); err != nil {
				t.Fatal(err)
			}
			if err := hosts[1].Budget(ctx, b, loop.TurnUsage{PendingTokens: limit}); err != nil {
				t.Fatalf("a call after the failed one gave its reservation back: %v", err)
			}
			if got := hosts[1].Usage(ctx, "alice"); got.TotalTokens != 0 {
				t.Fatalf("a failed call counted: %+v", got)
			}
			_ = hosts[1].Budget(ctx, b, loop.TurnUsage{Final: true})
		})
	}
	t.Run("lapsed", func(t *testing.T) {
		hosts := usageHosts(t, map[string]UsageLimit{"alice": {Tokens: limit}})["redis"]
		ctx := context.Background()
		hosts[0].ReserveTTL = 300 * time.Millisecond
		if err := hosts[0].Budget(ctx, &loop.Turn{TaskID: "dead", Auth: alice()}, loop.TurnUsage{PendingTokens: limit}); err != nil {
			t.Fatal(err)
		}
		// hosts[0] dies holding it: hosts[1] is refused until it lapses.
		b := &loop.Turn{TaskID: "b", Auth: alice()}
		if err := hosts[1].Budget(ctx, b, loop.TurnUsage{PendingTokens: 10}); err == nil {
			t.Fatal("a call while another host's reservation holds the limit was allowed")
		}
		deadline := time.Now().Add(time.Minute) // a hang guard: the hold lapses after 300 ms
		for hosts[1].Budget(ctx, b, loop.TurnUsage{PendingTokens: 10}) != nil {
			if time.Now().After(deadline) {
				t.Fatal("a dead host's reservation never lapsed")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
