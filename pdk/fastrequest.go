package pdk

import "unicode/utf8"

// AppendToolCallRequest appends r as encoding/json writes it, byte for
// byte, without its reflection: the host writes one on every tool call.
// The arguments are written as encoding/json writes a json.RawMessage
// (without insignificant spaces, with <, >, & and the line separators
// escaped inside strings); they must be valid JSON, which the host checks
// before (they are decoded for the schema check). ok is false when the
// arguments are seen not to be (an unclosed string or bracket, a control
// character in a string, nothing but spaces): the caller then uses
// encoding/json, which refuses them.
func AppendToolCallRequest(dst []byte, r *ToolCallRequest) (_ []byte, ok bool) {
	dst = append(dst, `{"call":{"id":`...)
	dst = appendString(dst, r.Call.ID)
	dst = append(dst, `,"name":`...)
	dst = appendString(dst, r.Call.Name)
	if len(r.Call.Arguments) > 0 {
		dst = append(dst, `,"arguments":`...)
		if dst, ok = appendRawValue(dst, r.Call.Arguments); !ok {
			return dst, false
		}
	}
	dst = append(dst, '}')
	if r.ContextID != "" {
		dst = append(dst, `,"contextId":`...)
		dst = appendString(dst, r.ContextID)
	}
	if r.TaskID != "" {
		dst = append(dst, `,"taskId":`...)
		dst = appendString(dst, r.TaskID)
	}
	return append(dst, '}'), true
}

// appendRawValue appends a valid JSON value as encoding/json writes a
// json.RawMessage. It follows strings and brackets only; see
// AppendToolCallRequest for what it declines.
func appendRawValue(dst, raw []byte) ([]byte, bool) {
	depth, inString, wrote := 0, false, false
	start := 0 // raw[start:i] is still to be copied
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if inString {
			switch {
			case c == '\\':
				i++ // the escaped byte is copied as it is
			case c == '"':
				inString = false
			case c < 0x20:
				return dst, false
			case c == '<' || c == '>' || c == '&':
				dst = append(dst, raw[start:i]...)
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
				start = i + 1
			case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
				dst = append(dst, raw[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[raw[i+2]&0xf])
				i += 2
				start = i + 1
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			dst = append(dst, raw[start:i]...)
			start = i + 1
			continue
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return dst, false
			}
		default:
			if c < 0x20 || c >= utf8.RuneSelf {
				return dst, false
			}
		}
		wrote = true
	}
	if inString || depth != 0 || !wrote {
		return dst, false
	}
	return append(dst, raw[start:]...), true
}
