package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
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

	run := func(in func(*callState) ([]byte, error), st *callState) []byte {
		b, err := in(st)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	old := &Plugin{}
	in := old.modelInput(req)
	st := &callState{}
	for range 2 {
		if r := decode(run(in, st)); len(r.Tools) != 1 || r.ToolsRef != "" {
			t.Fatalf("a guest without the feature got %+v", r)
		}
	}

	keeps := &Plugin{desc: pdk.Describe{Features: []string{pdk.FeatureToolsRef}}}
	in = keeps.modelInput(req)
	a, b := &callState{}, &callState{}
	first := decode(run(in, a))
	if len(first.Tools) != 1 || first.ToolsRef == "" || first.Messages[0].Content != "hi" {
		t.Fatalf("first call of an instance: %+v", first)
	}
	second := decode(run(in, a))
	if len(second.Tools) != 0 || second.ToolsRef != first.ToolsRef || second.Messages[0].Content != "hi" {
		t.Fatalf("second call of the same instance: %+v", second)
	}
	if other := decode(run(in, b)); len(other.Tools) != 1 {
		t.Fatalf("another instance: %+v", other)
	}
	// Another tool set has another name, and goes whole.
	req2 := *req
	req2.Tools = []loop.ToolDefinition{{Name: "echo"}}
	in2 := keeps.modelInput(&req2)
	third := decode(run(in2, a))
	if len(third.Tools) != 1 || third.ToolsRef == first.ToolsRef {
		t.Fatalf("a new set: %+v", third)
	}
	// An instance that lost its set (the host's retry clears the name).
	a.toolsRef = ""
	if again := run(in2, a); !bytes.Contains(again, []byte(`"tools":[`)) {
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

// To a guest that keeps conversations, a call carries only what follows the
// part of the conversation the instance holds; anything changed in it, even
// in place in the caller's own messages, is sent again.
func TestModelInputSendsHistoryOncePerInstance(t *testing.T) {
	keeps := &Plugin{desc: pdk.Describe{Features: []string{pdk.FeatureHistoryRef}}}
	send := func(st *callState, msgs []loop.Message) pdk.ModelRequest {
		t.Helper()
		b, err := keeps.modelInput(&loop.ModelRequest{Messages: msgs})(st)
		if err != nil {
			t.Fatal(err)
		}
		var r pdk.ModelRequest
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if r.HistoryRef == "" {
			t.Fatalf("no name for the conversation: %s", b)
		}
		return r
	}
	msgs := []loop.Message{
		{Role: loop.RoleSystem, Content: "be brief"},
		{Role: loop.RoleUser, Content: "hi", Metadata: map[string]any{"messageId": "m1", "tags": []any{"a", 1.0}}},
		{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "c1", Name: "calc", Arguments: json.RawMessage(`{"x":1}`)}}},
		{Role: loop.RoleTool, ToolCallID: "c1", Name: "calc", Content: "1"},
	}
	st, other := &callState{}, &callState{}
	r1 := send(st, msgs)
	if r1.HistoryFrom != "" || len(r1.Messages) != 4 {
		t.Fatalf("first call: %+v", r1)
	}
	// The same conversation and one more message: only that one.
	msgs = append(msgs, loop.Message{Role: loop.RoleAssistant, Content: "1 it is"})
	r2 := send(st, msgs)
	if r2.HistoryFrom != r1.HistoryRef || r2.HistorySkip != 0 || r2.HistoryKeep != 4 || len(r2.Messages) != 1 || r2.Messages[0].Content != "1 it is" {
		t.Fatalf("second call: %+v", r2)
	}
	// Another instance holds nothing: everything.
	if r := send(other, msgs); r.HistoryFrom != "" || len(r.Messages) != 5 {
		t.Fatalf("another instance: %+v", r)
	}
	// Changes made in place in the caller's messages are seen.
	changes := []struct {
		name   string
		change func()
		from   int // the first message sent again
	}{
		{"metadata value", func() { msgs[1].Metadata["messageId"] = "m2" }, 1},
		{"metadata list", func() { msgs[1].Metadata["tags"].([]any)[1] = 2.0 }, 1},
		{"arguments", func() { msgs[2].ToolCalls[0].Arguments[5] = '2' }, 2},
		{"tool call id", func() { msgs[2].ToolCalls[0].ID = "c2" }, 2},
		{"content", func() { msgs[3].Content = "2" }, 3},
		{"name", func() { msgs[3].Name = "calc2" }, 3},
		{"tool call id of a result", func() { msgs[3].ToolCallID = "c2" }, 3},
		{"pinned", func() { msgs[0].Pinned = true }, 0},
		{"role", func() { msgs[4].Role = loop.RoleUser }, 4},
	}
	prev := send(st, msgs).HistoryRef
	for _, c := range changes {
		c.change()
		r := send(st, msgs)
		if c.from == 0 {
			if r.HistoryFrom != "" || len(r.Messages) != len(msgs) {
				t.Fatalf("%s: %+v", c.name, r)
			}
		} else if r.HistoryFrom != prev || r.HistoryKeep != c.from || len(r.Messages) != len(msgs)-c.from {
			t.Fatalf("%s: sent from %d (%d messages, from %q), want from %d", c.name, r.HistoryKeep, len(r.Messages), r.HistoryFrom, c.from)
		}
		prev = r.HistoryRef
	}
	// A window that dropped the oldest two messages: the rest is kept.
	window := append([]loop.Message(nil), msgs[2:]...)
	window = append(window, loop.Message{Role: loop.RoleUser, Content: "next"})
	r := send(st, window)
	if r.HistoryFrom != prev || r.HistorySkip != 2 || r.HistoryKeep != 3 || len(r.Messages) != 1 {
		t.Fatalf("window: %+v", r)
	}
	// Metadata of a kind the host cannot copy: the conversation is kept up
	// to that message, and from it on sent every time.
	odd := append(window[:len(window):len(window)], loop.Message{Role: loop.RoleUser, Content: "odd", Metadata: map[string]any{"t": struct{ A int }{1}}},
		loop.Message{Role: loop.RoleUser, Content: "last"})
	send(st, odd)
	if r := send(st, odd); r.HistoryKeep != 4 || len(r.Messages) != 2 {
		t.Fatalf("odd metadata: %+v", r)
	}
	// A guest without the feature gets everything, every time, unnamed.
	plain := &Plugin{}
	for range 2 {
		b, _ := plain.modelInput(&loop.ModelRequest{Messages: msgs})(st)
		var r pdk.ModelRequest
		if err := json.Unmarshal(b, &r); err != nil || r.HistoryRef != "" || len(r.Messages) != len(msgs) {
			t.Fatalf("a guest without the feature got %s", b)
		}
	}
}

