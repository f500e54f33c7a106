package artifacts

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/looopy-go/looopy/loop"
)

// Op is one artifact operation as a plugin asks for it through the host's
// artifact_write function: a JSON object decoded with DecodeOp and run with
// Writer.Apply. It belongs to no plugin SDK; the plugin runtime passes the
// guest's bytes through.
//
//	{"op":"create","kind":"dataset","name":"sales.csv","schema":{"columns":[{"name":"region","type":"string"},{"name":"total","type":"number"}]}}
//	{"op":"append","artifactId":"art-…","csv":"region,total\nnorth,12.5\n","last":true}
//	{"op":"append","artifactId":"art-…","text":"# Report\n"}
//	{"op":"append","artifactId":"art-…","base64":"iVBORw0KGgo="}
//	{"op":"append","artifactId":"art-…","rows":[{"region":"south","total":3}]}
//	{"op":"write","artifactId":"art-…","data":{"answer":42},"last":true}
//	{"op":"complete","artifactId":"art-…"}
//	{"op":"fail","artifactId":"art-…","reason":"source went away"}
type Op struct {
	Op         string `json:"op"` // create, append, write, merge, replace, complete, fail
	ArtifactID string `json:"artifactId,omitempty"`

	// create
	Kind        Kind                `json:"kind,omitempty"` // default file
	Name        string              `json:"name,omitempty"`
	Description string              `json:"description,omitempty"`
	MimeType    string              `json:"mimeType,omitempty"`
	Binary      bool                `json:"binary,omitempty"`
	Schema      *loop.DatasetSchema `json:"schema,omitempty"`

	// append / replace: exactly one of these
	Text   *string `json:"text,omitempty"`   // file: a text chunk
	Base64 *string `json:"base64,omitempty"` // file: a binary chunk
	Rows   []Row   `json:"rows,omitempty"`   // dataset: a batch of rows
	CSV    *string `json:"csv,omitempty"`    // dataset: rows as CSV under a header line naming columns
	Index  *int    `json:"index,omitempty"`  // replace: the chunk to replace

	// write / merge
	Data map[string]any `json:"data,omitempty"`

	Last   bool   `json:"last,omitempty"`   // append, write, merge: also complete the artifact
	Reason string `json:"reason,omitempty"` // fail
}

// OpResult is what Apply returns to the plugin.
type OpResult struct {
	ArtifactID string `json:"artifactId"`
	Status     Status `json:"status"`
	Parts      int    `json:"parts"`
	Size       int64  `json:"size"`
	Rows       int64  `json:"rows,omitempty"`
	Version    int    `json:"version,omitempty"`
}

// DecodeOp parses an operation strictly: unknown fields, trailing data and
// anything but one JSON object are errors naming the problem.
func DecodeOp(b []byte) (Op, error) {
	var op Op
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&op); err != nil {
		return Op{}, fmt.Errorf("decode artifact op: %w", invalid("%v", err))
	}
	if dec.More() {
		return Op{}, fmt.Errorf("decode artifact op: %w", invalid("data after the JSON object"))
	}
	if op.Op == "" {
		return Op{}, fmt.Errorf("decode artifact op: %w", invalid(`missing "op"`))
	}
	return op, nil
}

// ApplyJSON decodes an operation and applies it; the plugin runtime's
// artifact_write host function is this call.
func (w *Writer) ApplyJSON(ctx context.Context, b []byte) (OpResult, error) {
	op, err := DecodeOp(b)
	if err != nil {
		return OpResult{}, err
	}
	return w.Apply(ctx, op)
}

// Apply runs one operation in the writer's scope, with its events.
func (w *Writer) Apply(ctx context.Context, op Op) (OpResult, error) {
	info, err := w.apply(ctx, op)
	if err != nil {
		return OpResult{}, fmt.Errorf("artifact op %q: %w", op.Op, err)
	}
	return OpResult{ArtifactID: info.ID, Status: info.Status, Parts: info.Parts, Size: info.Size, Rows: info.Rows, Version: info.Version}, nil
}

