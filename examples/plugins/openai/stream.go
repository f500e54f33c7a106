package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/looopy-go/looopy/pdk"
)

// maxLine bounds one line of the event stream.
const maxLine = 4 << 20

// The parts of a chat-completions chunk (or whole response) the adapter reads.
type (
	chunk struct {
		Choices []choice  `json:"choices"`
		Usage   *apiUsage `json:"usage"`
		Error   *apiError `json:"error"`
	}
	choice struct {
		Index        int        `json:"index"`
		Delta        *chatDelta `json:"delta"`   // streaming
		Message      *chatDelta `json:"message"` // a whole response
		FinishReason *string    `json:"finish_reason"`
	}
	chatDelta struct {
		Content          *string        `json:"content"`
		ReasoningContent string         `json:"reasoning_content"` // vLLM, DeepSeek
		Reasoning        string         `json:"reasoning"`         // Ollama, OpenRouter
		ToolCalls        []chatToolCall `json:"tool_calls"`
	}
	apiUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	apiError struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	}
)

// answer accumulates a streamed answer.
type answer struct {
	content  strings.Builder
	calls    map[int]*pdk.ToolCall
	args     map[int]*strings.Builder
	finish   string
	usage    pdk.Usage
	sawChunk bool
}

func newAnswer() *answer {
	return &answer{calls: map[int]*pdk.ToolCall{}, args: map[int]*strings.Builder{}}
}

// add folds one choice's delta in, and streams its text.
func (a *answer) add(d *chatDelta, delta func(pdk.Delta) error) error {
	var out pdk.Delta
	if d.Content != nil && *d.Content != "" {
		a.content.WriteString(*d.Content)
		out.Content = *d.Content
	}
	out.Thought = d.ReasoningContent + d.Reasoning
	for k, tc := range d.ToolCalls {
		i := k // a whole message lists calls in order, without indexes
		if tc.Index != nil {
			i = *tc.Index
		}
		c := a.calls[i]
		if c == nil {
			c = &pdk.ToolCall{}
			a.calls[i] = c
			a.args[i] = &strings.Builder{}
		}
		if tc.ID != "" {
			c.ID = tc.ID
		}
		if tc.Function.Name != "" {
			c.Name = tc.Function.Name
		}
		a.args[i].WriteString(tc.Function.Arguments)
	}
	if delta != nil && (out.Content != "" || out.Thought != "") {
		return delta(out)
	}
	return nil
}

func (a *answer) addChunk(c *chunk, delta func(pdk.Delta) error) error {
	if c.Error != nil {
		return apiErrorOf(c.Error)
	}
	a.sawChunk = true
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // one answer is asked for; ignore any other
		}
		d := ch.Delta
		if d == nil {
			d = ch.Message
		}
		if d != nil {
			if err := a.add(d, delta); err != nil {
				return err
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.finish = *ch.FinishReason
		}
	}
	if u := c.Usage; u != nil {
		a.usage = pdk.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
		if a.usage.TotalTokens == 0 {
			a.usage.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
	}
	return nil
}

func (a *answer) response() *pdk.ModelResponse {
	resp := &pdk.ModelResponse{
		Message: pdk.Message{Role: pdk.RoleAssistant, Content: a.content.String()},
		Usage:   a.usage,
	}
	idx := make([]int, 0, len(a.calls))
	for i := range a.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for n, i := range idx {
		c := *a.calls[i]
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_%d", n)
		}
		args := strings.TrimSpace(a.args[i].String())
		switch {
		case args == "":
			c.Arguments = json.RawMessage(`{}`)
		case json.Valid([]byte(args)):
			c.Arguments = json.RawMessage(args)
		default:
			// Broken JSON from the model: pass it on as a string, which
			// the tool's schema check turns into an error the model reads.
			b, _ := json.Marshal(args)
			c.Arguments = b
		}
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, c)
	}
	switch a.finish {
	case "length":
		resp.FinishReason = pdk.FinishLength
	case "content_filter":
		resp.FinishReason = pdk.FinishContentFilter
	case "tool_calls", "function_call":
		resp.FinishReason = pdk.FinishToolCalls
	default:
		resp.FinishReason = pdk.FinishStop
	}
	if len(resp.Message.ToolCalls) > 0 && resp.FinishReason == pdk.FinishStop {
		resp.FinishReason = pdk.FinishToolCalls
	}
	return resp
}

