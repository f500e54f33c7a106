package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/pdk"
)

// scripted is a model that asks for the tool calls it is given, one round
// each, then answers with every tool result it saw.
type scripted struct {
	rounds [][]pdk.ToolCall
	seen   []*pdk.ModelRequest
	fail   error
}

func (s *scripted) call(req *pdk.ModelRequest) (*pdk.ModelResponse, error) {
	s.seen = append(s.seen, req)
	if s.fail != nil {
		return nil, s.fail
	}
	n := len(s.seen) - 1
	if n < len(s.rounds) {
		return &pdk.ModelResponse{Message: pdk.Message{Role: pdk.RoleAssistant, ToolCalls: s.rounds[n]}, Usage: pdk.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}}, nil
	}
	var results []string
	for _, m := range req.Messages {
		if m.Role == pdk.RoleTool {
			results = append(results, m.Content)
		}
	}
	return &pdk.ModelResponse{Message: pdk.Message{Role: pdk.RoleAssistant, Content: "found: " + strings.Join(results, ", ")}, Usage: pdk.Usage{PromptTokens: 20, CompletionTokens: 5, TotalTokens: 25}}, nil
}

// upper is a real tool: it upper-cases its "text" argument; "boom" fails.
func upper(call pdk.ToolCall) (*pdk.ToolResult, error) {
	var a struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(call.Arguments, &a); err != nil {
		return nil, err
	}
	if a.Text == "boom" {
		return nil, errors.New("exploded")
	}
	return &pdk.ToolResult{ToolCallID: call.ID, Content: strings.ToUpper(a.Text)}, nil
}

func call(id, text string) pdk.ToolCall {
	return pdk.ToolCall{ID: id, Name: "upper", Arguments: json.RawMessage(fmt.Sprintf(`{"text":%q}`, text))}
}

func TestResearchRunsToolsUntilAnswer(t *testing.T) {
	m := &scripted{rounds: [][]pdk.ToolCall{{call("1", "go"), call("2", "boom")}, {call("3", "wasm")}}}
	tools := []pdk.ToolDefinition{{Name: "upper"}}
	var progress []string
	resp, err := Research(&pdk.AgentRequest{Messages: []pdk.Message{{Role: pdk.RoleUser, Content: "the Go runtime"}}, Tools: tools},
		Env{Model: m.call, Tool: upper, Progress: func(s string) { progress = append(progress, s) }}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := "found: GO, tool upper failed: exploded, WASM"; resp.Content != want {
		t.Errorf("content %q, want %q", resp.Content, want)
	}
	if len(m.seen) != 3 {
		t.Fatalf("%d model calls, want 3", len(m.seen))
	}
	first := m.seen[0]
	if first.Messages[0].Role != pdk.RoleSystem || first.Messages[1].Content != TaskPrefix+"the Go runtime" || len(first.Tools) != 1 {
		t.Errorf("first request %+v", first)
	}
	// assistant(2 calls) + 2 results + assistant(1 call) + 1 result + answer
	if len(resp.Messages) != 6 || resp.Messages[5].Content != resp.Content {
		t.Errorf("%d messages: %+v", len(resp.Messages), resp.Messages)
	}
	if resp.Messages[2].ToolCallID != "2" || resp.Messages[2].Role != pdk.RoleTool {
		t.Errorf("tool message %+v", resp.Messages[2])
	}
	if resp.Usage != (pdk.Usage{PromptTokens: 40, CompletionTokens: 9, TotalTokens: 49}) {
		t.Errorf("usage %+v", resp.Usage)
	}
	if len(progress) != 6 || progress[1] != "round 1: running upper" {
		t.Errorf("progress %q", progress)
	}
}

func TestResearchLimitsRounds(t *testing.T) {
	loops := make([][]pdk.ToolCall, 10)
	for i := range loops {
		loops[i] = []pdk.ToolCall{call(fmt.Sprint(i), "again")}
	}
	m := &scripted{rounds: loops}
	_, err := Research(&pdk.AgentRequest{Messages: []pdk.Message{{Role: pdk.RoleUser, Content: "x"}}}, Env{Model: m.call, Tool: upper}, 3)
	var pe *pdk.Error
	if !errors.As(err, &pe) || pe.Code != "max_iterations" || len(m.seen) != 3 {
		t.Errorf("err %v after %d model calls, want max_iterations after 3", err, len(m.seen))
	}
}

func TestResearchErrors(t *testing.T) {
	m := &scripted{fail: &pdk.Error{Code: "rate_limit", Message: "slow down", Transient: true}}
	_, err := Research(&pdk.AgentRequest{Messages: []pdk.Message{{Role: pdk.RoleUser, Content: "x"}}}, Env{Model: m.call, Tool: upper}, 2)
	var pe *pdk.Error
	if !errors.As(err, &pe) || !pe.Transient || !strings.Contains(err.Error(), "round 1: model") {
		t.Errorf("model failure: %v", err)
	}
	_, err = Research(&pdk.AgentRequest{}, Env{Model: m.call, Tool: upper}, 2)
	if !errors.As(err, &pe) || pe.Code != pdk.CodeBadInput {
		t.Errorf("no task: %v", err)
	}
}
