package taskrt

import (
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// A later message on a task keeps the task's call chain: it may deepen it,
// never make it shallower or drop it (a caller cannot lower the depth the
// task runs at by answering it without a chain).
func TestNextMessageKeepsTheCallChain(t *testing.T) {
	prev := map[string]any{loop.CallChainKey: loop.CallChain{Depth: 4, Hosts: []string{"h-a", "h-b"}}.Value()}
	for _, next := range []map[string]any{
		{},
		{loop.CallChainKey: loop.CallChain{Depth: 0}.Value()},
		{loop.CallChainKey: loop.CallChain{Depth: 1, Hosts: []string{"h-x"}}.Value()},
	} {
		c, err := loop.CallChainOf(keepCallChain(prev, next))
		if err != nil || c.Depth != 4 || !c.Has("h-a") || !c.Has("h-b") {
			t.Fatalf("next %v: chain %+v %v; want depth 4 through h-a and h-b", next, c, err)
		}
	}
	c, _ := loop.CallChainOf(keepCallChain(prev, map[string]any{loop.CallChainKey: loop.CallChain{Depth: 6}.Value()}))
	if c.Depth != 6 {
		t.Fatalf("a deeper chain: depth %d, want 6", c.Depth)
	}
	if got := keepCallChain(nil, map[string]any{"k": "v"}); got["k"] != "v" || got[loop.CallChainKey] != nil {
		t.Fatalf("a task with no chain: %v", got)
	}
}
