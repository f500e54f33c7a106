package pdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// modelRequestSamples are requests as the host writes them, and the odd
// shapes another writer might send.
var modelRequestSamples = []string{
	`{"messages":[{"role":"user","content":"hi"}]}`,
	`{"messages":[{"role":"system","content":"be brief\n\"quoted\" \\ \/ \t\r\b\f \u00e9 \ud83d\ude00 \u2028"},` +
		`{"role":"user","content":"calc (1+2)*3","pinned":true,"metadata":{"k":[1,"two",{"3":null}]}},` +
		`{"role":"assistant","toolCalls":[{"id":"c1","name":"calc","arguments":{"expression":"(1+2)*3"}}]},` +
		`{"role":"tool","toolCallId":"c1","name":"calc","content":"9"}],` +
		`"tools":[{"name":"calc","description":"adds \"numbers\"","parameters":{"type":"object","properties":{"expression":{"type":"string"}}},"idempotent":true},` +
		`{"name":"ask","client":true}],"temperature":0.25,"maxTokens":512,"stream":true,"metadata":{"turn":3}}`,
	` { "messages" : [ { "role" : "user" , "content" : "spaced" } ] , "stream" : false } `,
	`{"messages":[null,{"role":null,"content":"x","toolCalls":null}],"tools":null,"temperature":null}`,
	`{"messages":[{"role":"assistant","toolCalls":[{"id":"c","name":"n","arguments":null}]}],"tools":[{"name":"t","parameters":null}]}`,
	`{"messages":[{"role":"user","content":"é ü 日本"}],"temperature":1e-3,"maxTokens":0}`,
	`{"messages":[]}`,
	`{}`,
	`{"messages":[{"role":"user","content":"next"}],"toolsRef":"t1","historyRef":"h2","historyFrom":"h1","historySkip":0,"historyKeep":12}`,
	// Declined: the fast path leaves these to encoding/json.
	`{"Messages":[{"role":"user","content":"case"}]}`,
	`{"messages":[{"role":"user","content":"lone \ud800 surrogate"}]}`,
	`{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user"}]}`,
	`{"messages":[{"role":"user","content":5}]}`,
	`{"maxTokens":1.5}`,
	`{"historyKeep":"3"}`,
	`{"messages":[{"role":"user","content":"x"}]} trailing`,
	"{\"messages\":[{\"role\":\"user\",\"content\":\"bad \xff utf8\"}]}",
}

// The fast decoder reads what encoding/json reads, or declines.
func TestParseModelRequestMatchesEncodingJSON(t *testing.T) {
	fast := 0
	for _, in := range modelRequestSamples {
		var want ModelRequest
		wantErr := json.Unmarshal([]byte(in), &want)
		got, ok := parseModelRequest([]byte(in))
		if !ok {
			continue
		}
		fast++
		if wantErr != nil {
			t.Errorf("%s: fast path accepted what encoding/json refuses (%v)", in, wantErr)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", in, got, want)
		}
	}
	// The host's own shapes (the first nine samples) take the fast path.
	if fast < 9 {
		t.Fatalf("%d samples took the fast path, want the host's 9", fast)
	}
	for _, in := range modelRequestSamples[9:] {
		if _, ok := parseModelRequest([]byte(in)); ok {
			t.Errorf("%s: fast path accepted a shape it must leave to encoding/json", in)
		}
	}
}

// A request the host writes, round-tripped, comes back whole.
func TestParseModelRequestRoundTrip(t *testing.T) {
	temp := 0.7
	req := ModelRequest{
		Messages: []Message{
			{Role: RoleSystem, Content: strings.Repeat("rules <&> \u2029 ", 20)},
			{Role: RoleUser, Content: "line one\nline two\t\"quoted\"\x01"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)}}},
			{Role: RoleTool, ToolCallID: "c1", Name: "echo", Content: `{"text":"hi"}`},
		},
		Tools:       []ToolDefinition{{Name: "echo", Description: "echoes", Parameters: json.RawMessage(`{"type":"object"}`), Idempotent: true}},
		Temperature: &temp,
		MaxTokens:   100,
		Stream:      true,
		ToolsRef:    "t", HistoryRef: "h9", HistoryFrom: "h8", HistorySkip: 2, HistoryKeep: 30,
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := parseModelRequest(b)
	if !ok {
		t.Fatalf("declined the host's own encoding: %s", b)
	}
	if !reflect.DeepEqual(got, req) {
		t.Fatalf("got %#v\nwant %#v", got, req)
	}
}

func FuzzParseModelRequest(f *testing.F) {
	for _, s := range modelRequestSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, ok := parseModelRequest([]byte(in))
		if !ok {
			return
		}
		var want ModelRequest
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			// Lenient only inside raw values (arguments, schemas), which
			// the host wrote with encoding/json.
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", in, got, want)
		}
	})
}

