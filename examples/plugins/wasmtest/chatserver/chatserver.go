// Package chatserver is an OpenAI-compatible chat-completions server for
// tests: it speaks the wire format a real server speaks (server-sent chunks
// with text and tool-call deltas, a usage chunk, [DONE], JSON error bodies,
// Retry-After) and answers from a queue of scripted replies. It is the model
// the tests run the real openai.wasm adapter against, on loopback.
package chatserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Reply is one scripted answer to a chat-completions request.
type Reply struct {
	// Status other than 0 or 200 answers with an error body carrying
	// ErrorMessage (and ErrorType), and RetryAfter as the header when set.
	Status       int
	ErrorMessage string
	ErrorType    string
	RetryAfter   string
	// EchoKey answers 401 with the message a real server gives for a wrong
	// key, quoting the key it received.
	EchoKey bool
	// Text is sent as content deltas, one chunk per element.
	Text []string
	// ChunkDelay is waited before each content chunk: a model generating.
	ChunkDelay time.Duration
	// ToolCalls are sent as deltas: the id and name first, then the
	// arguments in two pieces.
	ToolCalls []ToolCall
	// Finish is the finish_reason of the last chunk (default "stop", or
	// "tool_calls" when there are calls).
	Finish string
	// Stall, after the text, keeps the stream open without a word until
	// the client goes away (or Release is closed).
	Stall bool
	// Usage of the answer; zero: counted from the text.
	PromptTokens, CompletionTokens int
}

// ToolCall is one tool call of a reply.
type ToolCall struct {
	ID, Name, Arguments string
}

// Request is what the server received.
type Request struct {
	Auth string
	Body map[string]any
}

// Server is the chat-completions server. Replies are served in order; when
// none is left, Default is served.
type Server struct {
	*httptest.Server
	Default Reply
	// Release, when closed, ends every stalled stream.
	Release chan struct{}

	mu         sync.Mutex
	replies    []Reply
	requests   []Request
	lastStream [2]time.Time // the last streamed answer's first and last flush
}

// LastStream reports when the last streamed answer's first chunk and its
// [DONE] were flushed (zero before any): a benchmark tells from it how long
// the server took and how long its client took after the server was done.
func (s *Server) LastStream() (first, done time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastStream[0], s.lastStream[1]
}

// Start starts a server on loopback; it is closed when the test ends
// through cleanup.
func Start(cleanup func(func()), replies ...Reply) *Server {
	s := &Server{Default: Reply{Text: []string{"ok"}}, Release: make(chan struct{}), replies: replies}
	s.Server = httptest.NewServer(s)
	cleanup(func() {
		s.mu.Lock()
		select {
		case <-s.Release:
		default:
			close(s.Release)
		}
		s.mu.Unlock()
		s.Server.Close()
	})
	return s
}

// BaseURL is what the adapter's baseUrl should be.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Push queues more replies.
func (s *Server) Push(r ...Reply) {
	s.mu.Lock()
	s.replies = append(s.replies, r...)
	s.mu.Unlock()
}

// Requests returns what the server received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ServeHTTP answers POST /v1/chat/completions.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		writeError(w, http.StatusNotFound, "Unknown request URL: "+r.Method+" "+r.URL.Path, "invalid_request_error", "")
		return
	}
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		writeError(w, http.StatusBadRequest, "We could not parse the JSON body of your request.", "invalid_request_error", "")
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Auth: r.Header.Get("Authorization"), Body: body})
	reply := s.Default
	if len(s.replies) > 0 {
		reply, s.replies = s.replies[0], s.replies[1:]
	}
	s.mu.Unlock()

	if reply.EchoKey {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		writeError(w, http.StatusUnauthorized, "Incorrect API key provided: "+key+". You can find your API key at https://platform.openai.com/account/api-keys.",
			"invalid_request_error", "invalid_api_key")
		return
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		if reply.RetryAfter != "" {
			w.Header().Set("Retry-After", reply.RetryAfter)
		}
		typ := reply.ErrorType
		if typ == "" {
			typ = "server_error"
		}
		writeError(w, reply.Status, reply.ErrorMessage, typ, "")
		return
	}
	model, _ := body["model"].(string)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	send := func(v any) {
		j, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", j)
		if fl != nil {
			fl.Flush()
		}
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	first := time.Now()
	words := 0
	for _, t := range reply.Text {
		if reply.ChunkDelay > 0 {
			time.Sleep(reply.ChunkDelay)
		}
		send(chunk(map[string]any{"content": t}, nil))
		words += len(strings.Fields(t))
	}
	if reply.Stall {
		select {
		case <-r.Context().Done():
		case <-s.Release:
		}
		return
	}
	for i, c := range reply.ToolCalls {
		id := c.ID
		if id == "" {
			id = "call_" + strconv.Itoa(i)
		}
		send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": id, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""}}}}, nil))
		half := len(c.Arguments) / 2
		for _, part := range []string{c.Arguments[:half], c.Arguments[half:]} {
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": part}}}}, nil))
		}
	}
	finish := reply.Finish
	if finish == "" {
		finish = "stop"
		if len(reply.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	send(chunk(map[string]any{}, finish))
	prompt, completion := reply.PromptTokens, reply.CompletionTokens
	if prompt == 0 {
		prompt = 10
	}
	if completion == 0 {
		completion = words + 1
	}
	send(map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
	done := time.Now()
	s.mu.Lock()
	s.lastStream = [2]time.Time{first, done}
	s.mu.Unlock()
}

func writeError(w http.ResponseWriter, status int, msg, typ, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if code != "" {
		e["code"] = code
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}
