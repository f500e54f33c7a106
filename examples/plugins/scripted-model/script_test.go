package main

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/pdk"
)

func user(s string) pdk.Message { return pdk.Message{Role: pdk.RoleUser, Content: s} }

func mustParse(t *testing.T, s string) *Script {
	t.Helper()
	sc, err := ParseScript([]byte(s))
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	return sc
}

// recorder is a Runtime that keeps what the script streamed and slept.
type recorder struct {
	deltas []pdk.Delta
	sleeps []time.Duration
}

func (r *recorder) runtime() Runtime {
	return Runtime{
		Delta: func(d pdk.Delta) error { r.deltas = append(r.deltas, d); return nil },
		Sleep: func(d time.Duration) error { r.sleeps = append(r.sleeps, d); return nil },
	}
}

func play(t *testing.T, sc *Script, msgs ...pdk.Message) *pdk.ModelResponse {
	t.Helper()
	resp, err := sc.Play(&pdk.ModelRequest{Messages: msgs}, Runtime{})
	if err != nil {
		t.Fatalf("Play: %v", err)
	}
	return resp
}

// answer appends what the model answered and, for each tool call, a tool
// result, as the host's loop would.
func answer(msgs []pdk.Message, resp *pdk.ModelResponse, results ...string) []pdk.Message {
	msgs = append(msgs, resp.Message)
	for i, c := range resp.Message.ToolCalls {
		msgs = append(msgs, pdk.Message{Role: pdk.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: results[i]})
	}
	return msgs
}