func (w *Writer) apply(ctx context.Context, op Op) (Info, error) {
	if op.Op != "create" && op.ArtifactID == "" {
		return Info{}, invalid(`missing "artifactId"`)
	}
	payloads := 0
	for _, set := range []bool{op.Text != nil, op.Base64 != nil, op.Rows != nil, op.CSV != nil} {
		if set {
			payloads++
		}
	}
	switch op.Op {
	case "create":
		kind := op.Kind
		if kind == "" {
			kind = KindFile
		}
		return w.Create(ctx, Spec{ID: op.ArtifactID, Kind: kind, Name: op.Name, Description: op.Description,
			MimeType: op.MimeType, Binary: op.Binary, Schema: op.Schema})
	case "append":
		if payloads != 1 {
			return Info{}, invalid(`append takes exactly one of "text", "base64", "rows", "csv"`)
		}
		switch {
		case op.Text != nil:
			return w.AppendChunk(ctx, op.ArtifactID, []byte(*op.Text), op.Last)
		case op.Base64 != nil:
			b, err := base64.StdEncoding.DecodeString(*op.Base64)
			if err != nil {
				return Info{}, invalid("base64: %v", err)
			}
			return w.AppendChunk(ctx, op.ArtifactID, b, op.Last)
		case op.Rows != nil:
			return w.AppendRows(ctx, op.ArtifactID, op.Rows, op.Last)
		default:
			info, err := w.store.Get(ctx, op.ArtifactID)
			if err != nil {
				return Info{}, err
			}
			if info.Kind != KindDataset {
				return Info{}, fmt.Errorf("%w: csv rows go to a dataset, %q is a %s", ErrWrongKind, op.ArtifactID, info.Kind)
			}
			rows, err := RowsFromCSV(info.Schema, strings.NewReader(*op.CSV))
			if err != nil {
				return Info{}, err
			}
			return w.AppendRows(ctx, op.ArtifactID, rows, op.Last)
		}
	case "replace":
		if op.Index == nil || (op.Text == nil) == (op.Base64 == nil) || payloads != 1 {
			return Info{}, invalid(`replace takes "index" and one of "text", "base64"`)
		}
		data := []byte(nil)
		if op.Text != nil {
			data = []byte(*op.Text)
		} else {
			b, err := base64.StdEncoding.DecodeString(*op.Base64)
			if err != nil {
				return Info{}, invalid("base64: %v", err)
			}
			data = b
		}
		return w.ReplaceChunk(ctx, op.ArtifactID, *op.Index, data)
	case "write":
		if op.Data == nil {
			return Info{}, invalid(`write takes "data", a JSON object`)
		}
		return w.WriteData(ctx, op.ArtifactID, op.Data, op.Last)
	case "merge":
		if op.Data == nil {
			return Info{}, invalid(`merge takes "data", a JSON object`)
		}
		return w.MergeData(ctx, op.ArtifactID, op.Data, op.Last)
	case "complete":
		return w.Complete(ctx, op.ArtifactID)
	case "fail":
		return w.Fail(ctx, op.ArtifactID, op.Reason)
	}
	return Info{}, invalid("unknown op %q (want create, append, replace, write, merge, complete or fail)", op.Op)
}

// RowsFromCSV reads CSV whose first record names columns of schema (in any
// order, a subset allowed) and returns the rows, each value converted to
// its column's type: numbers and integers parsed, booleans from
// true/false, an empty field as null, json columns parsed as JSON. A value
// that does not convert is a *RowError naming row and column.
func RowsFromCSV(schema *loop.DatasetSchema, r io.Reader) ([]Row, error) {
	if schema == nil {
		return nil, invalid("dataset has no schema")
	}
	types := make(map[string]string, len(schema.Columns))
	for _, c := range schema.Columns {
		types[c.Name] = c.Type
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	if err != nil {
		return nil, invalid("csv header: %v", err)
	}
	names := append([]string(nil), header...)
	for _, n := range names {
		if _, ok := types[n]; !ok {
			return nil, fmt.Errorf("%w: csv header names column %q, which is not in the schema", ErrSchemaMismatch, n)
		}
	}
	var rows []Row
	for i := 0; ; i++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, &RowError{Row: i, Reason: "csv: " + err.Error()}
		}
		row := make(Row, len(names))
		for j, n := range names {
			v, err := fromCSV(types[n], rec[j])
			if err != nil {
				return nil, &RowError{Row: i, Column: n, Reason: err.Error()}
			}
			row[n] = v
		}
		rows = append(rows, row)
	}
}

func fromCSV(typ, s string) (any, error) {
	if s == "" {
		if typ == TypeString {
			return "", nil
		}
		return nil, nil
	}
	switch typ {
	case TypeNumber:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("want a number, got %q", s)
		}
		return f, nil
	case TypeInteger:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("want an integer, got %q", s)
		}
		return i, nil
	case TypeBoolean:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("want true or false, got %q", s)
		}
		return b, nil
	case TypeJSON:
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return nil, fmt.Errorf("want JSON, got %q", s)
		}
		return v, nil
	}
	return s, nil
}
