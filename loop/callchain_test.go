package loop

import (
	"encoding/json"
	"strings"
	"testing"
)

// A call chain read from a message: well formed or refused, and merging
// never makes a task shallower nor drops a host it went through (a caller
// can raise the depth, never lower it).
func TestCallChainReadAndMerged(t *testing.T) {
	for _, bad := range []string{
		`"deep"`, `{"depth": -1}`, `{"depth": 1.5}`, `{"depth": "3"}`, `{"hosts": "h-1"}`,
		`{"hosts": [1]}`, `{"hosts": [""]}`, `{"hosts": ["` + strings.Repeat("h", 200) + `"]}`,
		`{"hosts": [` + strings.TrimSuffix(strings.Repeat(`"h",`, 2*MaxSubAgentDepth+1), ",") + `]}`,
	} {
		var md map[string]any
		if err := json.Unmarshal([]byte(`{"`+CallChainKey+`": `+bad+`}`), &md); err != nil {
			t.Fatal(err)
		}
		if _, err := CallChainOf(md); err == nil {
			t.Errorf("chain %s: accepted", bad)
		}
	}
	var md map[string]any
	_ = json.Unmarshal([]byte(`{"`+CallChainKey+`": {"depth": 3, "hosts": ["h-a", "h-b"]}}`), &md)
	c, err := CallChainOf(md)
	if err != nil || c.Depth != 3 || len(c.Hosts) != 2 || !c.Has("h-b") {
		t.Fatalf("chain: %+v %v", c, err)
	}
	m := c.Merge(CallChain{Depth: 0, Hosts: []string{"h-c"}})
	if m.Depth != 3 || !m.Has("h-a") || !m.Has("h-c") {
		t.Fatalf("merged with a shallower chain: %+v; want depth 3 and every host", m)
	}
	if m = c.Merge(CallChain{Depth: 5}); m.Depth != 5 {
		t.Fatalf("merged with a deeper chain: %+v", m)
	}
	back, err := CallChainOf(map[string]any{CallChainKey: c.Value()})
	if err != nil || back.Depth != 3 || len(back.Hosts) != 2 {
		t.Fatalf("a chain's Value read back: %+v %v", back, err)
	}
}