// BenchmarkDecodeModelRequest: the guest's decoding of a model call with 25
// tools and 20 messages, fast path against encoding/json (natively here; in
// a Go guest both are several times slower, encoding/json most).
func BenchmarkDecodeModelRequest(b *testing.B) {
	var req ModelRequest
	for i := range 25 {
		req.Tools = append(req.Tools, ToolDefinition{Name: "tool_" + string(rune('a'+i)), Description: "Does one thing of the demo's toolbox with the arguments given.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"a path"},"limit":{"type":"integer","minimum":1}},"required":["path"]}`)})
	}
	for i := range 20 {
		req.Messages = append(req.Messages, Message{Role: []Role{RoleUser, RoleAssistant}[i%2], Content: strings.Repeat("An ordinary sentence of the conversation.\n", 8)})
	}
	in, _ := json.Marshal(req)
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := parseModelRequest(in); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		b.ReportAllocs()
		for b.Loop() {
			var r ModelRequest
			if err := json.Unmarshal(in, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A kept tool set: a request with tools and a name keeps them; one with the
// name alone gets them; an unknown name is an error the host answers by
// sending the set whole.
func TestToolSetResolve(t *testing.T) {
	var k toolSet
	calc := []ToolDefinition{{Name: "calc"}}
	r1 := ModelRequest{Tools: calc, ToolsRef: "a"}
	if err := k.resolve(&r1); err != nil || len(r1.Tools) != 1 {
		t.Fatalf("keep: %v %+v", err, r1)
	}
	r2 := ModelRequest{ToolsRef: "a"}
	if err := k.resolve(&r2); err != nil || len(r2.Tools) != 1 || r2.Tools[0].Name != "calc" {
		t.Fatalf("by name: %v %+v", err, r2)
	}
	r3 := ModelRequest{ToolsRef: "b"}
	var pe *Error
	if err := k.resolve(&r3); !errors.As(err, &pe) || pe.Code != CodeToolsRefUnknown {
		t.Fatalf("unknown name: %v", err)
	}
	r4 := ModelRequest{}
	if err := k.resolve(&r4); err != nil || r4.Tools != nil {
		t.Fatalf("no name, no tools: %v %+v", err, r4)
	}
}

// A kept conversation: a request naming one keeps its messages; a later one
// continuing it gets the kept part before its own; an unknown name or a
// range outside the kept conversation is an error the host answers by
// sending the whole conversation. What the model function does to its list
// never reaches the kept one.
func TestHistoryResolve(t *testing.T) {
	msg := func(s string) Message { return Message{Role: RoleUser, Content: s} }
	contents := func(ms []Message) string {
		var b strings.Builder
		for _, m := range ms {
			b.WriteString(m.Content)
		}
		return b.String()
	}
	var h history
	r1 := ModelRequest{Messages: []Message{msg("a"), msg("b"), msg("c")}, HistoryRef: "h1"}
	if err := h.resolve(&r1); err != nil || contents(r1.Messages) != "abc" || r1.HistoryRef != "" {
		t.Fatalf("keep: %v %+v", err, r1)
	}
	r1.Messages[0].Content = "X" // the model function's copy
	r1.Messages = append(r1.Messages[:1], msg("Y"))
	r2 := ModelRequest{Messages: []Message{msg("d")}, HistoryRef: "h2", HistoryFrom: "h1", HistoryKeep: 3}
	if err := h.resolve(&r2); err != nil || contents(r2.Messages) != "abcd" {
		t.Fatalf("continue: %v %q", err, contents(r2.Messages))
	}
	if r2.HistoryFrom != "" || r2.HistoryKeep != 0 || r2.HistoryRef != "" {
		t.Fatalf("the model function sees history fields: %+v", r2)
	}
	// A window that dropped the oldest message: skip it.
	r3 := ModelRequest{Messages: []Message{msg("e")}, HistoryRef: "h3", HistoryFrom: "h2", HistorySkip: 1, HistoryKeep: 2}
	if err := h.resolve(&r3); err != nil || contents(r3.Messages) != "bce" {
		t.Fatalf("skip: %v %q", err, contents(r3.Messages))
	}
	var pe *Error
	for _, bad := range []ModelRequest{
		{HistoryRef: "h4", HistoryFrom: "h2", HistoryKeep: 1}, // not the kept one any more
		{HistoryRef: "h4", HistoryFrom: "h3", HistoryKeep: 4},
		{HistoryRef: "h4", HistoryFrom: "h3", HistorySkip: 2, HistoryKeep: 2},
		{HistoryRef: "h4", HistoryFrom: "h3", HistorySkip: -1, HistoryKeep: 1},
		{HistoryRef: "h4", HistoryFrom: "h3", HistoryKeep: -1},
	} {
		if err := h.resolve(&bad); !errors.As(err, &pe) || pe.Code != CodeHistoryRefUnknown {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	// A request without names leaves the kept conversation as it was.
	r4 := ModelRequest{Messages: []Message{msg("z")}}
	if err := h.resolve(&r4); err != nil || contents(r4.Messages) != "z" || h.ref != "h3" || contents(h.msgs) != "bce" {
		t.Fatalf("no names: %v %+v %+v", err, r4, h)
	}
	// A conversation going on call after call: the kept list is built in
	// the array of the one kept before it, never in a list a model function
	// was given.
	given := map[string][]Message{"abcd": r2.Messages, "bce": r3.Messages}
	from, want := "h3", "bce"
	for i, next := range []string{"f", "g", "h", "i", "j"} {
		ref := fmt.Sprintf("h%d", 5+i)
		r := ModelRequest{Messages: []Message{msg(next)}, HistoryRef: ref, HistoryFrom: from, HistoryKeep: len(want)}
		want += next
		if err := h.resolve(&r); err != nil || contents(r.Messages) != want || contents(h.msgs) != want {
			t.Fatalf("round %d: %v, given %q, kept %q, want %q", i, err, contents(r.Messages), contents(h.msgs), want)
		}
		given[want] = r.Messages
		r.Messages[0].Content = "X" // the model function's copy
		from = ref
	}
	for w, ms := range given {
		if got := contents(ms); got != w && got != "X"+w[1:] {
			t.Fatalf("a list given to the model function changed later: %q, was %q", got, w)
		}
	}
	if contents(h.msgs) != want || cap(h.spare) == 0 {
		t.Fatalf("kept %q (want %q), spare of %d", contents(h.msgs), want, cap(h.spare))
	}
}

// modelResponseSamples are answers as models give them, and odd ones.
var modelResponseSamples = []ModelResponse{
	{Message: Message{Role: RoleAssistant, Content: "You said: hi"}, FinishReason: FinishStop, Usage: Usage{PromptTokens: 3, CompletionTokens: 3, TotalTokens: 6}},
	{Message: Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "calc", Arguments: json.RawMessage(` { "expression" : "(1+2)*3" , "n":[1, 2] } `)}, {ID: "c2", Name: "noargs"}}}, FinishReason: FinishToolCalls},
	{Message: Message{Role: RoleAssistant, Content: "<b>&amp;</b> \u2028 \x01 \"q\" é \xff", Name: "n", ToolCallID: "t", Pinned: true}},
	{Message: Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: "html", Arguments: json.RawMessage(`{"a":"<b>"}`)}}}}, // declined
	{Message: Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: "bad", Arguments: json.RawMessage(`{"a":`)}}}},        // declined
	{Message: Message{Role: RoleAssistant, Metadata: map[string]any{"k": 1}}},                                                          // declined
	{Message: Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c", Name: "null", Arguments: json.RawMessage(`null`)}}}, Usage: Usage{TotalTokens: 1}},
	{},
}

