package main

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/looopy-go/looopy/pdk"
)

// Limits of one dataset.
const (
	MaxRows   = 100000
	BatchRows = 1000
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$`)

// Columns is the schema of the datasets this tool writes.
var Columns = []pdk.ArtifactColumn{
	{Name: "id", Type: "integer", Description: "row number, from 1"},
	{Name: "label", Type: "string", Description: "the dataset's name and the row number"},
	{Name: "square", Type: "number", Description: "id squared"},
	{Name: "even", Type: "boolean", Description: "whether id is even"},
}

// Row returns row i (from 1) of a dataset: deterministic, so a test can
// check any row it reads back.
func Row(name string, i int) map[string]any {
	return map[string]any{"id": i, "label": fmt.Sprintf("%s-%d", name, i), "square": float64(i) * float64(i), "even": i%2 == 0}
}

// Writer is one write of an artifact (the artifact_write host function).
type Writer func(w *pdk.ArtifactWrite) (artifactID string, err error)

// Write writes a dataset of rows rows in batches: the first write creates
// the artifact with its columns, each later one names it, the last one
// completes it. progress (may be nil) hears after each batch.
func Write(name string, rows int, write Writer, progress func(done, total int)) (string, error) {
	if !nameRE.MatchString(name) {
		return "", fmt.Errorf("name %q: want 1-64 letters, digits, spaces, '_', '-' or '.'", name)
	}
	if rows < 1 || rows > MaxRows {
		return "", fmt.Errorf("rows %d: want 1..%d", rows, MaxRows)
	}
	id := ""
	for start := 1; start <= rows; start += BatchRows {
		end := min(start+BatchRows-1, rows)
		w := &pdk.ArtifactWrite{ArtifactID: id, Type: "dataset", Complete: end == rows}
		if id == "" {
			w.Name, w.Description, w.Columns = name, fmt.Sprintf("%d generated rows", rows), Columns
		}
		for i := start; i <= end; i++ {
			w.Rows = append(w.Rows, Row(name, i))
		}
		got, err := write(w)
		if err != nil {
			return "", fmt.Errorf("write rows %d-%d: %w", start, end, err)
		}
		if id == "" {
			if got == "" {
				return "", errors.New("the host gave the new artifact no id")
			}
			id = got
		}
		if progress != nil {
			progress(end, rows)
		}
	}
	return id, nil
}
