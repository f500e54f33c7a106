package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Limits on a script, so that a script cannot make the model run away.
const (
	maxRepeat = 10000
	// maxAnswer bounds the text (and thought) one play may produce: a
	// repeated step over a long input could otherwise build gigabytes.
	maxAnswer  = 1 << 20
	maxDelayMs = 10 * 60 * 1000
)

// Script is what the scripted model plays: rules tried in order against the
// latest user message (the first whose Match matches wins), and a default
// rule for a message no rule matches. Without a default the model echoes
// every user message of the conversation.
type Script struct {
	Rules   []Rule `json:"rules"`
	Default *Rule  `json:"default,omitempty"`
}

// Rule is a regular expression and the steps played when it matches.
type Rule struct {
	Name  string `json:"name,omitempty"`  // for error messages and logs
	Match string `json:"match,omitempty"` // RE2 syntax, matched against the latest user message (trimmed)
	Steps []Step `json:"steps"`

	re   *regexp.Regexp
	segs [][]Step // segments(Steps), made once by compile
}

// Step is one thing the model does. Exactly one of Text, Thought, ToolCall,
// Error is set. DelayMs waits before the step; Repeat plays a text or
// thought step that many times ({{i}} is the 1-based repetition).
type Step struct {
	Text     *string       `json:"text,omitempty"`
	Thought  *string       `json:"thought,omitempty"`
	ToolCall *ToolCallStep `json:"toolCall,omitempty"`
	Error    *ErrorStep    `json:"error,omitempty"`
	DelayMs  int           `json:"delayMs,omitempty"`
	Repeat   Count         `json:"repeat,omitempty"`
}

// ToolCallStep asks for a tool call. Arguments is a JSON object whose string
// values are templates, or a JSON string that is a template of the whole
// arguments object (use that to put a captured number where the schema wants
// a number: "{\"rows\": $1}").
type ToolCallStep struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// ErrorStep makes the model call fail. Attempts > 0 fails only the first
// Attempts attempts of the call (the host's retry counter, request metadata
// "attempt", 1-based); later attempts skip the step.
type ErrorStep struct {
	Code      string `json:"code,omitempty"`
	Message   string `json:"message"`
	Transient bool   `json:"transient,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
}

// Count is a repetition count: a JSON number, or a string template that
// becomes one ("$1").
type Count string

// UnmarshalJSON accepts a number or a string.
func (c *Count) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = Count(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("repeat must be a number or a string, not %s", b)
	}
	*c = Count(n.String())
	return nil
}

// ParseScript decodes and checks a script. Unknown fields are refused; every
// problem names the rule and step it is in.
func ParseScript(data []byte) (*Script, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Script
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("parse script: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse script: data after the script object")
	}
	for i := range s.Rules {
		r := &s.Rules[i]
		if err := r.compile(false); err != nil {
			return nil, fmt.Errorf("script rule %d (%s): %w", i, r.label(), err)
		}
	}
	if s.Default != nil {
		if err := s.Default.compile(true); err != nil {
			return nil, fmt.Errorf("script default rule: %w", err)
		}
	}
	return &s, nil
}

func (r *Rule) label() string {
	if r.Name != "" {
		return r.Name
	}
	return strconv.Quote(r.Match)
}

func (r *Rule) compile(isDefault bool) error {
	switch {
	case isDefault && r.Match != "":
		return errors.New("the default rule has no match")
	case !isDefault && r.Match == "":
		return errors.New("match is empty")
	case r.Match != "":
		re, err := regexp.Compile(r.Match)
		if err != nil {
			return fmt.Errorf("match: %w", err)
		}
		r.re = re
	}
	if len(r.Steps) == 0 {
		return errors.New("no steps")
	}
	for j := range r.Steps {
		if err := r.Steps[j].check(); err != nil {
			return fmt.Errorf("step %d: %w", j, err)
		}
	}
	r.segs = segments(r.Steps)
	return nil
}

func (s *Step) check() error {
	n := 0
	for _, set := range []bool{s.Text != nil, s.Thought != nil, s.ToolCall != nil, s.Error != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("a step has exactly one of text, thought, toolCall, error (this one has %d)", n)
	}
	if s.DelayMs < 0 || s.DelayMs > maxDelayMs {
		return fmt.Errorf("delayMs %d is outside 0..%d", s.DelayMs, maxDelayMs)
	}
	if s.Repeat != "" {
		if s.Text == nil && s.Thought == nil {
			return errors.New("repeat is for text and thought steps")
		}
		if !strings.ContainsAny(string(s.Repeat), "${") {
			if _, err := parseCount(string(s.Repeat)); err != nil {
				return err
			}
		}
	}
	for _, t := range []*string{s.Text, s.Thought} {
		if t != nil {
			if err := checkTemplate(*t); err != nil {
				return err
			}
		}
	}
	if tc := s.ToolCall; tc != nil {
		if tc.Name == "" {
			return errors.New("toolCall has no name")
		}
		if err := checkArguments(tc.Arguments); err != nil {
			return fmt.Errorf("toolCall %s: %w", tc.Name, err)
		}
	}
	if e := s.Error; e != nil {
		if e.Message == "" {
			return errors.New("error has no message")
		}
		if e.Attempts < 0 {
			return fmt.Errorf("error attempts %d is negative", e.Attempts)
		}
	}
	return nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("repeat %q is not a whole number", s)
	}
	if n < 0 || n > maxRepeat {
		return 0, fmt.Errorf("repeat %d is outside 0..%d", n, maxRepeat)
	}
	return n, nil
}

// checkArguments accepts a JSON object (templates in its string values) or a
// JSON string (a template of the whole object).
func checkArguments(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	switch raw[0] {
	case '{':
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("arguments: %w", err)
		}
		var err error
		walkStrings(v, func(s string) string {
			if err == nil {
				err = checkTemplate(s)
			}
			return s
		})
		return err
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("arguments: %w", err)
		}
		return checkTemplate(s)
	}
	return fmt.Errorf("arguments must be a JSON object or a string template, not %s", raw)
}

// walkStrings replaces every string value inside v (objects, arrays) with
// f of it, and returns the new value.
func walkStrings(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case map[string]any:
		for k, e := range x {
			x[k] = walkStrings(e, f)
		}
	case []any:
		for i, e := range x {
			x[i] = walkStrings(e, f)
		}
	}
	return v
}

// Over returns a script that tries the rules of s first, then those of
// base; s's default, when it has one, replaces base's. It is how a user's
// rules file adds rules on top of the demo (or of a configured script)
// without replacing it.
func (s *Script) Over(base *Script) *Script {
	if s == nil {
		return base
	}
	out := &Script{Rules: make([]Rule, 0, len(s.Rules)+len(base.Rules)), Default: base.Default}
	out.Rules = append(append(out.Rules, s.Rules...), base.Rules...)
	if s.Default != nil {
		out.Default = s.Default
	}
	return out
}
