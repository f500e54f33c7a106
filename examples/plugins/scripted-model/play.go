package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/looopy-go/looopy/pdk"
)

// Runtime is what playing a script needs from its surroundings.
type Runtime struct {
	// Delta streams a piece of the answer; an error (the call was cancelled)
	// stops the play. Nil: nothing is streamed.
	Delta func(pdk.Delta) error
	// Sleep waits d; an error (the call was cancelled) stops the play.
	// Nil: delays are skipped.
	Sleep func(d time.Duration) error
	// Attempt counts the attempts of a request whose metadata does not say
	// which attempt it is (a host that does not report its retries); key
	// identifies the request. Asked only when a step depends on the
	// attempt. Nil: such a request is always attempt 1.
	Attempt func(key string) int
	// Forget is told when a request counted by Attempt got past its
	// failing steps, so its count can go. Nil: nothing to forget.
	Forget func(key string)
	// Words remembers the word counts of the previous call's messages.
	// Nil: every message is counted on every call.
	Words *WordCounts
	// Picks remembers the rule picked for the previous call's input.
	// Nil: the rules are matched on every call.
	Picks *PickCache
}

// PickCache remembers which rule the previous call's input matched, and its
// captures: the calls of one turn (one per round of tool calls) and a
// retried call share their latest user message, and matching the rules'
// regular expressions was a good part of the scripted model's CPU per call
// in a Go guest. It holds for one script: Play forgets what it remembers
// when called with another. Not for concurrent use.
type PickCache struct {
	script *Script
	input  string
	rule   *Rule
	groups []string
}

// WordCounts remembers the word count of each message of the previous call,
// with the message's text. A guest that keeps its conversation
// (pdk.FeatureHistoryRef) gets the same strings again on the next call, so
// a text whose bytes are the very ones counted before (same address and
// length: strings do not change, and the one remembered here keeps its
// bytes from being reused) is not counted again. Counting the words of a
// long conversation was most of the scripted model's CPU per call. Not for
// concurrent use.
type WordCounts struct{ prev, next []counted }

type counted struct {
	s     string
	calls []pdk.ToolCall
	n     int
}

// count returns the words of message i: its text's, and each tool call's
// arguments' plus one. The tool calls are taken as counted before when
// they are the very list counted (same array and length): a kept
// conversation hands the model function the same lists again, and the
// model function does not change them (pdk.ModelFunc).
func (w *WordCounts) count(i int, m *pdk.Message) int {
	if w == nil {
		return messageWords(m)
	}
	n := -1
	if i < len(w.prev) {
		c := w.prev[i]
		if len(c.s) == len(m.Content) && unsafe.StringData(c.s) == unsafe.StringData(m.Content) &&
			len(c.calls) == len(m.ToolCalls) && unsafe.SliceData(c.calls) == unsafe.SliceData(m.ToolCalls) {
			n = c.n
		}
	}
	if n < 0 {
		n = messageWords(m)
	}
	w.next = append(w.next, counted{m.Content, m.ToolCalls, n})
	return n
}

// messageWords counts the words of a message's text and of its tool calls.
func messageWords(m *pdk.Message) int {
	n := words(m.Content)
	for _, tc := range m.ToolCalls {
		n += words(unsafe.String(unsafe.SliceData(tc.Arguments), len(tc.Arguments))) + 1
	}
	return n
}

// done ends a call: its counts are the ones to remember.
func (w *WordCounts) done() {
	if w == nil {
		return
	}
	clear(w.prev)
	w.prev, w.next = w.next, w.prev[:0]
}

// echoText is the answer of the built-in default rule.
const echoText = "You said: {{history}}"

var echoRule = func() *Rule {
	t := echoText
	r := &Rule{Name: "echo", Steps: []Step{{Text: &t}}}
	r.segs = segments(r.Steps)
	return r
}()

// conversation is what the script reads from a request.
type conversation struct {
	input       string        // the latest user message, trimmed
	msgs        []pdk.Message // the request's messages
	users       int           // how many are user messages
	done        int           // assistant messages with tool calls since the latest user message
	toolResults []string      // tool results since the latest user message
	attempt     int
	promptWords int
}