func TestFirstMatchWins(t *testing.T) {
	sc := mustParse(t, `{"rules":[
		{"match":"^hello","steps":[{"text":"first"}]},
		{"match":"hello","steps":[{"text":"second"}]},
		{"match":".*","steps":[{"text":"third"}]}]}`)
	for in, want := range map[string]string{"hello there": "first", "say hello": "second", "bye": "third"} {
		if got := play(t, sc, user(in)).Message.Content; got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

func TestEchoRemembersEveryUserMessage(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":"^calc","steps":[{"text":"x"}]}]}`)
	msgs := []pdk.Message{
		{Role: pdk.RoleSystem, Content: "be nice"},
		user("a"),
		{Role: pdk.RoleAssistant, Content: "You said: a"},
		user("b"),
		{Role: pdk.RoleAssistant, Content: "You said: a | b"},
		user("  c  "),
	}
	resp := play(t, sc, msgs...)
	if got, want := resp.Message.Content, "You said: a | b |   c  "; got != want {
		t.Errorf("echo = %q, want %q", got, want)
	}
	if resp.FinishReason != pdk.FinishStop || resp.Message.Role != pdk.RoleAssistant {
		t.Errorf("finish %q role %q, want stop and assistant", resp.FinishReason, resp.Message.Role)
	}
}

func TestCustomDefaultRule(t *testing.T) {
	sc := mustParse(t, `{"rules":[],"default":{"steps":[{"text":"no rule for [$0], input {{input}}"}]}}`)
	if got, want := play(t, sc, user(" zzz ")).Message.Content, "no rule for [zzz], input zzz"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestSubstitutions(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":"^(?P<verb>\\w+) (\\w+)(?: (\\w+))?$","steps":[
		{"text":"$0|$1|${2}|${verb}|${3:-none}|$$1|$9|{{input}}|{{ attempt }}"}]}]}`)
	if got, want := play(t, sc, user("go home")).Message.Content, "go home|go|home|go|none|$1||go home|1"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got, want := play(t, sc, user("go home now")).Message.Content, "go home now|go|home|go|now|$1||go home now|1"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestInsertedTextIsNotExpandedAgain(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":"^say (.*)$","steps":[{"text":"[$1]"}]}]}`)
	if got, want := play(t, sc, user("say {{history}} $1")).Message.Content, "[{{history}} $1]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestToolCallThenAnswer(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":"^calc (.*)$","steps":[
		{"text":"working. "},
		{"toolCall":{"name":"calc","arguments":{"expression":"$1","nested":{"list":["$1!", 3]}}}},
		{"text":"{{lastToolResult}}"}]}]}`)
	msgs := []pdk.Message{user("hi"), {Role: pdk.RoleAssistant, Content: "You said: hi"}, user("calc 2+2")}

	first := play(t, sc, msgs...)
	if first.FinishReason != pdk.FinishToolCalls {
		t.Fatalf("finish = %q, want tool_calls", first.FinishReason)
	}
	if first.Message.Content != "working. " {
		t.Errorf("content with the tool call = %q", first.Message.Content)
	}
	if n := len(first.Message.ToolCalls); n != 1 {
		t.Fatalf("%d tool calls, want 1", n)
	}
	call := first.Message.ToolCalls[0]
	var args map[string]any
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		t.Fatalf("arguments %s: %v", call.Arguments, err)
	}
	want := map[string]any{"expression": "2+2", "nested": map[string]any{"list": []any{"2+2!", float64(3)}}}
	if call.Name != "calc" || !reflect.DeepEqual(args, want) {
		t.Errorf("call %s %s, want calc %v", call.Name, call.Arguments, want)
	}
	if call.ID == "" {
		t.Error("tool call without id")
	}

	second := play(t, sc, answer(msgs, first, "4")...)
	if second.FinishReason != pdk.FinishStop || second.Message.Content != "4" || len(second.Message.ToolCalls) != 0 {
		t.Errorf("second call: finish %q content %q calls %d, want stop, \"4\", 0",
			second.FinishReason, second.Message.Content, len(second.Message.ToolCalls))
	}
}

func TestSeveralToolRoundsAndParallelCalls(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":"^go$","steps":[
		{"toolCall":{"name":"a"}},
		{"toolCall":{"name":"b","arguments":{"x":"1"}}},
		{"text":"got {{toolResults}}; "},
		{"toolCall":{"name":"c"}},
		{"text":"last {{lastToolResult}}; all {{toolResults}}"}]}]}`)
	msgs := []pdk.Message{user("go")}

	r1 := play(t, sc, msgs...)
	if names := callNames(r1); names != "a,b" {
		t.Fatalf("round 1 calls %q, want a,b", names)
	}
	if r1.Message.ToolCalls[0].ID == r1.Message.ToolCalls[1].ID {
		t.Error("parallel calls share an id")
	}
	msgs = answer(msgs, r1, "ra", "rb")

	r2 := play(t, sc, msgs...)
	if names := callNames(r2); names != "c" || r2.Message.Content != "got ra\nrb; " {
		t.Fatalf("round 2 calls %q content %q", names, r2.Message.Content)
	}
	if r2.Message.ToolCalls[0].ID == r1.Message.ToolCalls[0].ID {
		t.Error("a later round reuses an id")
	}
	msgs = answer(msgs, r2, "rc")

	r3 := play(t, sc, msgs...)
	if want := "last rc; all ra\nrb\nrc"; r3.Message.Content != want || r3.FinishReason != pdk.FinishStop {
		t.Errorf("round 3 = %q (%s), want %q", r3.Message.Content, r3.FinishReason, want)
	}

	// A new user message starts the rule again from the top.
	msgs = append(answer(msgs, r3), user("go"))
	if names := callNames(play(t, sc, msgs...)); names != "a,b" {
		t.Errorf("after a new user message calls %q, want a,b", names)
	}
}

func TestRuleEndingInToolCallAnswersWithResult(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":".","steps":[{"toolCall":{"name":"t"}}]}]}`)
	msgs := []pdk.Message{user("x")}
	r1 := play(t, sc, msgs...)
	r2 := play(t, sc, answer(msgs, r1, "the result")...)
	if r2.Message.Content != "the result" || r2.FinishReason != pdk.FinishStop {
		t.Errorf("got %q (%s)", r2.Message.Content, r2.FinishReason)
	}
}

