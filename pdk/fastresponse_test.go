package pdk

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// responseSamples are answers as a guest may write them: as encoding/json
// and appendModelResponse write them, and odd ones a guest of another
// making could send.
func responseSamples() []string {
	var out []string
	for i := range modelResponseSamples {
		if b, err := json.Marshal(&modelResponseSamples[i]); err == nil {
			out = append(out, string(b))
		}
		if b, ok := appendModelResponse(nil, &modelResponseSamples[i]); ok {
			out = append(out, string(b))
		}
	}
	return append(out,
		`{"message":{"role":"assistant","content":"a"},"message":{"content":"b"}}`,
		`{"usage":{"promptTokens":1},"usage":{"totalTokens":2}}`,
		`{"message":null,"finishReason":null,"usage":null}`,
		`{"Message":{"Content":"case"}}`,
		`{"message":{"toolCalls":[{"id":"c","name":"n","arguments":{"a":tru}}]}}`,
		`{"message":{"toolCalls":[{"id":"c","name":"n","arguments":{"a" 1}}]}}`,
		`{"message":{"toolCalls":[null,{"id":"c","arguments":null}]}}`,
		`{"message":{"content":"x","content":"y"},"finishReason":"stop","finishReason":"length"}`,
		`{"usage":{"promptTokens":1.5}}`,
		`{"usage":{"promptTokens":-3,"completionTokens":1e2}}`,
		`{"usage":{"promptTokens":99999999999999999999}}`,
		`{"extra":1,"message":{}}`,
		`{"message":{"metadata":{"k":[1,"a",null]}}}`,
		`{"message":{"content":"\ud800"}}`,
		`{"message":{"content":"tab\tinside"}}`,
		` {"finishReason":"stop"} `,
		`{"finishReason":"stop"} x`,
		`{"finishReason":"stop",}`,
		`null`, `[]`, `{}`, ``,
	)
}

func FuzzParseModelResponse(f *testing.F) {
	for _, s := range responseSamples() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, ok := ParseModelResponse([]byte(in))
		if !ok {
			return
		}
		var want ModelResponse
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%q: read, but encoding/json refuses it: %v", in, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", in, got, want)
		}
	})
}

func FuzzParseDelta(f *testing.F) {
	for _, s := range []string{`{"content":"a"}`, `{"thought":"t","content":"\u00e9\n"}`, `{"content":null}`, `{"Content":"a"}`,
		`{"content":"a","content":"b"}`, `{"content":1}`, `{}`, `null`, `{"content":"\xff"}`, `{"content":"a"}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, ok := ParseDelta([]byte(in))
		if !ok {
			return
		}
		var want Delta
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%q: read, but encoding/json refuses it: %v", in, err)
		}
		if got != want {
			t.Fatalf("%q:\n got %#v\nwant %#v", in, got, want)
		}
	})
}

func FuzzParseToolResult(f *testing.F) {
	for _, s := range []string{`{"content":"a"}`, `{"toolCallId":"c","content":"\u00e9\n","isError":true,"data":{"n":[1,2.5,"x"]}}`,
		`{"content":null,"isError":null,"data":null}`, `{"Content":"a"}`, `{"content":"a","content":"b"}`,
		`{"data":{"a":1},"data":[2]}`, `{"data":{"a":tru}}`, `{"data":{"a" 1}}`, `{"isError":"true"}`, `{"isError":1}`,
		`{"content":1}`, `{}`, `null`, `[]`, ``, `{"content":"\xff"}`, `{"content":"a"}}`, ` {"content":"a"} `,
		`{"content":"a",}`, `{"content":"\ud800"}`, `{"extra":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, ok := ParseToolResult([]byte(in))
		if !ok {
			return
		}
		var want ToolResult
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%q: read, but encoding/json refuses it: %v", in, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", in, got, want)
		}
	})
}

