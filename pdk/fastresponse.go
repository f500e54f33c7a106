package pdk

import "encoding/json"

// The host reads a model plugin's answer on every model call, and every
// piece of a streamed one, and a tool's answer on every tool call.
// ParseModelResponse, ParseDelta and ParseToolResult read them with
// the scanner of parseModelRequest instead of encoding/json's reflection.
// What a guest writes is not trusted: they decline (ok false) whatever they
// are not sure encoding/json reads the same way (an unknown or repeated
// object key, a key or string they do not read as encoding/json does, a
// number that is not a whole int), and a tool call's arguments are checked
// whole (json.Valid); the caller then decodes with encoding/json, which
// gives the same result or the error. For every input they accept,
// encoding/json accepts it too and reads the same (FuzzParseModelResponse,
// FuzzParseDelta, FuzzParseToolResult).

// ParseModelResponse reads a model's answer as json.Unmarshal would into a
// ModelResponse; ok false: use json.Unmarshal.
func ParseModelResponse(b []byte) (resp ModelResponse, ok bool) {
	p := scanner{b: b, strict: true}
	var message, usage bool
	for more := p.open('{', '}'); more; more = p.more('}') {
		key, ok := p.knownKey(responseKeys)
		if !ok {
			return ModelResponse{}, false
		}
		switch string(key) {
		case "message":
			// encoding/json merges a repeated object into the first.
			if message {
				return ModelResponse{}, false
			}
			message = true
		case "usage":
			if usage {
				return ModelResponse{}, false
			}
			usage = true
		}
		if p.null() {
			continue
		}
		switch string(key) {
		case "message":
			ok = p.message(&resp.Message)
		case "finishReason":
			var s string
			s, ok = p.text()
			resp.FinishReason = FinishReason(s)
		case "usage":
			ok = p.usage(&resp.Usage)
		default:
			ok = false
		}
		if !ok || p.bad {
			return ModelResponse{}, false
		}
	}
	p.space()
	if p.bad || p.i != len(p.b) {
		return ModelResponse{}, false
	}
	return resp, true
}

func (p *scanner) usage(u *Usage) bool {
	for more := p.open('{', '}'); more; more = p.more('}') {
		key, ok := p.knownKey(usageKeys)
		if !ok {
			return false
		}
		if p.null() {
			continue
		}
		switch string(key) {
		case "promptTokens":
			ok = p.integer(&u.PromptTokens)
		case "completionTokens":
			ok = p.integer(&u.CompletionTokens)
		case "totalTokens":
			ok = p.integer(&u.TotalTokens)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
	return !p.bad
}

// ParseDelta reads a piece of a streamed answer as json.Unmarshal would
// into a Delta; ok false: use json.Unmarshal.
func ParseDelta(b []byte) (d Delta, ok bool) {
	p := scanner{b: b, strict: true}
	for more := p.open('{', '}'); more; more = p.more('}') {
		key, ok := p.knownKey(deltaKeys)
		if !ok {
			return Delta{}, false
		}
		if p.null() {
			continue
		}
		switch string(key) {
		case "content":
			d.Content, ok = p.text()
		case "thought":
			d.Thought, ok = p.text()
		default:
			ok = false
		}
		if !ok || p.bad {
			return Delta{}, false
		}
	}
	p.space()
	if p.bad || p.i != len(p.b) {
		return Delta{}, false
	}
	return d, true
}

// ParseToolResult reads a tool's answer as json.Unmarshal would into a
// ToolResult; ok false: use json.Unmarshal. Structured data is checked
// whole and kept as it is written (null included, as encoding/json keeps it
// in a json.RawMessage).
func ParseToolResult(b []byte) (r ToolResult, ok bool) {
	p := scanner{b: b, strict: true}
	for more := p.open('{', '}'); more; more = p.more('}') {
		key, ok := p.knownKey(toolResultKeys)
		if !ok {
			return ToolResult{}, false
		}
		if string(key) == "data" {
			raw, ok := p.value()
			if !ok || !p.validRaw(raw) {
				return ToolResult{}, false
			}
			r.Data = ownRaw(raw)
			continue
		}
		if p.null() {
			continue
		}
		switch string(key) {
		case "toolCallId":
			r.ToolCallID, ok = p.text()
		case "content":
			r.Content, ok = p.text()
		case "isError":
			ok = p.boolean(&r.IsError)
		default:
			ok = false
		}
		if !ok || p.bad {
			return ToolResult{}, false
		}
	}
	p.space()
	if p.bad || p.i != len(p.b) {
		return ToolResult{}, false
	}
	return r, true
}

// validRaw reports whether a raw value the scanner took may be kept as it
// is: always for what the host wrote, checked whole for what a guest wrote.
func (p *scanner) validRaw(raw json.RawMessage) bool {
	return !p.strict || json.Valid(raw)
}
