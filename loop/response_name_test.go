package loop_test

import (
	"context"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// A model response's deltas and its ContentComplete share one response
// name, which no other response of the task has (two turns of one task
// included); ContentComplete counts the deltas that streamed it.
func TestResponseNamesAndDeltaCount(t *testing.T) {
	stream := true
	m := &fakeModel{fn: func(_ int, _ *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
		if stream {
			onDelta(loop.Delta{Content: "a"})
			onDelta(loop.Delta{Content: "b"})
		}
		return text("ab"), nil
	}}
	l := newLoop(t, loop.Config{Model: m})
	rec := &recorder{}
	l.Run(context.Background(), userTurn("one", rec))
	l.Run(context.Background(), userTurn("two", rec)) // the same task again
	stream = false
	l.Run(context.Background(), userTurn("three", rec))

	deltas := events[*loop.ContentDelta](rec)
	completes := events[*loop.ContentComplete](rec)
	if len(deltas) != 4 || len(completes) != 3 {
		t.Fatalf("%d deltas, %d completes", len(deltas), len(completes))
	}
	seen := map[string]bool{}
	for i, c := range completes {
		if c.Response == "" || seen[c.Response] {
			t.Fatalf("response %d named %q (seen before: %v)", i, c.Response, seen[c.Response])
		}
		seen[c.Response] = true
		want := 2
		if i == 2 {
			want = 0
		}
		if c.Deltas != want {
			t.Fatalf("response %d: deltas %d, want %d", i, c.Deltas, want)
		}
	}
	for i, d := range deltas {
		if d.Response != completes[i/2].Response {
			t.Fatalf("delta %d named %q, its response %q", i, d.Response, completes[i/2].Response)
		}
	}
}