// sameMessage names every field of a message: a new field must be compared
// (and copied by cloneMessage) or a conversation kept by a guest could
// differ from the caller's without the host noticing.
func TestSameMessageCoversEveryField(t *testing.T) {
	if n := reflect.TypeFor[loop.Message]().NumField(); n != 7 {
		t.Fatalf("loop.Message has %d fields; sameMessage and cloneMessage compare and copy 7", n)
	}
}

// A Go guest keeps the conversation of its instance: each call ships only
// what is new, and the model still sees every message, also after a change
// in place, a window that dropped the oldest messages, and an instance that
// does not hold what the host thinks it holds (as a replaced one): that
// call is answered history_ref_unknown and sent again whole.
func TestModelGuestKeepsConversation(t *testing.T) {
	r := newRegistry(t, Config{})
	if _, err := r.Load(context.Background(), install(t, t.TempDir(), "mock", guestWasm(t, "model"), func(m map[string]any) {
		m["kind"] = "model"
		caps(m)["hostFunctions"] = []string{"emit"}
		caps(m)["instances"] = 1
	})); err != nil {
		t.Fatal(err)
	}
	m, err := r.Model("mock")
	if err != nil {
		t.Fatal(err)
	}
	p := r.plugins["mock"]
	if !slices.Contains(p.desc.Features, pdk.FeatureHistoryRef) {
		t.Fatalf("the pdk guest does not offer %s: %v", pdk.FeatureHistoryRef, p.desc.Features)
	}
	transcript := func(msgs []loop.Message) string {
		var b strings.Builder
		for _, m := range msgs {
			fmt.Fprintf(&b, "%s:%s", m.Role, m.Content)
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, "[%s %s]", c.Name, c.Arguments)
			}
			if len(m.Metadata) > 0 {
				fmt.Fprintf(&b, "%v", m.Metadata)
			}
			b.WriteString("|")
		}
		return b.String()
	}
	var msgs []loop.Message
	ask := func(step string) {
		t.Helper()
		msgs = append(msgs, loop.Message{Role: loop.RoleUser, Content: "transcript", Metadata: map[string]any{"step": step}})
		resp, err := m.Generate(context.Background(), &loop.ModelRequest{Messages: msgs}, nil)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if want := transcript(msgs); resp.Message.Content != want {
			t.Fatalf("%s: the model saw\n%s\nwant\n%s", step, resp.Message.Content, want)
		}
		msgs = append(msgs, resp.Message)
	}
	msgs = []loop.Message{{Role: loop.RoleSystem, Content: "be brief"}}
	ask("first")
	ask("second")
	msgs = append(msgs, loop.Message{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "c1", Name: "calc", Arguments: json.RawMessage(`{"x":1}`)}}},
		loop.Message{Role: loop.RoleTool, ToolCallID: "c1", Name: "calc", Content: "1"})
	ask("tool")
	msgs[1].Metadata["step"] = "changed in place"
	msgs[3].Content = "changed too"
	ask("after changes")
	msgs = msgs[3:] // a window
	ask("window")
	inst, err := p.pool.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	held := inst.state().history.ref
	if held == "" {
		t.Fatal("the host keeps no record of the instance's conversation")
	}
	inst.state().history.ref = "h-another" // as if a new instance had taken its place
	p.pool.put("", inst, true)
	calls := p.calls.Load()
	ask("instance lost it")
	if n := p.calls.Load() - calls; n != 2 {
		t.Fatalf("%d guest calls for a conversation the instance did not hold, want 2 (refused, then whole)", n)
	}
	inst, _ = p.pool.get(context.Background())
	now := inst.state().history.ref
	p.pool.put("", inst, true)
	if now == "" || now == held || now == "h-another" {
		t.Fatalf("after the retry the instance holds %q (before %q)", now, held)
	}
	calls = p.calls.Load()
	ask("after the retry")
	if n := p.calls.Load() - calls; n != 1 {
		t.Fatalf("%d guest calls, want 1", n)
	}
}
