package pdk

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The guest SDK's hot path avoids encoding/json for the envelope of a tool
// call: in a Go guest every function call costs a termination check of the
// host's runtime, and reflection-driven JSON makes many. These helpers read
// the request the host sends and write the result it expects; anything they
// do not recognize falls back to encoding/json, so they change speed, never
// meaning.

// parseToolCallRequest reads a ToolCallRequest. ok is false when the input
// is anything but a plain object of the expected shape (escaped strings
// included); the caller then uses encoding/json.
func parseToolCallRequest(b []byte) (req ToolCallRequest, ok bool) {
	p := scanner{b: b}
	if !p.object(func(key string) bool {
		switch key {
		case "call":
			return p.object(func(key string) bool {
				switch key {
				case "id":
					req.Call.ID, ok = p.str()
					return ok
				case "name":
					req.Call.Name, ok = p.str()
					return ok
				case "arguments":
					raw, ok := p.value()
					req.Call.Arguments = raw
					return ok
				}
				_, ok := p.value()
				return ok
			})
		case "contextId":
			req.ContextID, ok = p.str()
			return ok
		case "taskId":
			req.TaskID, ok = p.str()
			return ok
		}
		_, ok := p.value()
		return ok
	}) {
		return ToolCallRequest{}, false
	}
	p.space()
	return req, p.i == len(p.b)
}

type scanner struct {
	b   []byte
	i   int
	bad bool // a malformed object or array was met (open, more)
	// strict: the input comes from a guest, not from the host, so raw
	// values are checked whole (validRaw).
	strict bool
}

func (p *scanner) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\n' || p.b[p.i] == '\t' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *scanner) eat(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling member with the scanner at each
// value.
func (p *scanner) object(member func(key string) bool) bool {
	if !p.eat('{') {
		return false
	}
	if p.eat('}') {
		return true
	}
	for {
		key, ok := p.str()
		if !ok || !p.eat(':') || !member(key) {
			return false
		}
		if p.eat(',') {
			continue
		}
		return p.eat('}')
	}
}

// str reads a string without escapes (escaped ones fall back).
func (p *scanner) str() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, utf8.ValidString(s)
		case c == '\\' || c < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

// value skips one JSON value and returns its bytes; it checks the structure
// (brackets, strings) and leaves the details to the decoder of the value.
func (p *scanner) value() (json.RawMessage, bool) {
	p.space()
	start := p.i
	depth := 0
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case '"':
			p.i++
			for p.i < len(p.b) && p.b[p.i] != '"' {
				if p.b[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
			if p.i >= len(p.b) {
				return nil, false
			}
			p.i++
			if depth == 0 {
				return p.b[start:p.i], true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return p.end(start) // a scalar ended with its container
			}
			depth--
			if depth == 0 {
				p.i++
				return p.b[start:p.i], true
			}
		case ',':
			if depth == 0 {
				return p.end(start)
			}
		}
		p.i++
	}
	if depth != 0 {
		return nil, false
	}
	return p.end(start)
}

func (p *scanner) end(start int) (json.RawMessage, bool) {
	raw := p.b[start:p.i]
	for len(raw) > 0 && (raw[len(raw)-1] == ' ' || raw[len(raw)-1] == '\n' || raw[len(raw)-1] == '\t' || raw[len(raw)-1] == '\r') {
		raw = raw[:len(raw)-1]
	}
	return raw, len(raw) > 0
}

// appendToolResult writes r as encoding/json would (field order and
// omitempty as the struct tags say).
func appendToolResult(dst []byte, r *ToolResult) []byte {
	dst = append(dst, '{')
	if r.ToolCallID != "" {
		dst = append(dst, `"toolCallId":`...)
		dst = appendString(dst, r.ToolCallID)
		dst = append(dst, ',')
	}
	dst = append(dst, `"content":`...)
	dst = appendString(dst, r.Content)
	if r.IsError {
		dst = append(dst, `,"isError":true`...)
	}
	if len(r.Data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = append(dst, r.Data...)
	}
	return append(dst, '}')
}

// appendError writes e as encoding/json would.
func appendError(dst []byte, e *Error) []byte {
	dst = append(dst, '{')
	if e.Code != "" {
		dst = append(dst, `"code":`...)
		dst = appendString(dst, e.Code)
		dst = append(dst, ',')
	}
	dst = append(dst, `"message":`...)
	dst = appendString(dst, e.Message)
	if e.Transient {
		dst = append(dst, `,"transient":true`...)
	}
	if e.RetryAfter > 0 {
		dst = append(dst, `,"retryAfter":`...)
		dst = appendString(dst, e.RetryAfter.String())
	}
	return append(dst, '}')
}

