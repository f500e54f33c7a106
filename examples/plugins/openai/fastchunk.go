package main

import (
	"bytes"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A streamed answer is one JSON chunk per piece of text, so the chunk's
// decoding is paid per piece. In a Go guest encoding/json is costly (every
// function call of its reflection costs a termination check of the host's
// runtime), so parseChunk reads the usual shape of a chunk by hand. It
// declines (ok false) anything it is not sure to read as encoding/json
// would: tool calls, an error object, keys that differ from a known one
// only by case, numbers that are not plain integers, malformed JSON. The
// caller then uses encoding/json, so the fast path changes speed, never
// meaning.

// parseChunk decodes b into c (which must be zero).
func parseChunk(b []byte, c *chunk) bool {
	p := chunkScanner{b: b}
	seenChoices := false
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "choices":
			if seenChoices {
				return false // encoding/json would reuse the first array's elements
			}
			seenChoices = true
			if p.null() {
				c.Choices = nil
				return true
			}
			c.Choices = make([]choice, 0, 1)
			return p.array(func() bool {
				var ch choice
				if !p.choice(&ch) {
					return false
				}
				c.Choices = append(c.Choices, ch)
				return true
			})
		case "usage":
			if p.null() {
				c.Usage = nil
				return true
			}
			if c.Usage == nil {
				c.Usage = &apiUsage{}
			}
			u := c.Usage
			return p.object(func(key []byte) bool {
				switch string(key) {
				case "prompt_tokens":
					return p.integer(&u.PromptTokens)
				case "completion_tokens":
					return p.integer(&u.CompletionTokens)
				case "total_tokens":
					return p.integer(&u.TotalTokens)
				}
				return p.other(key, "prompt_tokens", "completion_tokens", "total_tokens")
			})
		case "error":
			return false
		}
		return p.other(key, "choices", "usage", "error")
	})
	if !ok {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

func (p *chunkScanner) choice(ch *choice) bool {
	if p.null() {
		return true
	}
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			return p.integer(&ch.Index)
		case "delta", "message":
			if p.null() {
				if string(key) == "delta" {
					ch.Delta = nil
				} else {
					ch.Message = nil
				}
				return true
			}
			at := &ch.Delta
			if string(key) == "message" {
				at = &ch.Message
			}
			if *at == nil {
				*at = &chatDelta{}
			}
			return p.delta(*at)
		case "finish_reason":
			if p.null() {
				ch.FinishReason = nil
				return true
			}
			s, ok := p.str()
			ch.FinishReason = &s
			return ok
		}
		return p.other(key, "index", "delta", "message", "finish_reason")
	})
}

func (p *chunkScanner) delta(d *chatDelta) bool {
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "content":
			if p.null() {
				d.Content = nil
				return true
			}
			s, ok := p.str()
			d.Content = &s
			return ok
		case "reasoning_content", "reasoning":
			if p.null() {
				return true // a null leaves the field as it was
			}
			s, ok := p.str()
			if string(key) == "reasoning" {
				d.Reasoning = s
			} else {
				d.ReasoningContent = s
			}
			return ok
		case "tool_calls":
			return false
		}
		return p.other(key, "content", "reasoning_content", "reasoning", "tool_calls")
	})
}

// chunkScanner reads JSON from b at i.
type chunkScanner struct {
	b []byte
	i int
}

func (p *chunkScanner) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// eat skips space and c, reporting whether c was there.
func (p *chunkScanner) eat(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// null reads a null, or leaves p where it was.
func (p *chunkScanner) null() bool {
	p.space()
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// other skips the value of a key the caller does not read, declining when
// the key would match one of known in encoding/json (which ignores case).
func (p *chunkScanner) other(key []byte, known ...string) bool {
	for _, k := range known {
		if bytes.EqualFold(key, []byte(k)) {
			return false
		}
	}
	return p.skip(0)
}

// object reads an object, calling member with each key with p at its value.
func (p *chunkScanner) object(member func(key []byte) bool) bool {
	if !p.eat('{') {
		return false
	}
	if p.eat('}') {
		return true
	}
	for {
		p.space()
		key, ok := p.rawKey()
		if !ok || !p.eat(':') || !member(key) {
			return false
		}
		if p.eat(',') {
			continue
		}
		return p.eat('}')
	}
}

// array reads an array, calling elem with p at each element.
func (p *chunkScanner) array(elem func() bool) bool {
	if !p.eat('[') {
		return false
	}
	if p.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.eat(',') {
			continue
		}
		return p.eat(']')
	}
}

// rawKey reads a key without escapes (declining one with escapes).
func (p *chunkScanner) rawKey() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return p.b[start:j], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// integer reads a plain integer (no fraction, no exponent) that fits an int.
func (p *chunkScanner) integer(dst *int) bool {
	p.space()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || (p.b[digits] == '0' && p.i > digits+1) {
		return false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return false
	}
	n, err := strconv.Atoi(string(p.b[start:p.i]))
	*dst = n
	return err == nil
}

// str reads a string, decoding its escapes; invalid UTF-8 becomes U+FFFD,
// as encoding/json does.
func (p *chunkScanner) str() (string, bool) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return string(p.b[start:j]), true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return p.slowStr(start)
		}
	}
	return "", false
}

// slowStr decodes a string with escapes or non-ASCII bytes from start.
func (p *chunkScanner) slowStr(start int) (string, bool) {
	out := make([]byte, 0, len(p.b)-start)
	for j := start; j < len(p.b); {
		c := p.b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return string(out), true
		case c < 0x20:
			return "", false
		case c == '\\':
			if j+1 >= len(p.b) {
				return "", false
			}
			j++
			switch e := p.b[j]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(p.b[j+1:])
				if !ok {
					return "", false
				}
				j += 4
				if utf16.IsSurrogate(r) {
					r2, ok := rune(-1), false
					if j+2 < len(p.b) && p.b[j+1] == '\\' && p.b[j+2] == 'u' {
						r2, ok = hex4(p.b[j+3:])
					}
					if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
						r = d
						j += 6
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", false
			}
			j++
		case c < utf8.RuneSelf:
			out = append(out, c)
			j++
		default:
			r, size := utf8.DecodeRune(p.b[j:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, p.b[j:j+size]...)
			}
			j += size
		}
	}
	return "", false
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skip passes over one value of any kind, checking its syntax.
func (p *chunkScanner) skip(depth int) bool {
	if depth > 64 {
		return false
	}
	p.space()
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(func([]byte) bool { return p.skip(depth + 1) })
	case c == '[':
		return p.array(func() bool { return p.skip(depth + 1) })
	case c == '"':
		_, ok := p.str()
		return ok
	case c == 't':
		return p.word("true")
	case c == 'f':
		return p.word("false")
	case c == 'n':
		return p.word("null")
	default:
		return p.number()
	}
}

func (p *chunkScanner) word(w string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(w)) {
		p.i += len(w)
		return true
	}
	return false
}

// number passes over a JSON number.
func (p *chunkScanner) number() bool {
	b, i := p.b, p.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	p.i = i
	return true
}
