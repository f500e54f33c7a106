package loop_test

import (
	"context"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// instantModel asks for one tool call per iteration until the last, then
// answers: the loop's own cost is all that is measured.
type instantModel struct {
	iterations int
	toolCall   *loop.ModelResponse
	answer     *loop.ModelResponse
}

func (m *instantModel) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	// Each iteration adds two messages (call, result) to the first user message.
	if len(req.Messages)/2 >= m.iterations-1 {
		return m.answer, nil
	}
	return m.toolCall, nil
}

type instantTools struct{ defs []loop.ToolDefinition }

func (t instantTools) Tools(context.Context) ([]loop.ToolDefinition, error) { return t.defs, nil }
func (t instantTools) Call(context.Context, loop.ToolCall, *loop.ToolEnv) (loop.ToolResult, error) {
	return loop.ToolResult{Content: "ok"}, nil
}

// BenchmarkLoopIteration measures the loop's overhead per iteration (one
// model call and one tool call, both instant) with events going to a sink
// that drops them. ns/op and allocs/op are per iteration.
func BenchmarkLoopIteration(b *testing.B) {
	const perTurn = 10
	m := &instantModel{
		iterations: perTurn,
		toolCall:   calls(call("c1", "noop", `{}`)),
		answer:     text("done"),
	}
	l, err := loop.New(loop.Config{Model: m, Toolsets: []loop.Toolset{instantTools{defs: []loop.ToolDefinition{{Name: "noop"}}}}, MaxIterations: perTurn})
	if err != nil {
		b.Fatal(err)
	}
	sink := loop.SinkFunc(func(loop.Event) {})
	turn := loop.Turn{ContextID: "c", TaskID: "t", Sink: sink, Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += perTurn {
		out := l.Run(ctx, turn)
		if out.Iterations != perTurn || out.Status != loop.TaskCompleted {
			b.Fatalf("turn ran %d iterations, status %s (%v)", out.Iterations, out.Status, out.Err)
		}
	}
}

// BenchmarkLoopIterationThoughts is BenchmarkLoopIteration with the loop
// recording its thoughts up to each level (none, brief, normal, detailed —
// the default) and with its debug thoughts as well: what thoughts cost per
// iteration.
func BenchmarkLoopIterationThoughts(b *testing.B) {
	const perTurn = 10
	for _, tc := range []struct {
		name  string
		level string
		debug bool
	}{{"none", loop.VerbosityNone, false}, {"brief", loop.VerbosityBrief, false}, {"normal", loop.VerbosityNormal, false},
		{"detailed", loop.VerbosityDetailed, false}, {"detailed+debug", loop.VerbosityDetailed, true}} {
		b.Run(tc.name, func(b *testing.B) {
			m := &instantModel{iterations: perTurn, toolCall: calls(call("c1", "noop", `{}`)), answer: text("done")}
			l, err := loop.New(loop.Config{Model: m, Toolsets: []loop.Toolset{instantTools{defs: []loop.ToolDefinition{{Name: "noop"}}}},
				MaxIterations: perTurn, ThoughtLevel: tc.level, DebugThoughts: tc.debug})
			if err != nil {
				b.Fatal(err)
			}
			thoughts := 0
			sink := loop.SinkFunc(func(e loop.Event) {
				if e.Head().Kind == loop.KindThoughtStream {
					thoughts++
				}
			})
			turn := loop.Turn{ContextID: "c", TaskID: "t", Sink: sink, Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}}}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			turns := 0
			for i := 0; i < b.N; i += perTurn {
				if out := l.Run(ctx, turn); out.Iterations != perTurn || out.Status != loop.TaskCompleted {
					b.Fatalf("turn ran %d iterations, status %s (%v)", out.Iterations, out.Status, out.Err)
				}
				turns++
			}
			b.ReportMetric(float64(thoughts)/float64(turns*perTurn), "thoughts/iter")
		})
	}
}