func callNames(r *pdk.ModelResponse) string {
	var names []string
	for _, c := range r.Message.ToolCalls {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

func TestStringArgumentsTemplate(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":"^rows ?(\\d*)$","steps":[
		{"toolCall":{"name":"make","arguments":"{\"rows\": ${1:-10}}"}}]}]}`)
	for in, want := range map[string]string{"rows 25": `{"rows": 25}`, "rows": `{"rows": 10}`} {
		if got := string(play(t, sc, user(in)).Message.ToolCalls[0].Arguments); got != want {
			t.Errorf("%q: arguments %s, want %s", in, got, want)
		}
	}
	bad := mustParse(t, `{"rules":[{"match":"^(.*)$","steps":[{"toolCall":{"name":"m","arguments":"{\"x\": $1}"}}]}]}`)
	_, err := bad.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("not json")}}, Runtime{})
	var pe *pdk.Error
	if !errors.As(err, &pe) || pe.Code != "script_error" || !strings.Contains(pe.Message, "not a JSON object") {
		t.Errorf("error = %v, want a script_error about the arguments", err)
	}
}

func TestStreamingDelaysAndRepeat(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":"^slow (\\d+)$","steps":[
		{"text":"start"},
		{"thought":"hmm"},
		{"text":" t{{i}}","delayMs":1000,"repeat":"$1"},
		{"text":" end","delayMs":5}]}]}`)
	var rec recorder
	resp, err := sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("slow 3")}, Stream: true}, rec.runtime())
	if err != nil {
		t.Fatal(err)
	}
	if want := "start t1 t2 t3 end"; resp.Message.Content != want {
		t.Errorf("content %q, want %q", resp.Message.Content, want)
	}
	wantDeltas := []pdk.Delta{{Content: "start"}, {Thought: "hmm"}, {Content: " t1"}, {Content: " t2"}, {Content: " t3"}, {Content: " end"}}
	if !reflect.DeepEqual(rec.deltas, wantDeltas) {
		t.Errorf("deltas %+v\nwant %+v", rec.deltas, wantDeltas)
	}
	wantSleeps := []time.Duration{time.Second, time.Second, time.Second, 5 * time.Millisecond}
	if !reflect.DeepEqual(rec.sleeps, wantSleeps) {
		t.Errorf("sleeps %v, want %v", rec.sleeps, wantSleeps)
	}
}

func TestCancelStopsPlaying(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":".","steps":[{"text":"x","delayMs":1000,"repeat":100}]}]}`)
	errCanceled := errors.New("canceled")

	deltas := 0
	_, err := sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("go")}}, Runtime{
		Delta: func(pdk.Delta) error {
			deltas++
			if deltas == 2 {
				return errCanceled
			}
			return nil
		},
		Sleep: func(time.Duration) error { return nil },
	})
	if !errors.Is(err, errCanceled) || deltas != 2 {
		t.Errorf("cancel in delta: err %v after %d deltas, want canceled after 2", err, deltas)
	}

	sleeps := 0
	_, err = sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("go")}}, Runtime{
		Sleep: func(time.Duration) error {
			sleeps++
			if sleeps == 3 {
				return errCanceled
			}
			return nil
		},
	})
	if !errors.Is(err, errCanceled) || sleeps != 3 {
		t.Errorf("cancel in sleep: err %v after %d sleeps, want canceled after 3", err, sleeps)
	}
}