// The response writer writes what encoding/json writes, byte for byte, or
// declines.
func TestAppendModelResponseMatchesEncodingJSON(t *testing.T) {
	fast := 0
	for i, r := range modelResponseSamples {
		want, wantErr := json.Marshal(&r)
		got, ok := appendModelResponse(nil, &r)
		if !ok {
			continue
		}
		fast++
		if wantErr != nil || string(got) != string(want) {
			t.Errorf("sample %d:\n got %s\nwant %s (%v)", i, got, want, wantErr)
		}
	}
	if fast != 5 {
		t.Fatalf("%d samples written without encoding/json, want 5", fast)
	}
}

func FuzzAppendModelResponse(f *testing.F) {
	f.Add("hi", "calc", `{"x":1}`, "stop", 3, 0, true)
	f.Add("<\u2028\xff", "", ` [ 1 , "a" ] `, "", -1, 7, false)
	f.Fuzz(func(t *testing.T, content, name, args, finish string, prompt, total int, pinned bool) {
		r := ModelResponse{
			Message:      Message{Role: RoleAssistant, Content: content, Name: name, Pinned: pinned},
			FinishReason: FinishReason(finish),
			Usage:        Usage{PromptTokens: prompt, TotalTokens: total},
		}
		if args != "" {
			r.Message.ToolCalls = []ToolCall{{ID: name, Name: content, Arguments: json.RawMessage(args)}, {ID: "2"}}
		}
		got, ok := appendModelResponse(nil, &r)
		if !ok {
			return
		}
		want, err := json.Marshal(&r)
		if err != nil || string(got) != string(want) {
			t.Fatalf("%+v:\n got %s\nwant %s (%v)", r, got, want, err)
		}
	})
}