func readConversation(req *pdk.ModelRequest, wc *WordCounts) conversation {
	c := conversation{msgs: req.Messages}
	last := -1
	defer wc.done()
	for i := range req.Messages {
		m := &req.Messages[i]
		c.promptWords += wc.count(i, m)
		if m.Role == pdk.RoleUser {
			last = i
			c.users++
		}
	}
	if last >= 0 {
		c.input = strings.TrimSpace(req.Messages[last].Content)
	}
	for _, m := range req.Messages[last+1:] {
		switch {
		case m.Role == pdk.RoleAssistant && len(m.ToolCalls) > 0:
			c.done++
		case m.Role == pdk.RoleTool:
			c.toolResults = append(c.toolResults, m.Content)
		}
	}
	c.attempt = attemptOf(req.Metadata)
	return c
}

// attemptOf reads the host's retry counter from the request metadata.
func attemptOf(md map[string]any) int {
	switch v := md["attempt"].(type) {
	case float64:
		if v >= 1 {
			return int(v)
		}
	case int:
		if v >= 1 {
			return v
		}
	case json.Number:
		if n, err := v.Int64(); err == nil && n >= 1 {
			return int(n)
		}
	}
	return 1
}

// pickCached is pick through the cache: the captures it returns are shared
// with the cache, and must not be changed.
func (s *Script) pickCached(input string, pc *PickCache) (*Rule, []string) {
	if pc == nil {
		return s.pick(input)
	}
	if pc.rule != nil && pc.script == s && pc.input == input {
		return pc.rule, pc.groups
	}
	rule, groups := s.pick(input)
	pc.script, pc.input, pc.rule, pc.groups = s, input, rule, groups
	return rule, groups
}

// pick returns the rule for the latest user message and its captures.
func (s *Script) pick(input string) (*Rule, []string) {
	for i := range s.Rules {
		r := &s.Rules[i]
		if m := r.re.FindStringSubmatch(input); m != nil {
			return r, m
		}
	}
	if s.Default != nil {
		return s.Default, []string{input}
	}
	return echoRule, []string{input}
}

// segments splits a rule's steps into model calls: each call plays up to and
// including a run of consecutive tool calls, and the next call (once the
// results are in) carries on after them.
func segments(steps []Step) [][]Step {
	var out [][]Step
	start := 0
	for i := range steps {
		endsRun := steps[i].ToolCall != nil && (i+1 == len(steps) || steps[i+1].ToolCall == nil)
		if endsRun {
			out = append(out, steps[start:i+1])
			start = i + 1
		}
	}
	if start < len(steps) {
		out = append(out, steps[start:])
	}
	return out
}