func TestErrors(t *testing.T) {
	sc := mustParse(t, `{"rules":[
		{"match":"^fail$","steps":[{"text":"about to fail "},{"error":{"code":"model_error","message":"told to fail: {{input}}"}}]},
		{"match":"^flaky$","steps":[{"error":{"code":"rate_limit","message":"slow down","transient":true,"attempts":2}},{"text":"ok on {{attempt}}"}]},
		{"match":"^nocode$","steps":[{"error":{"message":"plain"}}]}]}`)

	_, err := sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("fail")}}, Runtime{})
	var pe *pdk.Error
	if !errors.As(err, &pe) || pe.Code != "model_error" || pe.Transient || pe.Message != "told to fail: fail" {
		t.Errorf("fail: %#v", err)
	}
	_, err = sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("nocode")}}, Runtime{})
	if !errors.As(err, &pe) || pe.Code != "scripted_error" {
		t.Errorf("nocode: %#v", err)
	}

	for attempt, transient := range map[any]bool{nil: true, float64(1): true, 2: true, float64(3): false, json.Number("4"): false} {
		md := map[string]any{}
		if attempt != nil {
			md["attempt"] = attempt
		}
		resp, err := sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("flaky")}, Metadata: md}, Runtime{})
		if transient {
			if !errors.As(err, &pe) || !pe.Transient || pe.Code != "rate_limit" {
				t.Errorf("flaky attempt %v: %v, want a transient rate_limit error", attempt, err)
			}
			continue
		}
		if err != nil || !strings.HasPrefix(resp.Message.Content, "ok on ") {
			t.Errorf("flaky attempt %v: %v %v, want an answer", attempt, resp, err)
		}
	}
}

func TestUsageCountsWords(t *testing.T) {
	sc := mustParse(t, `{"rules":[{"match":".","steps":[{"text":"one two three"}]}]}`)
	resp := play(t, sc, user("a b"), pdk.Message{Role: pdk.RoleAssistant, Content: "c"}, user("d e f"))
	want := pdk.Usage{PromptTokens: 6, CompletionTokens: 3, TotalTokens: 9}
	if resp.Usage != want {
		t.Errorf("usage %+v, want %+v", resp.Usage, want)
	}
}

func TestSameRequestSameAnswer(t *testing.T) {
	sc := mustParse(t, string(demoScript))
	msgs := []pdk.Message{user("hello"), {Role: pdk.RoleAssistant, Content: "You said: hello"}, user("calc (1+2)*3")}
	a, b := play(t, sc, msgs...), play(t, sc, msgs...)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two plays of one request differ:\n%+v\n%+v", a, b)
	}
}

