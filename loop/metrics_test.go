package loop_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/looopy-go/looopy/loop"
)

// sums collects the sums of the counters of a reader by name and attributes.
func sums(t *testing.T, r *sdkmetric.ManualReader) (map[string]int64, map[string]uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counters, hist := map[string]int64{}, map[string]uint64{}
	key := func(name string, s attribute.Set) string {
		var parts []string
		for _, kv := range s.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		return name + "{" + strings.Join(parts, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					counters[key(m.Name, p.Attributes)] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					hist[key(m.Name, p.Attributes)] += p.Count
				}
			}
		}
	}
	return counters, hist
}

func TestMetricsOfATurn(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		switch n {
		case 1:
			return nil, &loop.ModelError{Code: "rate_limited", Message: "slow down", Transient: true}
		case 2:
			return calls(call("a", "echo", `{}`), call("b", "boom", `{}`), call("c", "made-up-tool", `{}`)), nil
		}
		return text("done"), nil
	}}
	tools := toolsMap{"echo": echoTool, "boom": func(context.Context, loop.ToolCall, *loop.ToolEnv) (loop.ToolResult, error) {
		return loop.ToolResult{}, errors.New("it broke")
	}}
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools}, Meter: mp.Meter("test"),
		Retry: loop.RetryPolicy{BaseDelay: 1, MaxDelay: 1}})
	out := l.Run(context.Background(), userTurn("go", nil))
	if out.Status != loop.TaskCompleted {
		t.Fatalf("status %s (%v)", out.Status, out.Err)
	}
	c, h := sums(t, reader)
	want := map[string]int64{
		"looopy.turns{reason=stop,status=completed}":    1,
		"looopy.iterations{}":                           2,
		"looopy.model.calls{outcome=error}":             1,
		"looopy.model.calls{outcome=ok}":                2,
		"looopy.tool.calls{outcome=ok,tool=echo}":       1,
		"looopy.tool.calls{outcome=error,tool=boom}":    1,
		"looopy.tool.calls{outcome=error,tool=unknown}": 1,
		"looopy.model.tokens{gen_ai.token.type=input}":  20,
		"looopy.model.tokens{gen_ai.token.type=output}": 7,
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, c[k], v, c)
		}
	}
	if h["looopy.tool.duration{outcome=error,tool=boom}"] != 1 || h["looopy.model.duration{outcome=ok}"] != 2 {
		t.Errorf("histograms %v", h)
	}
}

func TestBudgetStopsATurn(t *testing.T) {
	t.Parallel()
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		return calls(call("c"+string(rune('0'+n)), "echo", `{}`)), nil
	}}
	var mu sync.Mutex
	var seen []loop.TurnUsage
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"echo": echoTool}},
		Budget: func(_ context.Context, turn *loop.Turn, u loop.TurnUsage) error {
			mu.Lock()
			seen = append(seen, u)
			mu.Unlock()
			if turn.TaskID != "task-1" {
				t.Errorf("budget asked about task %q", turn.TaskID)
			}
			if u.TotalTokens > 20 {
				return errors.New("token limit of 20 reached")
			}
			return nil
		}})
	rec := &recorder{}
	out := l.Run(context.Background(), userTurn("go", rec))
	if out.Status != loop.TaskFailed || out.Reason != loop.ReasonBudget || !strings.Contains(out.Err.Error(), "token limit of 20") {
		t.Fatalf("outcome %s/%s (%v), want failed/budget", out.Status, out.Reason, out.Err)
	}
	// Call 1 (15 tokens) runs its tool; call 2 reaches 30 and its tool does not run.
	if m.Calls() != 2 || out.Usage.TotalTokens != 30 || rec.count(loop.KindToolComplete) != 1 {
		t.Fatalf("%d model calls, %d tokens, %d tool calls", m.Calls(), out.Usage.TotalTokens, rec.count(loop.KindToolComplete))
	}
	last := out.Messages[len(out.Messages)-1]
	if len(last.ToolCalls) != 0 {
		t.Fatalf("the refused answer keeps its tool calls: %+v", last)
	}
	mu.Lock()
	defer mu.Unlock()
	final := seen[len(seen)-1]
	if !final.Final || final.ToolCalls != 1 || final.TotalTokens != 30 || final.Iterations != 2 {
		t.Fatalf("final report %+v", final)
	}
}

