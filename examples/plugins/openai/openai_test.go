package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/pdk"
)

func parseFile(t *testing.T, name string) (*pdk.ModelResponse, []pdk.Delta, error) {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var deltas []pdk.Delta
	resp, err := ParseStream(&eventReader{r: f}, func(d pdk.Delta) error { deltas = append(deltas, d); return nil })
	return resp, deltas, err
}

// eventReader hands out a stream one event per read, as a server that
// sends each chunk as it is generated.
type eventReader struct {
	r    io.Reader
	rest []byte
	read bool
}

func (e *eventReader) Read(p []byte) (int, error) {
	if !e.read {
		b, err := io.ReadAll(e.r)
		if err != nil {
			return 0, err
		}
		e.rest, e.read = b, true
	}
	if len(e.rest) == 0 {
		return 0, io.EOF
	}
	n := len(e.rest)
	for _, end := range []string{"\n\n", "\n\r\n"} {
		if i := strings.Index(string(e.rest), end); i >= 0 && i+len(end) < n {
			n = i + len(end)
		}
	}
	n = copy(p, e.rest[:n])
	e.rest = e.rest[n:]
	return n, nil
}

func TestParseStreamText(t *testing.T) {
	resp, deltas, err := parseFile(t, "text.sse")
	if err != nil {
		t.Fatal(err)
	}
	want := &pdk.ModelResponse{
		Message:      pdk.Message{Role: pdk.RoleAssistant, Content: "Hello, wörld!"},
		FinishReason: pdk.FinishStop,
		Usage:        pdk.Usage{PromptTokens: 12, CompletionTokens: 4, TotalTokens: 16},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("response %+v\nwant %+v", resp, want)
	}
	wantDeltas := []pdk.Delta{{Content: "Hello"}, {Content: ", wörld"}, {Content: "!"}}
	if !reflect.DeepEqual(deltas, wantDeltas) {
		t.Errorf("deltas %+v, want %+v", deltas, wantDeltas)
	}
}

func TestParseStreamToolCalls(t *testing.T) {
	resp, deltas, err := parseFile(t, "tools.sse")
	if err != nil {
		t.Fatal(err)
	}
	if len(deltas) != 0 {
		t.Errorf("deltas %+v for a pure tool-call answer", deltas)
	}
	want := []pdk.ToolCall{
		{ID: "call_abc", Name: "calc", Arguments: json.RawMessage(`{"expression": "2+2"}`)},
		{ID: "call_def", Name: "fetch", Arguments: json.RawMessage(`{"url": "https://example.com/"}`)},
	}
	if !reflect.DeepEqual(resp.Message.ToolCalls, want) {
		t.Errorf("tool calls %s\nwant %s", mustJSON(resp.Message.ToolCalls), mustJSON(want))
	}
	if resp.FinishReason != pdk.FinishToolCalls || resp.Usage.TotalTokens != 110 || resp.Message.Content != "" {
		t.Errorf("finish %q usage %+v content %q", resp.FinishReason, resp.Usage, resp.Message.Content)
	}
}

func TestParseStreamReasoningCRLFWithoutDone(t *testing.T) {
	resp, deltas, err := parseFile(t, "reasoning-crlf-nodone.sse")
	if err != nil {
		t.Fatal(err)
	}
	wantDeltas := []pdk.Delta{{Thought: "Two plus "}, {Thought: "two is four."}, {Content: "4"}}
	if !reflect.DeepEqual(deltas, wantDeltas) {
		t.Errorf("deltas %+v, want %+v", deltas, wantDeltas)
	}
	if resp.Message.Content != "4" || resp.FinishReason != pdk.FinishStop || resp.Usage != (pdk.Usage{}) {
		t.Errorf("response %+v", resp)
	}
}

func TestParseStreamOllamaStyle(t *testing.T) {
	// Whole tool calls in one chunk, and finish_reason "stop" despite them.
	resp, _, err := parseFile(t, "ollama.sse")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "Hi" || len(resp.Message.ToolCalls) != 1 || resp.FinishReason != pdk.FinishToolCalls {
		t.Fatalf("response %+v", resp)
	}
	if c := resp.Message.ToolCalls[0]; c.ID != "call_x1" || string(c.Arguments) != `{"expression":"6*7"}` {
		t.Errorf("call %+v", c)
	}
}

