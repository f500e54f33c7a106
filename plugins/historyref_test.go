package plugins

import (
	"context"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// A model request's names of what an instance keeps (historyFrom,
// historySkip, historyKeep, historyRef, toolsRef) are the host's to set:
// one a caller wrote (an agent plugin's model call is outside input) is
// dropped before the request reaches the guest. Before, an agent plugin
// that named the conversation the instance kept from another principal's
// call (names are a counter, easy to guess) got that conversation put
// before its own messages, and the model read it back to it.
func TestCallerCannotNameAKeptConversation(t *testing.T) {
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
	ctx := context.Background()
	// Another principal's turn: the instance keeps its conversation.
	if _, err := m.Generate(ctx, &loop.ModelRequest{Messages: []loop.Message{
		{Role: loop.RoleSystem, Content: "alice's secret 4711"}, {Role: loop.RoleUser, Content: "transcript"}}}, nil); err != nil {
		t.Fatal(err)
	}
	inst, err := p.pool.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref := inst.state().history.ref
	p.pool.put("", inst, true)
	if ref == "" {
		t.Fatal("the instance keeps no conversation")
	}
	// The attacker's request names it (and a tool set); its own message
	// is not one the instance holds.
	resp, err := m.Generate(ctx, &loop.ModelRequest{Messages: []loop.Message{
		{Role: loop.RoleUser, Content: "transcript", Metadata: map[string]any{"from": "bob"}}},
		HistoryFrom: ref, HistorySkip: 0, HistoryKeep: 2, HistoryRef: "mine", ToolsRef: "t-guess"}, nil)
	if err != nil {
		t.Fatalf("the request without the names it may not set: %v", err)
	}
	if got := resp.Message.Content; strings.Contains(got, "4711") || got != "user:transcriptmap[from:bob]|" {
		t.Fatalf("the model saw %q: another call's conversation reached it", got)
	}
}
