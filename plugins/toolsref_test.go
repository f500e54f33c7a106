package plugins

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/pdk"
)

// To a guest that keeps tool sets, the tools go once per instance; a guest
// that does not list the feature gets them every time.
func TestModelInputSendsToolsOncePerInstance(t *testing.T) {
	req := &loop.ModelRequest{
		Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}},
		Tools:    []loop.ToolDefinition{{Name: "calc", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}
	decode := func(b []byte) pdk.ModelRequest {
		var r pdk.ModelRequest
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return r
	}

	old := &Plugin{}
	in, err := old.modelInput(req)
	if err != nil {
		t.Fatal(err)
	}
	st := &callState{}
	for range 2 {
		if r := decode(in(st)); len(r.Tools) != 1 || r.ToolsRef != "" {
			t.Fatalf("a guest without the feature got %+v", r)
		}
	}

	keeps := &Plugin{desc: pdk.Describe{Features: []string{pdk.FeatureToolsRef}}}
	in, err = keeps.modelInput(req)
	if err != nil {
		t.Fatal(err)
	}
	a, b := &callState{}, &callState{}
	first := decode(in(a))
	if len(first.Tools) != 1 || first.ToolsRef == "" || first.Messages[0].Content != "hi" {
		t.Fatalf("first call of an instance: %+v", first)
	}
	second := decode(in(a))
	if len(second.Tools) != 0 || second.ToolsRef != first.ToolsRef || second.Messages[0].Content != "hi" {
		t.Fatalf("second call of the same instance: %+v", second)
	}
	if other := decode(in(b)); len(other.Tools) != 1 {
		t.Fatalf("another instance: %+v", other)
	}
	// Another tool set has another name, and goes whole.
	req2 := *req
	req2.Tools = []loop.ToolDefinition{{Name: "echo"}}
	in2, _ := keeps.modelInput(&req2)
	third := decode(in2(a))
	if len(third.Tools) != 1 || third.ToolsRef == first.ToolsRef {
		t.Fatalf("a new set: %+v", third)
	}
	// An instance that lost its set (the host's retry clears the name).
	a.toolsRef = ""
	if again := in2(a); !bytes.Contains(again, []byte(`"tools":[`)) {
		t.Fatalf("after a reset: %s", again)
	}
}

// The encoding of a tool set is remembered, and any change to a definition
// (even made in place, in the caller's own slice) gives a new encoding and
// name: a model never gets a stale set.
func TestToolSetEncodingRemembered(t *testing.T) {
	var c toolSets
	defs := []loop.ToolDefinition{
		{Name: "calc", Description: "adds", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "echo", Parameters: json.RawMessage(`{"type":"object","required":["x"]}`)},
	}
	enc, ref, err := c.get(defs)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(defs)
	if !bytes.Equal(enc, want) {
		t.Fatalf("encoding %s, want %s", enc, want)
	}
	// An equal set in another slice: the same encoding, not made again.
	again, ref2, _ := c.get(append([]loop.ToolDefinition(nil), defs...))
	if ref2 != ref || &again[0] != &enc[0] {
		t.Fatalf("an equal set was encoded again (%s, %s)", ref2, ref)
	}
	changes := []func(d []loop.ToolDefinition){
		func(d []loop.ToolDefinition) { d[1].Parameters[len(d[1].Parameters)-4] = 'y' }, // in place
		func(d []loop.ToolDefinition) { d[0].Description = "subtracts" },
		func(d []loop.ToolDefinition) { d[0].Name = "calc2" },
		func(d []loop.ToolDefinition) { d[1].Client = true },
		func(d []loop.ToolDefinition) { d[1].Idempotent = true },
	}
	seen := map[string]bool{ref: true}
	for i, change := range changes {
		change(defs)
		enc, r, err := c.get(defs)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(defs)
		if !bytes.Equal(enc, want) || seen[r] {
			t.Fatalf("change %d: encoding %s (want %s), name %s seen before: %v", i, enc, want, r, seen[r])
		}
		seen[r] = true
	}
	if got := len(c.sets); got != toolSetsKept {
		t.Fatalf("%d sets kept, want %d", got, toolSetsKept)
	}
}