func TestDemoScript(t *testing.T) {
	sc := mustParse(t, string(demoScript))
	tests := []struct {
		in       string
		rule     string
		tool     string
		args     string
		contains string
	}{
		{in: "help", rule: "help", contains: "calc 2+2"},
		{in: "calc 2+2", rule: "calc", tool: "calc", args: `{"expression":"2+2"}`},
		{in: "SLOW 6s", rule: "slow", contains: "tick6"},
		{in: "research the Go scheduler", rule: "research", tool: "researcher", args: `{"prompt":"the Go scheduler"}`},
		{in: "Research this and answer briefly: the Go scheduler", rule: "researcher-task", tool: "echo", args: `{"text":"notes on the Go scheduler"}`},
		{in: "fetch https://example.com/", rule: "fetch", tool: "fetch", args: `{"url":"https://example.com/"}`},
		{in: "read notes.txt", rule: "read", tool: "read_file", args: `{"path":"notes.txt"}`},
		{in: "ls", rule: "ls", tool: "list_dir", args: `{"path":""}`},
		{in: "ledger paid 5 EUR", rule: "ledger", tool: "ledger_append", args: `{"entry":"paid 5 EUR"}`},
		{in: "dataset", rule: "dataset", tool: "make_dataset", args: `{"name": "demo", "rows": 10}`},
		{in: "dataset 3", rule: "dataset", tool: "make_dataset", args: `{"name": "demo", "rows": 3}`},
		{in: "echo hi there", rule: "echo", tool: "echo", args: `{"text":"hi there"}`},
		{in: "think hard", rule: "think", contains: "I thought about hard."},
		{in: "something else", rule: "echo", contains: "You said: something else"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, _ := sc.pick(tt.in)
			if tt.rule == "echo" && tt.tool == "" {
				if r != echoRule {
					t.Fatalf("picked %s, want the echo default", r.label())
				}
			} else if r.Name != tt.rule {
				t.Fatalf("picked %s, want %s", r.label(), tt.rule)
			}
			resp := play(t, sc, user(tt.in))
			if tt.tool != "" {
				if len(resp.Message.ToolCalls) != 1 {
					t.Fatalf("%d tool calls, want 1", len(resp.Message.ToolCalls))
				}
				c := resp.Message.ToolCalls[0]
				if c.Name != tt.tool || string(c.Arguments) != tt.args {
					t.Errorf("call %s %s, want %s %s", c.Name, c.Arguments, tt.tool, tt.args)
				}
			}
			if !strings.Contains(resp.Message.Content, tt.contains) {
				t.Errorf("content %q does not contain %q", resp.Message.Content, tt.contains)
			}
		})
	}

	// calc end to end: the answer quotes the tool's result.
	msgs := []pdk.Message{user("calc 2+2")}
	r1 := play(t, sc, msgs...)
	if got := play(t, sc, answer(msgs, r1, "4")...).Message.Content; got != "2+2 = 4" {
		t.Errorf("calc answer %q, want \"2+2 = 4\"", got)
	}

	// SLOW 6s: six one-second ticks.
	var rec recorder
	if _, err := sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("SLOW 6s")}}, rec.runtime()); err != nil {
		t.Fatal(err)
	}
	if len(rec.sleeps) != 6 {
		t.Errorf("SLOW 6s slept %v, want six times one second", rec.sleeps)
	}
	for _, d := range rec.sleeps {
		if d != time.Second {
			t.Errorf("SLOW 6s slept %v, want 1s", d)
		}
	}

	var pe *pdk.Error
	if _, err := sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("fail")}}, Runtime{}); !errors.As(err, &pe) || pe.Transient {
		t.Errorf("fail: %v, want a permanent error", err)
	}
	if _, err := sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("flaky")}}, Runtime{}); !errors.As(err, &pe) || !pe.Transient {
		t.Errorf("flaky: %v, want a transient error", err)
	}
	resp, err := sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("flaky")}, Metadata: map[string]any{"attempt": float64(2)}}, Runtime{})
	if err != nil || resp.Message.Content != "Recovered on attempt 2." {
		t.Errorf("flaky on attempt 2: %v %v", resp, err)
	}
}

func TestParseScriptErrors(t *testing.T) {
	tests := []struct {
		script string
		want   string
	}{
		{`{"rules":[{"match":"x","steps":[{"text":"a"}]}],"extra":1}`, `unknown field "extra"`},
		{`{"rules":[{"match":"(","steps":[{"text":"a"}]}]}`, `rule 0 ("("): match: error parsing regexp`},
		{`{"rules":[{"name":"n","match":"","steps":[{"text":"a"}]}]}`, "rule 0 (n): match is empty"},
		{`{"rules":[{"match":"x","steps":[]}]}`, "no steps"},
		{`{"rules":[{"match":"x","steps":[{"text":"a","toolCall":{"name":"t"}}]}]}`, "exactly one of text, thought, toolCall, error (this one has 2)"},
		{`{"rules":[{"match":"x","steps":[{"delayMs":5}]}]}`, "this one has 0"},
		{`{"rules":[{"match":"x","steps":[{"text":"{{nope}}"}]}]}`, "unknown placeholder {{nope}}"},
		{`{"rules":[{"match":"x","steps":[{"text":"${1"}]}]}`, "${ without }"},
		{`{"rules":[{"match":"x","steps":[{"text":"a","repeat":20000}]}]}`, "repeat 20000 is outside 0..10000"},
		{`{"rules":[{"match":"x","steps":[{"text":"a","repeat":"lots"}]}]}`, `repeat "lots" is not a whole number`},
		{`{"rules":[{"match":"x","steps":[{"toolCall":{"name":"t"},"repeat":2}]}]}`, "repeat is for text and thought steps"},
		{`{"rules":[{"match":"x","steps":[{"text":"a","delayMs":-1}]}]}`, "delayMs -1 is outside"},
		{`{"rules":[{"match":"x","steps":[{"toolCall":{"arguments":{}}}]}]}`, "toolCall has no name"},
		{`{"rules":[{"match":"x","steps":[{"toolCall":{"name":"t","arguments":[1]}}]}]}`, "arguments must be a JSON object or a string template"},
		{`{"rules":[{"match":"x","steps":[{"toolCall":{"name":"t","arguments":{"a":"{{bad}}"}}}]}]}`, "toolCall t: template"},
		{`{"rules":[{"match":"x","steps":[{"error":{"code":"c"}}]}]}`, "error has no message"},
		{`{"rules":[],"default":{"match":"x","steps":[{"text":"a"}]}}`, "default rule: the default rule has no match"},
		{`{"rules":[]} {}`, "data after the script object"},
		{`[1]`, "parse script"},
	}
	for _, tt := range tests {
		_, err := ParseScript([]byte(tt.script))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseScript(%s) = %v, want an error containing %q", tt.script, err, tt.want)
		}
	}
}

