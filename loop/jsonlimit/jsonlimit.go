// Package jsonlimit bounds how deeply JSON that enters the host from outside
// (a plugin's answer or event, a client's request, a remote agent's reply, an
// MCP server's answer, a tool's parameters schema) may nest.
//
// The host wraps what it accepts in records of its own (a task record holds
// the history, which holds the message, which holds the tool result), each
// wrapper a few levels deeper. encoding/json refuses to decode past 10,000
// levels, so a value accepted just under that limit would make its record
// undecodable. MaxDepth is far below any such limit: whatever the wrappers
// add, a stored record decodes again.
package jsonlimit

import "fmt"

// MaxDepth is the deepest nesting of objects and arrays accepted from
// outside. The example plugins and real tool schemas nest a few levels deep.
const MaxDepth = 512

// SchemaMaxDepth is the deepest nesting a JSON Schema (a tool's parameters,
// a client's input schema) may have before it is compiled: the schema
// compiler's cost grows faster than linearly with nesting, and at this depth
// the worst shape compiles in milliseconds.
const SchemaMaxDepth = 64

// SchemaMaxNodes is the most objects and arrays a JSON Schema may hold
// before it is compiled: compile time grows with them too (2,000 allOf
// entries of 4 objects each, 88 KB, compiled in 0.4 s); real tool schemas
// hold a few dozen.
const SchemaMaxNodes = 2000

// CheckSchema returns an error if a JSON Schema nests deeper than
// SchemaMaxDepth or holds more than SchemaMaxNodes objects and arrays.
func CheckSchema(b []byte) error {
	if err := Check(b, SchemaMaxDepth); err != nil {
		return err
	}
	if n := nodes(b); n > SchemaMaxNodes {
		return fmt.Errorf("JSON schema holds %d objects and arrays, more than %d", n, SchemaMaxNodes)
	}
	return nil
}

// nodes counts the objects and arrays of b.
func nodes(b []byte) int {
	n := 0
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			n++
		}
	}
	return n
}

// TooDeepError says a JSON text nests deeper than allowed.
type TooDeepError struct {
	Max int
}

func (e *TooDeepError) Error() string {
	return fmt.Sprintf("JSON nests deeper than %d levels", e.Max)
}

// Check returns a *TooDeepError if b nests objects and arrays deeper than max.
// It does not validate b otherwise; it reads each byte once.
func Check(b []byte, max int) error {
	if Depth(b, max) > max {
		return &TooDeepError{Max: max}
	}
	return nil
}

// Depth returns the deepest nesting of objects and arrays in b, counting
// only up to stop+1 (it returns as soon as it passes stop).
func Depth(b []byte, stop int) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > stop {
					return deepest
				}
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return deepest
}
