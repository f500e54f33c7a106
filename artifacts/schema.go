package artifacts

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/looopy-go/looopy/loop"
)

// Row is one row of a dataset: column name to value.
type Row = map[string]any

const maxColumns = 1024

func validateSchema(s *loop.DatasetSchema) error {
	if s == nil || len(s.Columns) == 0 {
		return invalid("a dataset needs a schema with at least one column")
	}
	if len(s.Columns) > maxColumns {
		return invalid("a dataset schema has at most %d columns, got %d", maxColumns, len(s.Columns))
	}
	seen := make(map[string]bool, len(s.Columns))
	for i, c := range s.Columns {
		if c.Name == "" || !utf8.ValidString(c.Name) || len(c.Name) > 256 {
			return invalid("schema column %d: a column needs a UTF-8 name of at most 256 bytes", i)
		}
		if seen[c.Name] {
			return invalid("schema column %d: column %q named twice", i, c.Name)
		}
		seen[c.Name] = true
		switch c.Type {
		case TypeString, TypeNumber, TypeInteger, TypeBoolean, TypeDate, TypeJSON:
		default:
			return invalid("schema column %q: unknown type %q (want string, number, integer, boolean, date or json)", c.Name, c.Type)
		}
	}
	return nil
}

// NormalizeRows checks rows against schema and returns them in their stored
// form: every column present (a missing one is nil), integers as int64,
// numbers as float64, json values in their canonical decoded form. Unknown
// columns and values of the wrong type are refused with a *RowError; offset
// is the number of rows the dataset already holds (for the message).
func NormalizeRows(schema *loop.DatasetSchema, rows []Row, offset int64) ([]Row, error) {
	if schema == nil {
		return nil, invalid("dataset has no schema")
	}
	cols := make(map[string]string, len(schema.Columns))
	for _, c := range schema.Columns {
		cols[c.Name] = c.Type
	}
	out := make([]Row, len(rows))
	for i, r := range rows {
		if r == nil {
			return nil, &RowError{Row: i, Offset: offset, Reason: "a row must be a JSON object"}
		}
		for k := range r {
			if _, ok := cols[k]; !ok {
				return nil, &RowError{Row: i, Offset: offset, Column: k, Reason: "no such column in the schema"}
			}
		}
		n := make(Row, len(schema.Columns))
		for _, c := range schema.Columns {
			v, err := normalizeValue(c.Type, r[c.Name])
			if err != nil {
				return nil, &RowError{Row: i, Offset: offset, Column: c.Name, Reason: err.Error()}
			}
			n[c.Name] = v
		}
		out[i] = n
	}
	return out, nil
}

func describe(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%T", v)
	}
	if len(b) > 40 {
		b = append(b[:37:37], "..."...)
	}
	return string(b)
}

func normalizeValue(typ string, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch typ {
	case TypeString:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want a string, got %s", describe(v))
		}
		return s, nil
	case TypeBoolean:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("want a boolean, got %s", describe(v))
		}
		return b, nil
	case TypeDate:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want a date string, got %s", describe(v))
		}
		if _, err := time.Parse(time.DateOnly, s); err != nil {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return nil, fmt.Errorf("want a date (2006-01-02 or RFC 3339), got %s", describe(v))
			}
		}
		return s, nil
	case TypeNumber:
		f, ok := toFloat(v)
		if !ok {
			return nil, fmt.Errorf("want a number, got %s", describe(v))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("want a finite number, got %v", f)
		}
		return f, nil
	case TypeInteger:
		var i int64
		var isInt bool
		switch n := v.(type) {
		case int:
			i, isInt = int64(n), true
		case int64:
			i, isInt = n, true
		case int32:
			i, isInt = int64(n), true
		case json.Number:
			if x, err := n.Int64(); err == nil {
				i, isInt = x, true
			}
		}
		if isInt {
			if i > 1<<53 || i < -(1<<53) {
				return nil, fmt.Errorf("want an integer of at most 2^53 in size, got %d", i)
			}
			return i, nil
		}
		f, ok := toFloat(v)
		if !ok {
			return nil, fmt.Errorf("want an integer, got %s", describe(v))
		}
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, fmt.Errorf("want an integer (at most 2^53 in size), got %s", describe(v))
		}
		return int64(f), nil
	case TypeJSON:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("not a JSON value: %v", err)
		}
		var out any
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("not a JSON value: %v", err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown column type %q", typ)
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// AppendRowJSON appends the JSON line of a normalized row to dst: an object
// with the schema's columns in schema order, then "\n". This is the stored
// form of a dataset and what Open streams, so a client that rebuilds a
// dataset from dataset-write events and encodes each row with this function
// gets the stored bytes exactly. Values are encoded as encoding/json does.
func AppendRowJSON(dst []byte, schema *loop.DatasetSchema, row Row) ([]byte, error) {
	return newRowEncoder(schema).append(dst, row)
}

// rowEncoder encodes the rows of one schema, with the column names
// encoded once.
type rowEncoder struct {
	names []string
	keys  [][]byte // `"name":`
}

func newRowEncoder(schema *loop.DatasetSchema) *rowEncoder {
	e := &rowEncoder{names: make([]string, len(schema.Columns)), keys: make([][]byte, len(schema.Columns))}
	for i, c := range schema.Columns {
		k, _ := json.Marshal(c.Name) // a string always marshals
		e.names[i], e.keys[i] = c.Name, append(k, ':')
	}
	return e
}

func (e *rowEncoder) append(dst []byte, row Row) ([]byte, error) {
	dst = append(dst, '{')
	for i, name := range e.names {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e.keys[i]...)
		switch v := row[name].(type) {
		case nil:
			dst = append(dst, "null"...)
		case bool:
			dst = strconv.AppendBool(dst, v)
		case int64:
			dst = strconv.AppendInt(dst, v, 10)
		default:
			b, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("column %q: %w", name, err)
			}
			dst = append(dst, b...)
		}
	}
	return append(dst, '}', '\n'), nil
}

// csvHeader returns the CSV header line of schema.
func csvHeader(w *csv.Writer, schema *loop.DatasetSchema) error {
	rec := make([]string, len(schema.Columns))
	for i, c := range schema.Columns {
		rec[i] = csvCell(c.Name)
	}
	return w.Write(rec)
}

// csvCell neutralizes text a spreadsheet would run as a formula: a cell
// starting with = + - @, a tab or a carriage return gets a leading ' (the
// spreadsheet shows the text, without the quote). The content is a plugin's
// or the model's, the download is opened on the user's machine. Numbers and
// booleans are written in JSON notation and left alone (-5 is a number, not
// a formula); text that merely starts with - gets the quote too.
func csvCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// csvRecord turns one JSON line of a stored dataset into a CSV record:
// strings and dates as they are (one a spreadsheet would run as a formula
// neutralized, csvCell), numbers and booleans in JSON notation,
// null as an empty field, json columns as JSON text. m is reused between
// calls.
func csvRecord(schema *loop.DatasetSchema, line []byte, rec []string, m map[string]json.RawMessage) error {
	clear(m)
	if err := json.Unmarshal(line, &m); err != nil {
		return fmt.Errorf("stored row: %w", err)
	}
	for i, c := range schema.Columns {
		raw := m[c.Name]
		switch {
		case len(raw) == 0 || string(raw) == "null":
			rec[i] = ""
		case raw[0] == '"' && c.Type != TypeJSON:
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return fmt.Errorf("stored row: column %q: %w", c.Name, err)
			}
			rec[i] = csvCell(s)
		default:
			rec[i] = string(raw)
		}
	}
	return nil
}