func FuzzParseAndPlay(f *testing.F) {
	f.Add(string(demoScript), "calc 1+1")
	f.Add(`{"rules":[{"match":"(.*)","steps":[{"text":"${1:-x}$$ {{input}}","repeat":"$1"}]}]}`, "3")
	f.Add(`{"rules":[{"match":"^(\\d+)$","steps":[{"text":"{{input}}","repeat":"$1"},{"toolCall":{"name":"t","arguments":{"n":"$1"}}}]}]}`, "10000")
	f.Fuzz(func(t *testing.T, script, input string) {
		sc, err := ParseScript([]byte(script))
		if err != nil {
			return
		}
		req := &pdk.ModelRequest{Messages: []pdk.Message{user(input)}}
		var streamed strings.Builder
		resp, err := sc.Play(req, Runtime{Delta: func(d pdk.Delta) error { streamed.WriteString(d.Content); return nil }})
		if err != nil {
			var pe *pdk.Error
			if !errors.As(err, &pe) {
				t.Fatalf("Play failed with %T %v, want a *pdk.Error the host can report", err, err)
			}
			return
		}
		// The answer is bounded, what was streamed is the answer, the
		// finish reason says whether it calls tools, usage adds up.
		if len(resp.Message.Content) > maxAnswer {
			t.Fatalf("answer of %d bytes, the bound is %d", len(resp.Message.Content), maxAnswer)
		}
		if streamed.String() != resp.Message.Content {
			t.Fatalf("streamed %q, answered %q", streamed.String(), resp.Message.Content)
		}
		if (len(resp.Message.ToolCalls) > 0) != (resp.FinishReason == pdk.FinishToolCalls) {
			t.Fatalf("finish reason %q with %d tool calls", resp.FinishReason, len(resp.Message.ToolCalls))
		}
		for _, c := range resp.Message.ToolCalls {
			if !json.Valid(c.Arguments) {
				t.Fatalf("tool call %s has arguments that are not JSON: %q", c.Name, c.Arguments)
			}
		}
		if resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
			t.Fatalf("usage %+v does not add up", resp.Usage)
		}
		// The same request always gets the same answer (no hidden state).
		again, err := sc.Play(req, Runtime{})
		if err != nil || again.Message.Content != resp.Message.Content || len(again.Message.ToolCalls) != len(resp.Message.ToolCalls) {
			t.Fatalf("the same request played twice differs: %v", err)
		}
	})
}