func TestParseStreamFailures(t *testing.T) {
	var pe *pdk.Error
	_, _, err := parseFile(t, "truncated.sse")
	if !errors.As(err, &pe) || !pe.Transient || pe.Code != "stream_broken" {
		t.Errorf("truncated: %v, want a transient stream_broken error", err)
	}
	_, deltas, err := parseFile(t, "error.sse")
	if !errors.As(err, &pe) || !pe.Transient || pe.Code != "server_error" || !strings.Contains(pe.Message, "overloaded") {
		t.Errorf("error chunk: %#v", err)
	}
	if len(deltas) != 1 {
		t.Errorf("the text before the error was not streamed: %+v", deltas)
	}
	_, err = ParseStream(strings.NewReader("data: {not json\n\n"), nil)
	if !errors.As(err, &pe) || pe.Code != "bad_response" {
		t.Errorf("bad JSON: %v", err)
	}
	_, err = ParseStream(io.MultiReader(strings.NewReader("data: {\"choices\":[]}\n\n"), failing{}), nil)
	if !errors.As(err, &pe) || !pe.Transient || !strings.Contains(pe.Message, "connection reset") {
		t.Errorf("broken connection: %v", err)
	}
	_, err = ParseStream(strings.NewReader("data: "+strings.Repeat("x", maxLine+1)), nil)
	if !errors.As(err, &pe) || !strings.Contains(pe.Message, "longer than") {
		t.Errorf("long line: %v", err)
	}
	_, err = ParseStream(io.MultiReader(strings.NewReader("data: {\"choices\":[]}\n\n"), cancelled{}), nil)
	if !errors.As(err, &pe) || pe.Transient || pe.Code != pdk.CodeCanceled {
		t.Errorf("read ended by a cancel: %#v, want a permanent canceled error", err)
	}
	_, err = ParseStream(strings.NewReader(""), nil)
	if !errors.As(err, &pe) || !pe.Transient {
		t.Errorf("empty stream: %v", err)
	}
}

func TestParseStreamStopsWhenDeltaFails(t *testing.T) {
	f, _ := os.Open("testdata/text.sse")
	defer f.Close()
	stop := errors.New("cancelled")
	n := 0
	_, err := ParseStream(f, func(pdk.Delta) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("err %v after %d deltas, want cancelled after 1", err, n)
	}
}

