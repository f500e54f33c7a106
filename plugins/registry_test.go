package plugins

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestLoadDescribeCall(t *testing.T) {
	dir := t.TempDir()
	r := newRegistry(t, Config{})
	pd := install(t, dir, "echo", guestWasm(t, "echo"), nil)
	info, err := r.Load(context.Background(), pd)
	if err != nil {
		t.Fatal(err)
	}
	if info.ABI != "looopy" || info.State != "serving" || info.Kind != "tool" {
		t.Fatalf("info = %+v", info)
	}
	defs, _ := r.Tools(context.Background())
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, ","); got != "add,big,echo,fail,hog,panic,recurse,spin" {
		t.Fatalf("tools = %s", got)
	}
	for _, d := range defs {
		if d.Name == "add" {
			var s map[string]any
			if err := json.Unmarshal(d.Parameters, &s); err != nil {
				t.Fatal(err)
			}
			req, _ := json.Marshal(s["required"])
			if string(req) != `["a","b"]` {
				t.Fatalf("add schema required = %s (schema %s)", req, d.Parameters)
			}
		}
	}
	if res := mustCall(t, r, "echo", `{"text":"hello"}`); res.IsError || res.Content != "hello" || res.ToolCallID != "c-echo" {
		t.Fatalf("echo = %+v", res)
	}
	if res := mustCall(t, r, "add", `{"a":2,"b":40}`); res.IsError || res.Content != "42" {
		t.Fatalf("add = %+v", res)
	}
	if res := mustCall(t, r, "add", `{"a":2,"b":40,"op":"-"}`); res.IsError || res.Content != "-38" {
		t.Fatalf("sub = %+v", res)
	}
	if res := mustCall(t, r, "fail", `{}`); !res.IsError || res.Content != "this tool always fails" {
		t.Fatalf("fail = %+v", res)
	}
	if res := mustCall(t, r, "panic", `{}`); !res.IsError || !strings.Contains(res.Content, "deliberate") {
		t.Fatalf("panic = %+v", res)
	}
	// the plugin still serves after a panic
	if res := mustCall(t, r, "echo", `{"text":"again"}`); res.Content != "again" {
		t.Fatalf("echo after panic = %+v", res)
	}
}
