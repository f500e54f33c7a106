package loop_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// thoughtTurn runs a turn whose model reasons in two chunks, asks for three
// tool calls (one fails, one emits a thought of its own), then answers.
func thoughtTurn(t *testing.T, cfg loop.Config) *recorder {
	t.Helper()
	tools := toolsMap{
		"ok": echoTool,
		"bad": func(context.Context, loop.ToolCall, *loop.ToolEnv) (loop.ToolResult, error) {
			return loop.ToolResult{IsError: true, Content: "no"}, nil
		},
		"talk": func(_ context.Context, c loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
			// A plugin's thought comes without an id, with a made-up index
			// and type: the turn stamps it.
			env.Emit(&loop.ThoughtStream{Header: loop.Header{Kind: loop.KindThoughtStream}, ThoughtType: "musing",
				Verbosity: "loud", Content: "tool thinks", Index: 99})
			return loop.ToolResult{Content: "said"}, nil
		},
	}
	cfg.Model = &fakeModel{fn: func(n int, _ *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
		if n == 1 {
			onDelta(loop.Delta{Thought: "first I "})
			onDelta(loop.Delta{Content: "x"})
			onDelta(loop.Delta{Thought: "should look"})
			return calls(call("c1", "ok", `{}`), call("c2", "bad", `{}`), call("c3", "talk", `{}`)), nil
		}
		return text("done"), nil
	}}
	cfg.Toolsets = []loop.Toolset{tools}
	rec := &recorder{}
	out := newLoop(t, cfg).Run(context.Background(), userTurn("go", rec))
	if out.Status != loop.TaskCompleted {
		t.Fatalf("outcome %+v", out)
	}
	return rec
}

func thoughtsOf(rec *recorder) []*loop.ThoughtStream {
	var ts []*loop.ThoughtStream
	for _, e := range rec.events {
		if th, ok := e.(*loop.ThoughtStream); ok {
			ts = append(ts, th)
		}
	}
	return ts
}

func TestThoughtsAtEachDecisionPoint(t *testing.T) {
	rec := thoughtTurn(t, loop.Config{})
	ts := thoughtsOf(rec)
	types := map[string]int{}
	ids := map[string]string{} // id → type
	for i, th := range ts {
		if th.Index != i {
			t.Fatalf("thought %d has index %d (the turn's count of thoughts)", i, th.Index)
		}
		if th.ThoughtID == "" || th.TaskID != "task-1" || th.ContextID != "ctx-1" || th.Content == "" {
			t.Fatalf("thought %d incomplete: %+v", i, th)
		}
		if prev, seen := ids[th.ThoughtID]; seen && !(prev == loop.ThoughtReasoning && th.ThoughtType == loop.ThoughtReasoning) {
			t.Fatalf("thought id %s reused by a %s after a %s", th.ThoughtID, th.ThoughtType, prev)
		}
		ids[th.ThoughtID] = th.ThoughtType
		if loop.VerbosityRank(th.Verbosity) < 1 {
			t.Fatalf("thought %d has verbosity %q", i, th.Verbosity)
		}
		types[th.ThoughtType]++
	}
	for _, typ := range loop.ThoughtTypes() {
		if types[typ] == 0 {
			t.Fatalf("no %s thought at detailed; got %v", typ, types)
		}
	}
	// The model's reasoning: its two chunks are one thought, reasoning, normal.
	var reasoning []*loop.ThoughtStream
	for _, th := range ts {
		if th.Metadata["source"] == "model" {
			reasoning = append(reasoning, th)
		}
	}
	if len(reasoning) != 2 || reasoning[0].ThoughtID != reasoning[1].ThoughtID ||
		reasoning[0].ThoughtType != loop.ThoughtReasoning || reasoning[0].Verbosity != loop.VerbosityNormal ||
		reasoning[0].Content+reasoning[1].Content != "first I should look" {
		t.Fatalf("model reasoning as %+v", reasoning)
	}
	find := func(typ, contains string) *loop.ThoughtStream {
		for _, th := range ts {
			if th.ThoughtType == typ && strings.Contains(th.Content, contains) {
				return th
			}
		}
		t.Fatalf("no %s thought saying %q in %v", typ, contains, contents(ts))
		return nil
	}
	if p := find(loop.ThoughtPlanning, "step 1"); p.Verbosity != loop.VerbosityBrief {
		t.Fatalf("planning %+v", p)
	}
	find(loop.ThoughtPlanning, "results of 3 tool calls")
	d := find(loop.ThoughtDecision, "in parallel")
	if d.Metadata["relatedTo"] != "c1,c2,c3" || d.Verbosity != loop.VerbosityNormal {
		t.Fatalf("parallel decision %+v", d)
	}
	if r := find(loop.ThoughtReflection, "2 of 3 tool calls succeeded; bad failed"); r.Verbosity != loop.VerbosityNormal {
		t.Fatalf("reflection %+v", r)
	}
	if s := find(loop.ThoughtDecision, "Stopping"); s.Verbosity != loop.VerbosityBrief || s.Metadata["reason"] != loop.ReasonStop {
		t.Fatalf("stop decision %+v", s)
	}
	find(loop.ThoughtStrategy, "within 10 iterations")
	find(loop.ThoughtObservation, "asked for 3 tool calls")
	// The tool's own thought: stamped into the protocol's types.
	if tt := find(loop.ThoughtReasoning, "tool thinks"); tt.Verbosity != loop.VerbosityNormal || tt.ThoughtID == "" {
		t.Fatalf("a tool's thought %+v", tt)
	}
	// Stop comes last among thoughts, after the reflection.
	if last := ts[len(ts)-1]; !strings.HasPrefix(last.Content, "Stopping") {
		t.Fatalf("last thought %q", last.Content)
	}
	if rec.count(loop.KindInternalThoughtProcess) != 0 {
		t.Fatal("internal:thought-process sent without DebugThoughts")
	}
}

