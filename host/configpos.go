package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// ConfigError is a config file's decoding error with where it is: the
// field's path (limits.turnTimeout) and its line and column (1-based; 0
// when unknown).
type ConfigError struct {
	File         string // empty for ParseConfig
	Path         string
	Line, Column int
	Err          error
}

func (e *ConfigError) Error() string {
	var sb strings.Builder
	if e.File != "" {
		sb.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&sb, ":%d:%d", e.Line, e.Column)
		}
		sb.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&sb, "config line %d, column %d: ", e.Line, e.Column)
	}
	if e.Path != "" {
		sb.WriteString(e.Path)
		sb.WriteString(": ")
	}
	sb.WriteString(e.Err.Error())
	return sb.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// jsonSpot is one key or value of a JSON document: its path and where it
// starts.
type jsonSpot struct {
	path  string
	key   bool // an object key (path ends with it)
	start int64
	end   int64
}

// jsonSpots lists the keys and values of b in order, as far as b is valid.
func jsonSpots(b []byte) []jsonSpot {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type frame struct {
		obj     bool
		index   int
		key     string
		wantKey bool
	}
	var stack []*frame
	var out []jsonSpot
	pathOf := func() string {
		var sb strings.Builder
		for _, f := range stack {
			if f.obj {
				if sb.Len() > 0 {
					sb.WriteByte('.')
				}
				sb.WriteString(f.key)
			} else {
				fmt.Fprintf(&sb, "[%d]", f.index)
			}
		}
		return sb.String()
	}
	for {
		start := skipSpace(b, dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		end := dec.InputOffset()
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		d, isDelim := tok.(json.Delim)
		switch {
		case top != nil && top.obj && top.wantKey && !(isDelim && d == '}'):
			key, ok := tok.(string)
			if !ok {
				return out // the decoder allows only a string here
			}
			top.key, top.wantKey = key, false
			out = append(out, jsonSpot{path: pathOf(), key: true, start: start, end: end})
			continue
		case isDelim && (d == '}' || d == ']'):
			// A container ended, a value of the one around it.
			if len(stack) == 0 {
				return out
			}
			stack = stack[:len(stack)-1]
		default:
			out = append(out, jsonSpot{path: pathOf(), start: start, end: end})
			if isDelim {
				stack = append(stack, &frame{obj: d == '{', wantKey: d == '{'})
				continue
			}
		}
		// a value ended: the enclosing container moves on
		if len(stack) > 0 {
			if t := stack[len(stack)-1]; t.obj {
				t.wantKey = true
			} else {
				t.index++
			}
		}
	}
}

// skipSpace skips blanks, commas and colons from off.
func skipSpace(b []byte, off int64) int64 {
	for off < int64(len(b)) && strings.IndexByte(" \t\r\n,:", b[off]) >= 0 {
		off++
	}
	return off
}

// lineCol turns a byte offset of b into a 1-based line and column.
func lineCol(b []byte, off int64) (int, int) {
	if off > int64(len(b)) {
		off = int64(len(b))
	}
	line := 1 + bytes.Count(b[:off], []byte("\n"))
	col := int(off) - (bytes.LastIndexByte(b[:off], '\n') + 1) + 1
	return line, col
}

// locateConfigError says where in b the decoding error err is.
func locateConfigError(b []byte, err error) *ConfigError {
	ce := &ConfigError{Err: err}
	at := func(off int64) { ce.Line, ce.Column = lineCol(b, off) }
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		at(max(syn.Offset-1, 0)) // the offset is just past the offending byte
		return ce
	case errors.Is(err, io.ErrUnexpectedEOF):
		at(int64(len(b)))
		return ce
	case errors.As(err, &typ):
		ce.Path = strings.TrimPrefix(typ.Field, ".")
		for _, s := range jsonSpots(b) {
			if !s.key && s.path == ce.Path {
				at(s.start)
				return ce
			}
		}
		at(typ.Offset)
		return ce
	}
	spots := jsonSpots(b)
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		for _, s := range spots {
			if s.key && (s.path == name || strings.HasSuffix(s.path, "."+name)) && configType(s.path) == nil {
				ce.Path = s.path
				at(s.start)
				ce.Err = fmt.Errorf("unknown field %q", name)
				return ce
			}
		}
		return ce
	}
	// An error of a type's own decoder (a duration, say) names no field:
	// find the first value its type refuses.
	for _, s := range spots {
		if s.key {
			continue
		}
		t := configType(s.path)
		if t == nil || !reflect.PointerTo(t).Implements(unmarshalerType) || b[s.start] == '{' || b[s.start] == '[' {
			continue
		}
		v := reflect.New(t).Interface().(json.Unmarshaler)
		if uerr := v.UnmarshalJSON(b[s.start:s.end]); uerr != nil {
			ce.Path = s.path
			at(s.start)
			return ce
		}
	}
	return ce
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// configType is the Go type of the config field at path (a.b[0].c), or
// nil when no field is there.
func configType(path string) reflect.Type {
	t := reflect.TypeFor[Config]()
	for path != "" {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if strings.HasPrefix(path, "[") {
			i := strings.IndexByte(path, ']')
			if i < 0 || (t.Kind() != reflect.Slice && t.Kind() != reflect.Array) {
				return nil
			}
			t, path = t.Elem(), strings.TrimPrefix(path[i+1:], ".")
			continue
		}
		name := path
		if i := strings.IndexAny(path, ".["); i >= 0 {
			name, path = path[:i], strings.TrimPrefix(path[i:], ".")
		} else {
			path = ""
		}
		switch t.Kind() {
		case reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			f, ok := jsonField(t, name)
			if !ok {
				return nil
			}
			t = f
		default:
			return nil
		}
	}
	return t
}

// jsonField is the type of t's field that decodes JSON key name.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	var fold reflect.Type
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return f.Type, true
		}
		if fold == nil && strings.EqualFold(tag, name) {
			fold = f.Type
		}
	}
	return fold, fold != nil
}
