package artifacts

import (
	"context"
	"encoding/csv"
	"errors"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// A dataset's cells and column names are a plugin's or the model's text: a
// CSV download opened in a spreadsheet must not run any of them as a
// formula. Text starting with = + - @, a tab or a carriage return gets a
// leading ' (it was written as it is: `=cmd|' /C calc'!A0` ran); numbers,
// negative ones too, stay numbers.
func TestCSVExportNeutralizesFormulas(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t, Config{}) {
		t.Run(b.name, func(t *testing.T) {
			w := NewWriter(b.store, Scope{ContextID: "c", TaskID: "t", Owner: "alice"}, nil)
			info, err := w.Create(ctx, Spec{ID: "formulas", Kind: KindDataset, Name: "f", Schema: &loop.DatasetSchema{
				Columns: []loop.DatasetColumn{{Name: "=HYPERLINK(\"x\")", Type: "string"}, {Name: "n", Type: "number"}, {Name: "j", Type: "json"}}}})
			if err != nil {
				t.Fatal(err)
			}
			cells := []string{"=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(1,1)", "\t=1", "\r=1", "plain", "a=b", ""}
			rows := make([]Row, len(cells))
			for i, c := range cells {
				rows[i] = Row{"=HYPERLINK(\"x\")": c, "n": -5, "j": map[string]any{"k": "=1"}}
			}
			if _, err := w.AppendRows(ctx, info.ID, rows, true); err != nil {
				t.Fatal(err)
			}
			rc, _, _, err := Export(ctx, b.store, info.ID, FormatCSV)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := csv.NewReader(strings.NewReader(string(readAll(t, rc)))).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if got := recs[0][0]; got != "'=HYPERLINK(\"x\")" {
				t.Fatalf("column name exported as %q", got)
			}
			for i, c := range cells {
				want := c
				if c != "" && strings.ContainsRune("=+-@\t\r", rune(c[0])) {
					want = "'" + c
				}
				rec := recs[i+1]
				if rec[0] != want || rec[1] != "-5" || rec[2] != `{"k":"=1"}` {
					t.Fatalf("row %d exported as %q, want %q, -5 and the JSON as it is", i, rec, want)
				}
			}
		})
	}
}

// CSV and JSON lines apply to datasets: asking them of a file is the
// client's error (it matches ErrInvalid, a 400 at the host), never a fault.
func TestExportFormatOfAFileIsInvalid(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t, Config{}) {
		t.Run(b.name, func(t *testing.T) {
			w := NewWriter(b.store, Scope{ContextID: "c", TaskID: "t", Owner: "alice"}, nil)
			info, err := w.Create(ctx, Spec{ID: "f1", Kind: KindFile, Name: "f.bin"})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []Format{FormatCSV, FormatJSONL} {
				_, _, _, err := Export(ctx, b.store, info.ID, f)
				if !errors.Is(err, ErrInvalid) || !errors.Is(err, loop.ErrInvalid) || !errors.Is(err, ErrWrongKind) {
					t.Fatalf("%s of a file: %v, want ErrInvalid (and ErrWrongKind)", f, err)
				}
			}
		})
	}
}
