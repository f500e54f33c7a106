package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/pdk"
)

// store keeps writes the way an artifact store would: by id, rows appended.
type store struct {
	writes    []pdk.ArtifactWrite
	rows      []map[string]any
	completed bool
}

func (s *store) write(w *pdk.ArtifactWrite) (string, error) {
	if len(s.writes) > 0 && w.ArtifactID != "art-1" {
		return "", errors.New("write without the artifact's id")
	}
	if s.completed {
		return "", errors.New("write after complete")
	}
	s.writes = append(s.writes, *w)
	s.rows = append(s.rows, w.Rows...)
	s.completed = w.Complete
	return "art-1", nil
}

func TestWriteBatches(t *testing.T) {
	for _, rows := range []int{1, BatchRows, BatchRows + 1, 2500} {
		var s store
		var progress []int
		id, err := Write("demo", rows, s.write, func(done, total int) {
			if total != rows {
				t.Errorf("progress total %d, want %d", total, rows)
			}
			progress = append(progress, done)
		})
		if err != nil || id != "art-1" {
			t.Fatalf("rows %d: %q %v", rows, id, err)
		}
		batches := (rows + BatchRows - 1) / BatchRows
		if len(s.writes) != batches || len(progress) != batches || progress[len(progress)-1] != rows {
			t.Errorf("rows %d: %d writes, progress %v; want %d batches", rows, len(s.writes), progress, batches)
		}
		first := s.writes[0]
		if first.ArtifactID != "" || first.Type != "dataset" || first.Name != "demo" || !reflect.DeepEqual(first.Columns, Columns) {
			t.Errorf("first write %+v", first)
		}
		for _, w := range s.writes[1:] {
			if w.Columns != nil || w.Name != "" {
				t.Errorf("a later write repeats the schema: %+v", w)
			}
		}
		if !s.completed || len(s.rows) != rows {
			t.Fatalf("rows %d: completed %v with %d rows", rows, s.completed, len(s.rows))
		}
		for i, r := range s.rows {
			if !reflect.DeepEqual(r, Row("demo", i+1)) {
				t.Fatalf("row %d = %v", i+1, r)
			}
		}
	}
	if r := Row("x", 3); r["square"] != 9.0 || r["even"] != false || r["label"] != "x-3" {
		t.Errorf("Row(x, 3) = %v", r)
	}
}

func TestWriteErrors(t *testing.T) {
	var s store
	for _, tt := range []struct {
		name string
		rows int
		want string
	}{
		{"demo", 0, "rows 0: want 1..100000"},
		{"demo", MaxRows + 1, "rows 100001"},
		{"", 5, "name \"\""},
		{"../x", 5, "name \"../x\""},
	} {
		if _, err := Write(tt.name, tt.rows, s.write, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Write(%q, %d): %v, want %q", tt.name, tt.rows, err, tt.want)
		}
	}
	if len(s.writes) != 0 {
		t.Errorf("bad input still wrote %d times", len(s.writes))
	}
	failing := func(*pdk.ArtifactWrite) (string, error) { return "", errors.New("store full") }
	if _, err := Write("demo", 10, failing, nil); err == nil || !strings.Contains(err.Error(), "write rows 1-10: store full") {
		t.Errorf("failing store: %v", err)
	}
	noID := func(*pdk.ArtifactWrite) (string, error) { return "", nil }
	if _, err := Write("demo", 10, noID, nil); err == nil || !strings.Contains(err.Error(), "no id") {
		t.Errorf("no id: %v", err)
	}
}