func TestAttemptFallbackWhenTheHostDoesNotSay(t *testing.T) {
	sc := mustParse(t, `{"rules":[
		{"match":"^flaky$","steps":[{"error":{"code":"rate_limit","message":"x","transient":true,"attempts":1}},{"text":"ok on {{attempt}}"}]},
		{"match":"^plain$","steps":[{"text":"plain"}]}]}`)
	counts := map[string]int{}
	asked := 0
	rt := Runtime{
		Attempt: func(key string) int { asked++; counts[key]++; return counts[key] },
		Forget:  func(key string) { delete(counts, key) },
	}
	req := &pdk.ModelRequest{Messages: []pdk.Message{user("flaky")}}
	var pe *pdk.Error
	if _, err := sc.Play(req, rt); !errors.As(err, &pe) || !pe.Transient {
		t.Fatalf("first attempt: %v, want the transient error", err)
	}
	resp, err := sc.Play(req, rt)
	if err != nil || resp.Message.Content != "ok on 2" {
		t.Fatalf("second attempt: %v %v", resp, err)
	}
	if len(counts) != 0 {
		t.Errorf("the count of a request that got through stays: %v", counts)
	}
	// The same request later fails once again, as it did the first time.
	if _, err := sc.Play(req, rt); !errors.As(err, &pe) {
		t.Errorf("the same request later: %v, want the transient error again", err)
	}
	// Another conversation has its own count.
	other := &pdk.ModelRequest{Messages: []pdk.Message{user("hello"), user("flaky")}}
	if _, err := sc.Play(other, rt); !errors.As(err, &pe) {
		t.Errorf("another conversation's first attempt: %v", err)
	}
	// The host's own count wins, and rules that do not depend on the attempt never ask.
	asked = 0
	req.Metadata = map[string]any{"attempt": 1}
	if _, err := sc.Play(req, rt); !errors.As(err, &pe) {
		t.Errorf("reported attempt 1: %v", err)
	}
	if _, err := sc.Play(&pdk.ModelRequest{Messages: []pdk.Message{user("plain")}}, rt); err != nil {
		t.Fatal(err)
	}
	if asked != 0 {
		t.Errorf("the fallback was asked %d times", asked)
	}
}