// ParseStream reads a chat-completions event stream (server-sent events whose
// data lines carry JSON chunks, ended by "data: [DONE]"), streams its text
// through delta (nil: nothing streamed) and returns the whole answer. Tool
// call arguments arrive in pieces keyed by the call's index and are joined.
// A stream that breaks or ends before the answer is finished is a transient
// error; an error object in the stream is classified like an HTTP error.
//
// Text that arrives together is sent together: the pieces of the chunks
// already read are joined into one delta, sent before the parser waits for
// more of the stream (and at its end). A client reading the deltas gets the
// same text in the same order; a slow guest or host just sends fewer,
// larger deltas instead of falling further behind.
func ParseStream(r io.Reader, delta func(pdk.Delta) error) (*pdk.ModelResponse, error) {
	a := newAnswer()
	var co coalescer
	if delta != nil {
		co.send = delta
		delta = co.add
		r = &flushBeforeRead{r: r, co: &co}
	}
	resp, err := parseStream(r, a, delta)
	if co.err != nil {
		return nil, co.err // the host refused a delta (the call was cancelled)
	}
	if ferr := co.flush(); ferr != nil {
		return nil, ferr
	}
	return resp, err
}

// coalescer joins deltas until flush.
type coalescer struct {
	send    func(pdk.Delta) error
	pending pdk.Delta
	err     error
}

// add joins d to the pending delta. A delta sends its content before its
// thought, so a thought pending before new content goes out first.
func (c *coalescer) add(d pdk.Delta) error {
	if c.err != nil {
		return c.err
	}
	if c.pending.Thought != "" && d.Content != "" {
		if err := c.flush(); err != nil {
			return err
		}
	}
	c.pending.Content += d.Content
	c.pending.Thought += d.Thought
	return nil
}

func (c *coalescer) flush() error {
	if c.err != nil {
		return c.err
	}
	if c.pending == (pdk.Delta{}) {
		return nil
	}
	d := c.pending
	c.pending = pdk.Delta{}
	c.err = c.send(d)
	return c.err
}

// flushBeforeRead sends the pending delta before each read of the stream,
// which may wait for the server.
type flushBeforeRead struct {
	r  io.Reader
	co *coalescer
}

func (f *flushBeforeRead) Read(p []byte) (int, error) {
	if err := f.co.flush(); err != nil {
		return 0, err
	}
	return f.r.Read(p)
}

func parseStream(r io.Reader, a *answer, delta func(pdk.Delta) error) (*pdk.ModelResponse, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), maxLine)
	var data []string
	done := false
	dispatch := func() error {
		if len(data) == 0 {
			return nil
		}
		payload := strings.Join(data, "\n")
		data = data[:0]
		if strings.TrimSpace(payload) == "[DONE]" {
			done = true
			return nil
		}
		var c chunk
		if !parseChunk([]byte(payload), &c) {
			c = chunk{}
			if err := json.Unmarshal([]byte(payload), &c); err != nil {
				return &pdk.Error{Code: "bad_response", Message: fmt.Sprintf("stream chunk is not JSON: %v: %.200s", err, payload), Transient: true}
			}
		}
		return a.addChunk(&c, delta)
	}
	for !done && sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		switch {
		case line == "":
			if err := dispatch(); err != nil {
				return nil, err
			}
		case strings.HasPrefix(line, ":"):
			// a comment (keep-alive)
		case strings.HasPrefix(line, "data:"):
			v := strings.TrimPrefix(line, "data:")
			data = append(data, strings.TrimPrefix(v, " "))
		default:
			// event:, id:, retry: and unknown fields carry nothing for us
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &pdk.Error{Code: "bad_response", Message: fmt.Sprintf("a stream line is longer than %d bytes", maxLine)}
		}
		var pe *pdk.Error
		if errors.As(err, &pe) && pe.Code != "" {
			return nil, err
		}
		return nil, readError(err)
	}
	if !done {
		if err := dispatch(); err != nil { // a last event without its blank line
			return nil, err
		}
	}
	if !done && a.finish == "" {
		return nil, &pdk.Error{Code: "stream_broken", Message: "the stream ended before the answer was complete", Transient: true}
	}
	return a.response(), nil
}

// ParseResponse reads a whole (non-streamed) chat-completions response, for
// servers that answer a streaming request with plain JSON.
func ParseResponse(body []byte, delta func(pdk.Delta) error) (*pdk.ModelResponse, error) {
	var c chunk
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, &pdk.Error{Code: "bad_response", Message: fmt.Sprintf("response is not JSON: %v: %.200s", err, body)}
	}
	a := newAnswer()
	if err := a.addChunk(&c, delta); err != nil {
		return nil, err
	}
	if len(c.Choices) == 0 {
		return nil, &pdk.Error{Code: "bad_response", Message: "response has no choices"}
	}
	return a.response(), nil
}