func contents(ts []*loop.ThoughtStream) []string {
	var s []string
	for _, th := range ts {
		s = append(s, th.ThoughtType+"/"+th.Verbosity+": "+th.Content)
	}
	return s
}

// The operator's level: a loop recording brief thoughts sends no others,
// and none sends none; their indexes still count from 0 without gaps.
func TestThoughtLevelBoundsWhatIsSent(t *testing.T) {
	for _, level := range []string{loop.VerbosityBrief, loop.VerbosityNormal, loop.VerbosityNone} {
		t.Run(level, func(t *testing.T) {
			ts := thoughtsOf(thoughtTurn(t, loop.Config{ThoughtLevel: level}))
			var levels []string
			for i, th := range ts {
				if loop.VerbosityRank(th.Verbosity) > loop.VerbosityRank(level) {
					t.Fatalf("a %s thought sent at level %s: %+v", th.Verbosity, level, th)
				}
				if th.Index != i {
					t.Fatalf("index %d at %d", th.Index, i)
				}
				levels = append(levels, th.Verbosity)
			}
			if level == loop.VerbosityNone && len(ts) != 0 {
				t.Fatalf("level none sent %v", contents(ts))
			}
			if level != loop.VerbosityNone && !slices.Contains(levels, level) {
				t.Fatalf("level %s sent none of its own: %v", level, contents(ts))
			}
		})
	}
	if _, err := loop.New(loop.Config{Model: &fakeModel{}, ThoughtLevel: "chatty"}); err == nil {
		t.Fatal("an unknown thought level accepted")
	}
}

func TestDebugThoughtsAtEachStage(t *testing.T) {
	rec := thoughtTurn(t, loop.Config{DebugThoughts: true})
	var stages []string
	for _, e := range rec.events {
		if d, ok := e.(*loop.InternalThoughtProcess); ok {
			if d.Reasoning == "" || d.TaskID != "task-1" {
				t.Fatalf("debug thought %+v", d)
			}
			stages = append(stages, d.Stage)
		}
	}
	want := []string{"pre-llm", "post-llm", "tools", "post-tools", "pre-llm", "post-llm", "stop"}
	if !slices.Equal(stages, want) {
		t.Fatalf("stages %v, want %v", stages, want)
	}
}