func TestParseStreamBrokenArguments(t *testing.T) {
	s := `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"calc","arguments":"{\"expr"}}]},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
	resp, err := ParseStream(strings.NewReader(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Message.ToolCalls[0]
	if c.ID != "call_0" || string(c.Arguments) != `"{\"expr"` {
		t.Errorf("call %+v: want a generated id and the broken arguments as a JSON string", c)
	}
	if _, err := json.Marshal(resp); err != nil {
		t.Errorf("the response does not encode: %v", err)
	}
}

func TestParseResponse(t *testing.T) {
	b, _ := os.ReadFile("testdata/whole.json")
	resp, err := ParseResponse(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Message.ToolCalls) != 1 || resp.Message.ToolCalls[0].Name != "calc" || resp.FinishReason != pdk.FinishToolCalls || resp.Usage.TotalTokens != 30 {
		t.Errorf("response %+v", resp)
	}
	var pe *pdk.Error
	if _, err := ParseResponse([]byte(`{"choices":[]}`), nil); !errors.As(err, &pe) || pe.Code != "bad_response" {
		t.Errorf("no choices: %v", err)
	}
	if _, err := ParseResponse([]byte(`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`), nil); !errors.As(err, &pe) || !pe.Transient {
		t.Errorf("error body: %v", err)
	}
}

// cancelled reads as the SDK's body does once the host ended the read of a
// cancelled call: an error with the code canceled (the words say nothing
// the guest decides by).
type cancelled struct{}

func (cancelled) Read([]byte) (int, error) {
	return 0, fmt.Errorf("http body: %w", &pdk.Error{Code: pdk.CodeCanceled, Message: "http read: the call ended"})
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestBuildRequest(t *testing.T) {
	temp := 0.2
	cfg := Config{Model: "gpt-4o-mini", MaxTokens: 500, Temperature: &temp}
	req := &pdk.ModelRequest{
		Messages: []pdk.Message{
			{Role: pdk.RoleSystem, Content: "be brief"},
			{Role: pdk.RoleUser, Content: "calc 2+2"},
			{Role: pdk.RoleAssistant, ToolCalls: []pdk.ToolCall{
				{ID: "c1", Name: "calc", Arguments: json.RawMessage(`{"expression":"2+2"}`)},
				{ID: "c2", Name: "now"},
			}},
			{Role: pdk.RoleTool, ToolCallID: "c1", Name: "calc", Content: "4"},
			{Role: pdk.RoleTool, ToolCallID: "c2", Name: "now", Content: ""},
			{Role: pdk.RoleAssistant, Content: "It is 4."},
		},
		Tools: []pdk.ToolDefinition{
			{Name: "calc", Description: "math", Parameters: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string"}}}`)},
			{Name: "now"},
		},
		MaxTokens: 100,
	}
	b, err := BuildRequest(cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
		"model": "gpt-4o-mini",
		"messages": [
			{"role": "system", "content": "be brief"},
			{"role": "user", "content": "calc 2+2"},
			{"role": "assistant", "content": null, "tool_calls": [
				{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"expression\":\"2+2\"}"}},
				{"id": "c2", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": "4"},
			{"role": "tool", "tool_call_id": "c2", "content": ""},
			{"role": "assistant", "content": "It is 4."}
		],
		"tools": [
			{"type": "function", "function": {"name": "calc", "description": "math", "parameters": {"type":"object","properties":{"expression":{"type":"string"}}}}},
			{"type": "function", "function": {"name": "now", "parameters": {"type":"object","properties":{}}}}
		],
		"temperature": 0.2,
		"max_tokens": 100,
		"stream": true,
		"stream_options": {"include_usage": true}
	}`
	var got, exp any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("request\n%s\nwant\n%s", b, mustJSON(exp))
	}
}

func TestBuildRequestModelFromMetadata(t *testing.T) {
	req := &pdk.ModelRequest{Messages: []pdk.Message{{Role: pdk.RoleUser, Content: "x"}}, Metadata: map[string]any{"model": "llama3.2"}}
	b, err := BuildRequest(Config{Model: "gpt-4o-mini"}, req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"model":"llama3.2"`) {
		t.Errorf("request %s does not name the metadata's model", b)
	}
}

func TestBuildRequestErrors(t *testing.T) {
	cfg := Config{Model: "m"}
	for _, tt := range []struct {
		req  pdk.ModelRequest
		want string
	}{
		{pdk.ModelRequest{}, "no messages"},
		{pdk.ModelRequest{Messages: []pdk.Message{{Role: "robot", Content: "x"}}}, `message 0: unknown role "robot"`},
		{pdk.ModelRequest{Messages: []pdk.Message{{Role: pdk.RoleTool, Content: "x"}}}, "without toolCallId"},
	} {
		if _, err := BuildRequest(cfg, &tt.req); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.req, err, tt.want)
		}
	}
}

func TestConfig(t *testing.T) {
	if got := (Config{Model: "m"}).Endpoint(); got != "https://api.openai.com/v1/chat/completions" {
		t.Errorf("default endpoint %s", got)
	}
	if got := (Config{Model: "m", BaseURL: "http://localhost:11434/v1/"}).Endpoint(); got != "http://localhost:11434/v1/chat/completions" {
		t.Errorf("endpoint %s", got)
	}
	for _, c := range []Config{{}, {Model: "m", BaseURL: "localhost:8000"}, {Model: "m", BaseURL: "ftp://x/"}} {
		if err := c.Check(); err == nil {
			t.Errorf("%+v passed the check", c)
		}
	}
	if err := (Config{Model: "m", BaseURL: "http://127.0.0.1:8000/v1"}).Check(); err != nil {
		t.Error(err)
	}
}