// Play answers one model call. Which part of the matched rule to play is
// derived from the request alone: the number of assistant tool-call messages
// since the latest user message says how many tool-call runs were played
// already. So the same request always gets the same answer.
func (s *Script) Play(req *pdk.ModelRequest, rt Runtime) (*pdk.ModelResponse, error) {
	conv := readConversation(req, rt.Words)
	rule, groups := s.pickCached(conv.input, rt.Picks)
	segs := rule.segs
	if segs == nil {
		segs = segments(rule.Steps)
	}
	counted := ""
	if _, reported := req.Metadata["attempt"]; !reported && rt.Attempt != nil &&
		conv.done < len(segs) && dependsOnAttempt(segs[conv.done]) {
		counted = requestKey(req)
		conv.attempt = max(rt.Attempt(counted), 1)
	}
	v := &vars{
		groups:      groups,
		input:       conv.input,
		msgs:        conv.msgs,
		toolResults: strings.Join(conv.toolResults, "\n"),
		attempt:     conv.attempt,
	}
	if rule.re != nil {
		v.names = rule.re.SubexpNames()
	}
	if n := len(conv.toolResults); n > 0 {
		v.lastToolResult = conv.toolResults[n-1]
	}

	var steps []Step
	if conv.done < len(segs) {
		steps = segs[conv.done]
	} else {
		// The rule ended with tool calls: answer with the last result.
		t := "{{lastToolResult}}"
		steps = []Step{{Text: &t}}
	}

	var (
		content  strings.Builder
		calls    []pdk.ToolCall
		outWords int
		produced int // bytes of text and thought so far
	)
	for k, st := range steps {
		switch {
		case st.Text != nil || st.Thought != nil:
			n := 1
			if st.Repeat != "" {
				r, err := expand(string(st.Repeat), v)
				if err != nil {
					return nil, scriptError(rule, k, err)
				}
				if n, err = parseCount(r); err != nil {
					return nil, scriptError(rule, k, err)
				}
			}
			for i := 1; i <= n; i++ {
				if err := delay(rt, st.DelayMs); err != nil {
					return nil, err
				}
				v.i = i
				var d pdk.Delta
				if st.Text != nil {
					t, err := expand(*st.Text, v)
					if err != nil {
						return nil, scriptError(rule, k, err)
					}
					content.WriteString(t)
					d.Content = t
				} else {
					t, err := expand(*st.Thought, v)
					if err != nil {
						return nil, scriptError(rule, k, err)
					}
					d.Thought = t
				}
				if produced += len(d.Content) + len(d.Thought); produced > maxAnswer {
					return nil, scriptError(rule, k, fmt.Errorf("the answer grows past %d bytes", maxAnswer))
				}
				outWords += words(d.Content) + words(d.Thought)
				if rt.Delta != nil && (d.Content != "" || d.Thought != "") {
					if err := rt.Delta(d); err != nil {
						return nil, err
					}
				}
			}
		case st.ToolCall != nil:
			if err := delay(rt, st.DelayMs); err != nil {
				return nil, err
			}
			args, err := expandArguments(st.ToolCall.Arguments, v)
			if err != nil {
				return nil, scriptError(rule, k, fmt.Errorf("toolCall %s: %w", st.ToolCall.Name, err))
			}
			calls = append(calls, pdk.ToolCall{
				ID:        fmt.Sprintf("call_%d_%d_%d", conv.users, conv.done, len(calls)),
				Name:      st.ToolCall.Name,
				Arguments: args,
			})
			outWords += words(string(args)) + 1
		case st.Error != nil:
			e := st.Error
			if e.Attempts > 0 && conv.attempt > e.Attempts {
				continue
			}
			if err := delay(rt, st.DelayMs); err != nil {
				return nil, err
			}
			msg, err := expand(e.Message, v)
			if err != nil {
				return nil, scriptError(rule, k, err)
			}
			code := e.Code
			if code == "" {
				code = "scripted_error"
			}
			return nil, &pdk.Error{Code: code, Message: msg, Transient: e.Transient}
		}
	}

	if counted != "" && rt.Forget != nil {
		rt.Forget(counted)
	}
	resp := &pdk.ModelResponse{
		Message:      pdk.Message{Role: pdk.RoleAssistant, Content: content.String(), ToolCalls: calls},
		FinishReason: pdk.FinishStop,
	}
	if len(calls) > 0 {
		resp.FinishReason = pdk.FinishToolCalls
	}
	resp.Usage = pdk.Usage{PromptTokens: max(conv.promptWords, 1), CompletionTokens: max(outWords, 1)}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	return resp, nil
}

func delay(rt Runtime, ms int) error {
	if ms <= 0 || rt.Sleep == nil {
		return nil
	}
	return rt.Sleep(time.Duration(ms) * time.Millisecond)
}

func scriptError(r *Rule, step int, err error) error {
	return &pdk.Error{Code: "script_error", Message: fmt.Sprintf("rule %s, step %d: %v", r.label(), step, err)}
}

// expandArguments fills the arguments template of a tool call.
func expandArguments(raw json.RawMessage, v *vars) (json.RawMessage, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage(`{}`), nil
	}
	if raw[0] == '"' {
		var t string
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, err
		}
		s, err := expand(t, v)
		if err != nil {
			return nil, err
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(s), &obj); err != nil {
			return nil, fmt.Errorf("arguments %s are not a JSON object: %w", s, err)
		}
		return json.RawMessage(s), nil
	}
	var obj any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	var firstErr error
	obj = walkStrings(obj, func(s string) string {
		out, err := expand(s, v)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return out
	})
	if firstErr != nil {
		return nil, firstErr
	}
	return json.Marshal(obj)
}

// dependsOnAttempt reports whether playing steps needs the attempt number.
func dependsOnAttempt(steps []Step) bool {
	for _, st := range steps {
		if st.Error != nil && st.Error.Attempts > 0 {
			return true
		}
	}
	return false
}

// requestKey identifies a request by its messages.
func requestKey(req *pdk.ModelRequest) string {
	b, _ := json.Marshal(req.Messages)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// asciiSpace are the ASCII bytes unicode.IsSpace reports.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// words is the token count the model reports: roughly one token per word.
// It counts as strings.Fields splits, without making the slice of words (a
// model call counts the whole history).
func words(s string) int {
	n, inWord := 0, false
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		i += size
		if r < utf8.RuneSelf && asciiSpace[r] || r >= utf8.RuneSelf && unicode.IsSpace(r) {
			inWord = false
		} else if !inWord {
			inWord = true
			n++
		}
	}
	return n
}