// The report made before a round of tool calls reserves them: it counts
// the calls about to run (PendingToolCalls, included in ToolCalls) before
// any of them starts, so a budget can check and count them in one step; a
// refusal runs none of them, and later reports count the calls that ran.
func TestBudgetReservesTheRoundsCalls(t *testing.T) {
	t.Parallel()
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		if n == 1 {
			return calls(call("a", "echo", `{}`), call("b", "echo", `{}`)), nil
		}
		return calls(call("c", "echo", `{}`), call("d", "echo", `{}`), call("e", "echo", `{}`)), nil
	}}
	var started atomic.Int32
	tools := toolsMap{"echo": func(ctx context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
		started.Add(1)
		return echoTool(ctx, c, env)
	}}
	var mu sync.Mutex
	var seen []loop.TurnUsage
	var startedAt []int32
	l := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{tools},
		Budget: func(_ context.Context, _ *loop.Turn, u loop.TurnUsage) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, u)
			startedAt = append(startedAt, started.Load())
			if u.ToolCalls > 4 && u.PendingToolCalls > 0 {
				return errors.New("a limit of 4 tool calls")
			}
			return nil
		}})
	out := l.Run(context.Background(), userTurn("go", &recorder{}))
	if out.Status != loop.TaskFailed || out.Reason != loop.ReasonBudget {
		t.Fatalf("outcome %s/%s (%v), want failed/budget", out.Status, out.Reason, out.Err)
	}
	if n := started.Load(); n != 2 {
		t.Fatalf("%d tool calls ran, want the first round's 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	var reserves []loop.TurnUsage
	for i, u := range seen {
		if u.PendingToolCalls > 0 {
			reserves = append(reserves, u)
			if want := int32(u.ToolCalls - u.PendingToolCalls); startedAt[i] != want {
				t.Fatalf("report %+v made after %d calls started, want %d: before the round", u, startedAt[i], want)
			}
		}
	}
	if len(reserves) != 2 || reserves[0].ToolCalls != 2 || reserves[0].PendingToolCalls != 2 ||
		reserves[1].ToolCalls != 5 || reserves[1].PendingToolCalls != 3 {
		t.Fatalf("reservations %+v, want 2 (of 2) then 5 (3 more)", reserves)
	}
	if final := seen[len(seen)-1]; !final.Final || final.ToolCalls != 2 {
		t.Fatalf("final report %+v, want the 2 calls that ran", final)
	}
}

// The report before each model call reserves what the call may use:
// its answer's max tokens (Config.ReserveTokens when the request sets
// none) and its prompt at 4 bytes a token; a call that fails is followed
// by the turn's final report, which counts nothing for it.
func TestBudgetReservesTheModelCallsTokens(t *testing.T) {
	t.Parallel()
	prompt := strings.Repeat("x", 4000)
	for _, tc := range []struct {
		name            string
		maxTokens, want int
	}{{"max tokens set", 300, 300}, {"the loop's default", 0, 700}} {
		t.Run(tc.name, func(t *testing.T) {
			m := &fakeModel{fn: func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) {
				return nil, &loop.ModelError{Code: "bad_request", Message: "refused"}
			}}
			var mu sync.Mutex
			var seen []loop.TurnUsage
			l := newLoop(t, loop.Config{Model: m, ReserveTokens: 700, Params: loop.ModelParams{MaxTokens: tc.maxTokens},
				Budget: func(_ context.Context, _ *loop.Turn, u loop.TurnUsage) error {
					mu.Lock()
					defer mu.Unlock()
					seen = append(seen, u)
					return nil
				}})
			out := l.Run(context.Background(), userTurn(prompt, &recorder{}))
			if out.Status != loop.TaskFailed {
				t.Fatalf("outcome %s (%v), want failed", out.Status, out.Err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 2 || seen[1].Final != true || seen[1].PendingTokens != 0 || seen[1].TotalTokens != 0 {
				t.Fatalf("reports %+v, want the reservation then a final report counting nothing", seen)
			}
			if got := seen[0].PendingTokens; got < tc.want+1000 || got > tc.want+1100 {
				t.Fatalf("reserved %d tokens before the call, want %d for the answer and about 1000 for the prompt", got, tc.want)
			}
		})
	}
}