func TestUserRulesGoOnTopOfTheDemo(t *testing.T) {
	demo, err := ParseScript(demoScript)
	if err != nil {
		t.Fatal(err)
	}
	user, err := ParseScript([]byte(`{"rules":[{"name":"mine","match":"(?i)^ping$","steps":[{"text":"pong"}]},{"match":"^calc","steps":[{"text":"my calc"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := user.Over(demo)
	if len(s.Rules) != len(user.Rules)+len(demo.Rules) || s.Default != demo.Default {
		t.Fatalf("merged %d rules, default %v", len(s.Rules), s.Default)
	}
	if s.Rules[0].Name != "mine" || s.Rules[len(user.Rules)].Name != demo.Rules[0].Name {
		t.Errorf("order: the user's rules must come first")
	}
	if len(demo.Rules) == 0 || (&Script{}).Over(demo).Rules[0].Name != demo.Rules[0].Name {
		t.Error("an empty rules file changed the demo")
	}
	var nilScript *Script
	if nilScript.Over(demo) != demo {
		t.Error("no rules file must leave the demo as it is")
	}
	withDefault, _ := ParseScript([]byte(`{"rules":[],"default":{"steps":[{"text":"mine"}]}}`))
	if withDefault.Over(demo).Default != withDefault.Default {
		t.Error("the user's default does not replace the demo's")
	}
}

// words counts what strings.Fields would split, without the slice.
func TestWordsCountsAsFields(t *testing.T) {
	for _, s := range []string{"", " ", "one", "  two  words ", "tab\tnew\nline\r\vform\ffeed", "nbsp\u00a0next\u0085nel",
		"ideographic\u3000space", "é ü 日本", "bad \xff utf8 \xff", "trailing\n"} {
		if got, want := words(s), len(strings.Fields(s)); got != want {
			t.Errorf("words(%q) = %d, want %d", s, got, want)
		}
	}
}

// Remembered word counts are used only for the very text counted before: a
// message of the same length but other words at the same place is counted
// again, and the usage reported is the same with or without the memory.
func TestWordCountsRemembered(t *testing.T) {
	sc, err := ParseScript([]byte(`{"rules":[{"match":"(?s)^(.*)$","steps":[{"text":"ok"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var wc WordCounts
	msgs := []pdk.Message{user("one two three"), {Role: pdk.RoleAssistant, Content: "four five"}, user("six")}
	play := func() int {
		t.Helper()
		resp, err := sc.Play(&pdk.ModelRequest{Messages: msgs}, Runtime{Words: &wc})
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := sc.Play(&pdk.ModelRequest{Messages: msgs}, Runtime{})
		if resp.Usage != plain.Usage {
			t.Fatalf("usage %+v with remembered counts, %+v without", resp.Usage, plain.Usage)
		}
		return resp.Usage.PromptTokens
	}
	if n := play(); n != 6 {
		t.Fatalf("prompt tokens %d, want 6", n)
	}
	if n := play(); n != 6 || len(wc.prev) != 3 || wc.prev[0].n != 3 {
		t.Fatalf("again: %d, remembered %+v", n, wc.prev)
	}
	msgs[0].Content = "one,two,three" // same length, one word
	if n := play(); n != 4 {
		t.Fatalf("after a change of the same length: %d, want 4", n)
	}
	msgs = msgs[1:] // another text at every place
	if n := play(); n != 3 {
		t.Fatalf("after a shift: %d, want 3", n)
	}
	// Tool calls count their arguments' words plus one; another list of
	// calls (a message of the same text) is counted again.
	call := func(args string) []pdk.ToolCall {
		return []pdk.ToolCall{{ID: "c", Name: "calc", Arguments: json.RawMessage(args)}}
	}
	msgs = []pdk.Message{user("go"), {Role: pdk.RoleAssistant, ToolCalls: call(`{"a": "b c"}`)}, user("six")}
	if n := play(); n != 6 {
		t.Fatalf("with a tool call: %d, want 6", n)
	}
	if n := play(); n != 6 || wc.prev[1].n != 4 {
		t.Fatalf("with a tool call again: %d, remembered %+v", n, wc.prev)
	}
	msgs = append([]pdk.Message(nil), msgs...)
	msgs[1].ToolCalls = call(`{"a": "b"}`)
	if n := play(); n != 5 {
		t.Fatalf("with other tool calls: %d, want 5", n)
	}
}

// The remembered pick is used only for the same input and the same script:
// another input or another script is matched again, and the answers are
// those played without the memory.
func TestPickCacheRemembersOneInputOfOneScript(t *testing.T) {
	a := mustParse(t, `{"rules":[{"match":"^hello (\\w+)$","steps":[{"text":"hi $1"}]},{"match":"(?s)^(.*)$","steps":[{"text":"other: $1 {{history}}"}]}]}`)
	b := mustParse(t, `{"rules":[{"match":"(?s)^(.*)$","steps":[{"text":"b says $1"}]}]}`)
	var pc PickCache
	check := func(sc *Script, input, want string) {
		t.Helper()
		req := &pdk.ModelRequest{Messages: []pdk.Message{user("first"), {Role: pdk.RoleAssistant, Content: "x"}, user(input)}}
		resp, err := sc.Play(req, Runtime{Picks: &pc})
		if err != nil {
			t.Fatal(err)
		}
		plain, err := sc.Play(req, Runtime{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Message.Content != want || plain.Message.Content != want {
			t.Fatalf("%q: %q with the cache, %q without, want %q", input, resp.Message.Content, plain.Message.Content, want)
		}
	}
	check(a, "hello bob", "hi bob")
	if pc.rule != &a.Rules[0] || pc.input != "hello bob" {
		t.Fatalf("remembered %+v", pc)
	}
	check(a, "hello bob", "hi bob")
	check(a, "hello ann", "hi ann")
	check(a, "bye", "other: bye first | bye")
	check(b, "bye", "b says bye")
	check(a, "bye", "other: bye first | bye")
}