func TestStatusError(t *testing.T) {
	tests := []struct {
		status    int
		body      string
		code      string
		transient bool
		msg       string
	}{
		{429, `{"error":{"message":"Rate limit reached for requests","type":"requests"}}`, "rate_limit", true, "HTTP 429: Rate limit reached for requests"},
		{500, `oops`, "server_error", true, "HTTP 500: oops"},
		{503, ``, "server_error", true, "HTTP 503"},
		{408, ``, "timeout", true, "HTTP 408"},
		{401, `{"error":{"message":"Incorrect API key provided"}}`, "unauthorized", false, "HTTP 401: Incorrect API key provided"},
		{404, `{"error":{"message":"The model does not exist"}}`, "not_found", false, "HTTP 404: The model does not exist"},
		{400, `{"error":{"message":"bad"}}`, "bad_request", false, "HTTP 400: bad"},
		{418, `teapot`, "http_418", false, "HTTP 418: teapot"},
	}
	for _, tt := range tests {
		e := StatusError(tt.status, []byte(tt.body))
		if e.Code != tt.code || e.Transient != tt.transient || e.Message != tt.msg {
			t.Errorf("StatusError(%d) = %+v, want %s %v %q", tt.status, e, tt.code, tt.transient, tt.msg)
		}
	}
	if e := StatusError(500, []byte(strings.Repeat("é", 400))); len(e.Message) > 320 || !strings.HasSuffix(e.Message, "…") {
		t.Errorf("long body not clipped: %d bytes", len(e.Message))
	}
}

func TestTransportError(t *testing.T) {
	denied := TransportError(&pdk.Error{Code: pdk.CodeDenied, Message: "host not allowed"})
	if denied.Transient || denied.Code != pdk.CodeDenied {
		t.Errorf("denied: %+v", denied)
	}
	if e := TransportError(errors.New("dial tcp: connection refused")); !e.Transient {
		t.Errorf("connection refused: %+v", e)
	}
	// A cancel is told by its code; words that look like one are not.
	if e := TransportError(fmt.Errorf("http: %w", &pdk.Error{Code: pdk.CodeCanceled, Message: "ended"})); e.Transient || e.Code != pdk.CodeCanceled {
		t.Errorf("cancelled: %+v", e)
	}
	if e := TransportError(errors.New("upstream said: context canceled")); !e.Transient || e.Code == pdk.CodeCanceled {
		t.Errorf("words about a cancel, from elsewhere: %+v", e)
	}
	if e := readError(errors.New("proxy: context canceled")); !e.Transient || e.Code == pdk.CodeCanceled {
		t.Errorf("a read error that only says canceled: %+v", e)
	}
}

func FuzzParseStream(f *testing.F) {
	for _, name := range []string{"text.sse", "tools.sse", "truncated.sse"} {
		b, _ := os.ReadFile("testdata/" + name)
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, s string) {
		resp, err := ParseStream(strings.NewReader(s), func(pdk.Delta) error { return nil })
		if err == nil {
			if _, err := json.Marshal(resp); err != nil {
				t.Errorf("a parsed response does not encode: %v", err)
			}
		}
	})
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		headers map[string][]string
		want    time.Duration
	}{
		{map[string][]string{"Retry-After": {"7"}}, 7 * time.Second},
		{map[string][]string{"retry-after": {" 2 "}}, 2 * time.Second},
		{map[string][]string{"Retry-After-Ms": {"1500"}, "Retry-After": {"9"}}, 1500 * time.Millisecond},
		{map[string][]string{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{map[string][]string{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0},
		{map[string][]string{"Retry-After": {"-3"}}, 0},
		{map[string][]string{"Retry-After": {"soon"}}, 0},
		{nil, 0},
	} {
		if got := RetryAfter(tc.headers, now); got != tc.want {
			t.Errorf("RetryAfter(%v) = %s, want %s", tc.headers, got, tc.want)
		}
	}
}