// What a pdk guest writes for a tool's answer, and what encoding/json
// writes, take the fast path and read as encoding/json reads them.
func TestParseToolResultReadsWhatGuestsWrite(t *testing.T) {
	for _, r := range []ToolResult{
		{Content: "echo"},
		{ToolCallID: "call-1", Content: "line one\nline \"two\" é \u2028", IsError: true},
		{Content: "", Data: json.RawMessage(`{"rows":[{"a":1,"b":"x"}],"more":false}`)},
		{Content: "n", Data: json.RawMessage(`null`)},
	} {
		for _, b := range [][]byte{appendToolResult(nil, &r), mustMarshal(t, &r)} {
			got, ok := ParseToolResult(b)
			if !ok {
				t.Fatalf("%s: not read", b)
			}
			var want ToolResult
			if err := json.Unmarshal(b, &want); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s:\n got %#v\nwant %#v (%v)", b, got, want, err)
			}
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The answers a pdk guest writes, and a model's usual answers, take the
// fast path; what it cannot be sure of is left to encoding/json.
func TestParseModelResponseReadsUsualAnswers(t *testing.T) {
	read := 0
	for i := range modelResponseSamples {
		b, ok := appendModelResponse(nil, &modelResponseSamples[i])
		if !ok {
			continue
		}
		got, ok := ParseModelResponse(b)
		if !ok {
			t.Fatalf("%s: not read", b)
		}
		var want ModelResponse
		if err := json.Unmarshal(b, &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %#v\nwant %#v (%v)", b, got, want, err)
		}
		read++
	}
	if read < 4 {
		t.Fatalf("%d samples read, want at least 4", read)
	}
	for _, bad := range []string{
		`{"message":{"toolCalls":[{"id":"c","name":"n","arguments":{"a":tru}}]}}`, // arguments that are not JSON
		`{"message":{"content":"a"},"message":{"role":"assistant"}}`,              // encoding/json merges the two
		`{"usage":{"promptTokens":1.5}}`,
		`{"finishReason":"stop"} x`,
	} {
		if _, ok := ParseModelResponse([]byte(bad)); ok {
			t.Fatalf("%s: read", bad)
		}
	}
	if d, ok := ParseDelta([]byte(`{"content":"a\"b","thought":"c"}`)); !ok || d != (Delta{Content: `a"b`, Thought: "c"}) {
		t.Fatalf("delta %+v %v", d, ok)
	}
}

// BenchmarkDecodeModelResponse: the host's decoding of a model's answer
// (a paragraph and two tool calls) and of a streamed piece, fast path
// against encoding/json.
func BenchmarkDecodeModelResponse(b *testing.B) {
	resp := ModelResponse{
		Message: Message{Role: RoleAssistant, Content: "You said: say this back. " + strings.Repeat("An ordinary sentence of the answer. ", 6),
			ToolCalls: []ToolCall{{ID: "call_1_0_0", Name: "tool_01", Arguments: json.RawMessage(`{"path":"notes.txt","limit":20}`)},
				{ID: "call_1_0_1", Name: "tool_02", Arguments: json.RawMessage(`{"path":"todo.txt","mode":"lines"}`)}}},
		FinishReason: FinishToolCalls,
		Usage:        Usage{PromptTokens: 812, CompletionTokens: 40, TotalTokens: 852},
	}
	in, _ := json.Marshal(&resp)
	delta, _ := json.Marshal(Delta{Content: "a piece of the answer, "})
	run := func(name string, in []byte, fast func([]byte) bool, slow func([]byte) error) {
		b.Run(name+"/fast", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if !fast(in) {
					b.Fatal("declined")
				}
			}
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if err := slow(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("response", in, func(b []byte) bool { _, ok := ParseModelResponse(b); return ok },
		func(b []byte) error { var r ModelResponse; return json.Unmarshal(b, &r) })
	run("delta", delta, func(b []byte) bool { _, ok := ParseDelta(b); return ok },
		func(b []byte) error { var d Delta; return json.Unmarshal(b, &d) })
}