// appendDelta writes d as encoding/json would (empty fields left out).
func appendDelta(dst []byte, d *Delta) []byte {
	dst = append(dst, '{')
	if d.Content != "" {
		dst = append(dst, `"content":`...)
		dst = appendString(dst, d.Content)
	}
	if d.Thought != "" {
		if d.Content != "" {
			dst = append(dst, ',')
		}
		dst = append(dst, `"thought":`...)
		dst = appendString(dst, d.Thought)
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD, and <, >, & and the
// line separators escaped as encoding/json does.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\u202`...)
			dst = strconv.AppendInt(dst, int64(r&0xf), 16)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// flatDecoder decodes a JSON object into a struct whose fields are all
// strings, booleans or numbers, without encoding/json. It declines (ok
// false) anything else: escaped strings, nested values, unknown keys, keys
// that differ from a field's name only by case; the caller then uses
// encoding/json.
type flatDecoder struct {
	fields map[string]flatField
}

type flatField struct {
	index int
	kind  reflect.Kind
}

// newFlatDecoder returns a decoder for t, or nil when t is not a flat struct.
func newFlatDecoder(t reflect.Type) *flatDecoder {
	if t.Kind() != reflect.Struct {
		return nil
	}
	d := &flatDecoder{fields: map[string]flatField{}}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Anonymous {
			return nil
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.Contains(opts, "string") {
			return nil
		}
		switch k := f.Type.Kind(); k {
		case reflect.String, reflect.Bool,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.Float32, reflect.Float64:
			if f.Type.PkgPath() != "" && f.Type.Name() != k.String() {
				return nil // a named type may have its own UnmarshalJSON
			}
			d.fields[name] = flatField{index: i, kind: k}
		default:
			return nil
		}
	}
	return d
}

// decode fills v (a pointer to the struct) from b.
func (d *flatDecoder) decode(b []byte, v reflect.Value) bool {
	v = v.Elem()
	p := scanner{b: b}
	ok := p.object(func(key string) bool {
		f, known := d.fields[key]
		if !known {
			return false
		}
		fv := v.Field(f.index)
		p.space()
		if strings.HasPrefix(string(p.b[p.i:min(p.i+4, len(p.b))]), "null") {
			p.i += 4
			return true
		}
		switch f.kind {
		case reflect.String:
			s, ok := p.str()
			if ok {
				fv.SetString(s)
			}
			return ok
		case reflect.Bool:
			raw, ok := p.value()
			switch {
			case !ok:
				return false
			case string(raw) == "true":
				fv.SetBool(true)
			case string(raw) == "false":
				fv.SetBool(false)
			default:
				return false
			}
			return true
		}
		raw, ok := p.value()
		if !ok || !jsonNumber(raw) {
			return false
		}
		switch f.kind {
		case reflect.Float32, reflect.Float64:
			n, err := strconv.ParseFloat(string(raw), fv.Type().Bits())
			if err != nil {
				return false
			}
			fv.SetFloat(n)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n, err := strconv.ParseUint(string(raw), 10, fv.Type().Bits())
			if err != nil {
				return false
			}
			fv.SetUint(n)
		default:
			n, err := strconv.ParseInt(string(raw), 10, fv.Type().Bits())
			if err != nil {
				return false
			}
			fv.SetInt(n)
		}
		return true
	})
	if !ok {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

// jsonNumber reports whether b is a number as JSON writes them:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumber(b []byte) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

// appendScalar writes a boolean or a number as encoding/json would; ok is
// false for any other value (and for NaN and infinities, which JSON cannot
// hold), and the caller uses encoding/json.
func appendScalar(dst []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case bool:
		return strconv.AppendBool(dst, x), true
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int8:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), true
	case uint64:
		return strconv.AppendUint(dst, x, 10), true
	case float64:
		return appendFloat(dst, x, 64)
	case float32:
		return appendFloat(dst, float64(x), 32)
	}
	return dst, false
}

// appendFloat formats like encoding/json: the shortest form, in exponent
// notation only for very large or very small magnitudes, with a two-digit
// negative exponent trimmed (1e-7, not 1e-07).
func appendFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// appendModelResponse writes r as encoding/json would, byte for byte. It
// declines (ok false) what it does not write itself: metadata, and tool
// call arguments with bytes encoding/json would escape or that do not
// compact; the caller then uses encoding/json. A Go guest's encoding/json
// costs tens of microseconds per response in reflection.
func appendModelResponse(dst []byte, r *ModelResponse) ([]byte, bool) {
	m := &r.Message
	if len(m.Metadata) > 0 {
		return dst, false
	}
	dst = append(dst, `{"message":{"role":`...)
	dst = appendString(dst, string(m.Role))
	if m.Content != "" {
		dst = append(dst, `,"content":`...)
		dst = appendString(dst, m.Content)
	}
	if m.Name != "" {
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, m.Name)
	}
	if m.ToolCallID != "" {
		dst = append(dst, `,"toolCallId":`...)
		dst = appendString(dst, m.ToolCallID)
	}
	if len(m.ToolCalls) > 0 {
		dst = append(dst, `,"toolCalls":[`...)
		for i := range m.ToolCalls {
			c := &m.ToolCalls[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = appendString(dst, c.ID)
			dst = append(dst, `,"name":`...)
			dst = appendString(dst, c.Name)
			if len(c.Arguments) > 0 {
				for _, b := range c.Arguments {
					if b == '<' || b == '>' || b == '&' || b >= utf8.RuneSelf {
						return dst, false
					}
				}
				dst = append(dst, `,"arguments":`...)
				var err error
				if dst, err = appendCompact(dst, c.Arguments); err != nil {
					return dst, false
				}
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if m.Pinned {
		dst = append(dst, `,"pinned":true`...)
	}
	dst = append(dst, '}')
	if r.FinishReason != "" {
		dst = append(dst, `,"finishReason":`...)
		dst = appendString(dst, string(r.FinishReason))
	}
	dst = append(dst, `,"usage":{`...)
	first := true
	for _, f := range [...]struct {
		key string
		n   int
	}{{"promptTokens", r.Usage.PromptTokens}, {"completionTokens", r.Usage.CompletionTokens}, {"totalTokens", r.Usage.TotalTokens}} {
		if f.n == 0 {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, f.key...)
		dst = append(dst, `":`...)
		dst = strconv.AppendInt(dst, int64(f.n), 10)
	}
	return append(dst, "}}"...), true
}

// appendCompact appends raw JSON without its insignificant spaces, as
// encoding/json writes a RawMessage (whose bytes need no escaping: the
// caller checked).
func appendCompact(dst []byte, raw []byte) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, raw); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}
