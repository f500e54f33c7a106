package pdk

import (
	"encoding/json"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A model call carries the whole conversation and every tool definition:
// tens of kilobytes, decoded on every call. encoding/json does it by
// reflection, which a Go guest pays for dearly (every function call checks
// for termination). parseModelRequest reads the request the host writes
// with a scanner instead. It declines (ok false) anything it does not know
// for certain how encoding/json would read: an unknown key (encoding/json
// matches keys without regard to case), invalid UTF-8 or a lone surrogate
// in a string, a number where a string belongs, a repeated list; the caller
// then uses encoding/json. For every request encoding/json accepts, the
// result is the same (raw values, arguments and schemas, are checked for
// their brackets and strings only: the host wrote them with encoding/json,
// which checked them whole).

func parseModelRequest(b []byte) (req ModelRequest, ok bool) {
	p := scanner{b: b}
	var seen collections
	for more := p.open('{', '}'); more; more = p.more('}') {
		key, ok := p.knownKey(requestKeys)
		if !ok || !seen.first(key) {
			return ModelRequest{}, false
		}
		if p.null() {
			continue
		}
		switch string(key) {
		case "messages":
			// A request that continues a conversation the instance holds
			// often brings no message of its own: the list is made only
			// for messages.
			req.Messages = []Message{}
			for more := p.open('[', ']'); more; more = p.more(']') {
				if cap(req.Messages) == 0 {
					req.Messages = make([]Message, 0, 16)
				}
				var m Message
				if !p.null() && !p.message(&m) {
					return ModelRequest{}, false
				}
				req.Messages = append(req.Messages, m)
			}
		case "tools":
			req.Tools = make([]ToolDefinition, 0, 16)
			for more := p.open('[', ']'); more; more = p.more(']') {
				var t ToolDefinition
				if !p.null() && !p.toolDefinition(&t) {
					return ModelRequest{}, false
				}
				req.Tools = append(req.Tools, t)
			}
		case "temperature":
			raw, ok := p.value()
			if !ok || !jsonNumber(raw) {
				return ModelRequest{}, false
			}
			f, err := strconv.ParseFloat(string(raw), 64)
			if err != nil {
				return ModelRequest{}, false
			}
			req.Temperature = &f
		case "maxTokens":
			ok = p.integer(&req.MaxTokens)
		case "historySkip":
			ok = p.integer(&req.HistorySkip)
		case "historyKeep":
			ok = p.integer(&req.HistoryKeep)
		case "historyRef":
			req.HistoryRef, ok = p.text()
		case "historyFrom":
			req.HistoryFrom, ok = p.text()
		case "stream":
			ok = p.boolean(&req.Stream)
		case "metadata":
			ok = p.anyMap(&req.Metadata)
		case "toolsRef":
			req.ToolsRef, ok = p.text()
		default:
			ok = false
		}
		if !ok || p.bad {
			return ModelRequest{}, false
		}
	}
	p.space()
	if p.bad || p.i != len(p.b) {
		return ModelRequest{}, false
	}
	return req, true
}

// integer reads a JSON number into an int, declining any that is not a
// whole number in range (encoding/json refuses those).
func (p *scanner) integer(dst *int) bool {
	raw, ok := p.value()
	if !ok || !jsonNumber(raw) {
		return false
	}
	n, err := strconv.ParseInt(string(raw), 10, 0)
	if err != nil {
		return false
	}
	*dst = int(n)
	return true
}

func (p *scanner) message(m *Message) bool {
	var seen collections
	for more := p.open('{', '}'); more; more = p.more('}') {
		key, ok := p.knownKey(messageKeys)
		if !ok || !seen.first(key) {
			return false
		}
		if p.null() {
			continue
		}
		switch string(key) {
		case "role":
			var s string
			s, ok = p.text()
			m.Role = Role(s)
		case "content":
			m.Content, ok = p.text()
		case "name":
			m.Name, ok = p.text()
		case "toolCallId":
			m.ToolCallID, ok = p.text()
		case "toolCalls":
			m.ToolCalls = []ToolCall{}
			for more := p.open('[', ']'); more; more = p.more(']') {
				var c ToolCall
				if !p.null() && !p.toolCall(&c) {
					return false
				}
				m.ToolCalls = append(m.ToolCalls, c)
			}
		case "pinned":
			ok = p.boolean(&m.Pinned)
		case "metadata":
			ok = p.anyMap(&m.Metadata)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	return !p.bad
}

func (p *scanner) toolCall(c *ToolCall) bool {
	for more := p.open('{', '}'); more; more = p.more('}') {
		key, ok := p.knownKey(toolCallKeys)
		if !ok {
			return false
		}
		if string(key) == "arguments" {
			raw, ok := p.value()
			if !ok || !p.validRaw(raw) {
				return false
			}
			c.Arguments = ownRaw(raw)
			continue
		}
		if p.null() {
			continue
		}
		switch string(key) {
		case "id":
			c.ID, ok = p.text()
		case "name":
			c.Name, ok = p.text()
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	return !p.bad
}

func (p *scanner) toolDefinition(t *ToolDefinition) bool {
	for more := p.open('{', '}'); more; more = p.more('}') {
		key, ok := p.knownKey(toolDefinitionKeys)
		if !ok {
			return false
		}
		if string(key) == "parameters" {
			raw, ok := p.value()
			if !ok {
				return false
			}
			t.Parameters = ownRaw(raw)
			continue
		}
		if p.null() {
			continue
		}
		switch string(key) {
		case "name":
			t.Name, ok = p.text()
		case "description":
			t.Description, ok = p.text()
		case "client":
			ok = p.boolean(&t.Client)
		case "idempotent":
			ok = p.boolean(&t.Idempotent)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	return !p.bad
}

// open starts an object or an array: more says whether a member follows.
// A malformed start marks the scanner bad and ends the loop.
func (p *scanner) open(start, end byte) bool {
	if !p.eat(start) {
		p.bad = true
		return false
	}
	return !p.eat(end)
}

// more reads what follows a member: a comma (another member follows) or the
// end of the object or array; anything else marks the scanner bad.
func (p *scanner) more(end byte) bool {
	if p.eat(',') {
		return true
	}
	if !p.eat(end) {
		p.bad = true
	}
	return false
}

// The keys of the objects the scanner reads. A key is checked before its
// value: encoding/json matches keys without regard to case, so an unknown
// key may still set a field (a null sets a list, a map or a raw value), and
// the scanner declines it whatever its value.
var (
	requestKeys        = []string{"messages", "tools", "temperature", "maxTokens", "historySkip", "historyKeep", "historyRef", "historyFrom", "stream", "metadata", "toolsRef"}
	messageKeys        = []string{"role", "content", "name", "toolCallId", "toolCalls", "pinned", "metadata"}
	toolCallKeys       = []string{"id", "name", "arguments"}
	toolDefinitionKeys = []string{"name", "description", "parameters", "client", "idempotent"}
	responseKeys       = []string{"message", "finishReason", "usage"}
	usageKeys          = []string{"promptTokens", "completionTokens", "totalTokens"}
	deltaKeys          = []string{"content", "thought"}
	toolResultKeys     = []string{"toolCallId", "content", "isError", "data"}
)

// knownKey reads a key (key) that must be one of keys.
func (p *scanner) knownKey(keys []string) ([]byte, bool) {
	key, ok := p.key()
	if !ok {
		return nil, false
	}
	for _, k := range keys {
		if string(key) == k {
			return key, true
		}
	}
	return nil, false
}

// key reads an object key without escapes and its colon; the key is a
// slice of the input.
func (p *scanner) key() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			k := p.b[start:p.i]
			p.i++
			return k, p.eat(':')
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// collections remembers which of an object's slice and map members were
// read: encoding/json merges a repeated one into the first, so a repeat
// (which the host never writes) is left to encoding/json.
type collections struct{ messages, tools, metadata, toolCalls bool }

func (c *collections) first(key []byte) bool {
	var f *bool
	switch string(key) {
	case "messages":
		f = &c.messages
	case "tools":
		f = &c.tools
	case "metadata":
		f = &c.metadata
	case "toolCalls":
		f = &c.toolCalls
	default:
		return true
	}
	if *f {
		return false
	}
	*f = true
	return true
}

// ownRaw copies a raw value out of the input (encoding/json does too: the
// input's buffer belongs to the caller). A JSON null stays as it is, as
// encoding/json keeps it in a RawMessage.
func ownRaw(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return nil
	}
	return append(json.RawMessage(nil), raw...)
}

// null consumes a JSON null (which leaves a field as it was).
func (p *scanner) null() bool {
	p.space()
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

func (p *scanner) boolean(dst *bool) bool {
	p.space()
	switch {
	case len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "true":
		p.i += 4
		*dst = true
		return true
	case len(p.b)-p.i >= 5 && string(p.b[p.i:p.i+5]) == "false":
		p.i += 5
		*dst = false
		return true
	}
	return false
}

// anyMap decodes an object of any values with encoding/json (metadata is
// small and rare; what matters is that the conversation around it is not).
func (p *scanner) anyMap(dst *map[string]any) bool {
	raw, ok := p.value()
	if !ok || len(raw) == 0 || raw[0] != '{' {
		return false
	}
	return json.Unmarshal(raw, dst) == nil
}

// text reads a JSON string with its escapes. It declines invalid UTF-8 and
// lone surrogates, which encoding/json replaces rather than keeps.
func (p *scanner) text() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	ascii := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\':
			return p.escaped(start)
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		p.i++
	}
	return "", false
}

// escaped finishes reading a string from start (just after its opening
// quote) once an escape was seen at p.i.
func (p *scanner) escaped(start int) (string, bool) {
	out := make([]byte, 0, p.i-start+16)
	out = append(out, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", false
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case 'r':
			out = append(out, '\r')
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				if p.i+1 >= len(p.b) || p.b[p.i] != '\\' || p.b[p.i+1] != 'u' {
					return "", false
				}
				p.i += 2
				r2, ok := p.hex4()
				if !ok {
					return "", false
				}
				r = utf16.DecodeRune(r, r2)
				if r == utf8.RuneError {
					return "", false
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	return "", false
}

func (p *scanner) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}
