package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

var ctxb = context.Background()

var salesSchema = &loop.DatasetSchema{Columns: []loop.DatasetColumn{
	{Name: "region", Type: TypeString},
	{Name: "units", Type: TypeInteger},
	{Name: "total", Type: TypeNumber},
	{Name: "paid", Type: TypeBoolean},
	{Name: "day", Type: TypeDate},
	{Name: "extra", Type: TypeJSON},
}}

func TestFileLifecycle(t *testing.T) {
	for _, b := range backends(t, Config{}) {
		t.Run(b.name, func(t *testing.T) {
			s := b.store
			info := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t1", ContextID: "c1", Name: "report.md", MimeType: "text/markdown"}))
			if info.Status != StatusBuilding || info.Parts != 0 || !strings.HasPrefix(info.ID, "art-") {
				t.Fatalf("created %+v", info)
			}
			must[Info](t)(s.AppendChunk(ctxb, info.ID, []byte("# Title\n"), false))
			info = must[Info](t)(s.AppendChunk(ctxb, info.ID, []byte("body ✓\n"), true))
			if info.Status != StatusComplete || info.Parts != 2 || info.Size != int64(len("# Title\nbody ✓\n")) || info.CompletedAt.IsZero() {
				t.Fatalf("after last chunk: %+v", info)
			}
			if got := content(t, s, info.ID); string(got) != "# Title\nbody ✓\n" {
				t.Fatalf("content %q", got)
			}
			_, err := s.AppendChunk(ctxb, info.ID, []byte("more"), false)
			if !errors.Is(err, ErrCompleted) {
				t.Fatalf("append to completed: %v, want ErrCompleted", err)
			}
			if _, err := s.Complete(ctxb, info.ID); !errors.Is(err, ErrCompleted) {
				t.Fatalf("complete twice: %v", err)
			}
			if _, err := s.ReplaceChunk(ctxb, info.ID, 0, []byte("x")); !errors.Is(err, ErrCompleted) {
				t.Fatalf("replace in completed: %v", err)
			}
			got, _ := s.Get(ctxb, info.ID)
			if got.Parts != 2 || got.Version != 2 {
				t.Fatalf("refused writes changed the record: %+v", got)
			}
		})
	}
}

func TestFileRules(t *testing.T) {
	for _, b := range backends(t, Config{}) {
		t.Run(b.name, func(t *testing.T) {
			s := b.store
			text := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c"}))
			if text.MimeType != "text/plain; charset=utf-8" {
				t.Fatalf("default MIME type %q", text.MimeType)
			}
			if _, err := s.AppendChunk(ctxb, text.ID, []byte{0xff, 0xfe}, false); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "UTF-8") {
				t.Fatalf("invalid UTF-8 in text: %v", err)
			}
			if _, err := s.AppendChunk(ctxb, text.ID, nil, false); !errors.Is(err, ErrInvalid) {
				t.Fatalf("empty chunk: %v", err)
			}
			bin := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c", Binary: true}))
			must[Info](t)(s.AppendChunk(ctxb, bin.ID, []byte{0, 0xff, 0xfe}, false))
			if _, _, err := s.AppendRows(ctxb, bin.ID, []Row{{"a": 1}}, false); !errors.Is(err, ErrWrongKind) {
				t.Fatalf("rows into a file: %v", err)
			}
			if _, err := s.WriteData(ctxb, bin.ID, map[string]any{}); !errors.Is(err, ErrWrongKind) {
				t.Fatalf("data into a file: %v", err)
			}
			if _, err := s.ReplaceChunk(ctxb, bin.ID, 1, []byte("x")); !errors.Is(err, ErrPartRange) {
				t.Fatalf("replace out of range: %v", err)
			}
			if _, err := s.ReplaceChunk(ctxb, bin.ID, -1, []byte("x")); !errors.Is(err, ErrPartRange) {
				t.Fatalf("replace negative: %v", err)
			}
			must[Info](t)(s.ReplaceChunk(ctxb, bin.ID, 0, []byte("new")))
			if got := content(t, s, bin.ID); string(got) != "new" {
				t.Fatalf("after replace %q", got)
			}
			if _, err := s.AppendChunk(ctxb, "art-missing", []byte("x"), false); !errors.Is(err, ErrNotFound) || !errors.Is(err, loop.ErrNotFound) {
				t.Fatalf("unknown id: %v", err)
			}
			if _, err := s.AppendChunk(ctxb, "../../etc", []byte("x"), false); !errors.Is(err, ErrNotFound) {
				t.Fatalf("bad id: %v", err)
			}
			failed := must[Info](t)(s.Fail(ctxb, text.ID, "source went away"))
			if failed.Status != StatusFailed || failed.Error != "source went away" {
				t.Fatalf("fail: %+v", failed)
			}
			if _, err := s.AppendChunk(ctxb, text.ID, []byte("x"), false); !errors.Is(err, ErrFailed) {
				t.Fatalf("append to failed: %v", err)
			}
			big := make([]byte, 100)
			small := NewMemory(nil, Config{MaxPartSize: 50})
			f := must[Info](t)(small.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c", Binary: true}))
			if _, err := small.AppendChunk(ctxb, f.ID, big, false); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("too large: %v", err)
			}
		})
	}
}

func TestCreateValidation(t *testing.T) {
	s := NewMemory(nil, Config{})
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"no kind", Spec{TaskID: "t", ContextID: "c"}, "unknown kind"},
		{"no task", Spec{Kind: KindFile, ContextID: "c"}, "task id"},
		{"bad id", Spec{Kind: KindFile, TaskID: "t", ContextID: "c", ID: "a/b"}, "bad artifact id"},
		{"bad mime", Spec{Kind: KindFile, TaskID: "t", ContextID: "c", MimeType: "text"}, "MIME"},
		{"dataset no schema", Spec{Kind: KindDataset, TaskID: "t", ContextID: "c"}, "schema"},
		{"bad column type", Spec{Kind: KindDataset, TaskID: "t", ContextID: "c", Schema: &loop.DatasetSchema{Columns: []loop.DatasetColumn{{Name: "a", Type: "float"}}}}, `unknown type "float"`},
		{"column twice", Spec{Kind: KindDataset, TaskID: "t", ContextID: "c", Schema: &loop.DatasetSchema{Columns: []loop.DatasetColumn{{Name: "a", Type: "string"}, {Name: "a", Type: "string"}}}}, "named twice"},
		{"file with schema", Spec{Kind: KindFile, TaskID: "t", ContextID: "c", Schema: salesSchema}, "no schema"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Create(ctxb, c.spec)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrInvalid mentioning %q", err, c.want)
			}
		})
	}
	must[Info](t)(s.Create(ctxb, Spec{ID: "mine-1", Kind: KindFile, TaskID: "t", ContextID: "c"}))
	if _, err := s.Create(ctxb, Spec{ID: "mine-1", Kind: KindFile, TaskID: "t", ContextID: "c"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("duplicate id: %v", err)
	}
}

func TestDataVersions(t *testing.T) {
	for _, b := range backends(t, Config{}) {
		t.Run(b.name, func(t *testing.T) {
			s := b.store
			d := must[Info](t)(s.Create(ctxb, Spec{Kind: KindData, TaskID: "t", ContextID: "c", Name: "config"}))
			if got := content(t, s, d.ID); string(got) != "{}" {
				t.Fatalf("unwritten data streams %q, want {}", got)
			}
			v1 := must[Info](t)(s.WriteData(ctxb, d.ID, map[string]any{"b": 1, "a": []any{"x", true}}))
			v2 := must[Info](t)(s.WriteData(ctxb, d.ID, map[string]any{"answer": 42.5}))
			if v1.Version != 1 || v2.Version != 2 || v2.Parts != 1 {
				t.Fatalf("versions %d %d parts %d", v1.Version, v2.Version, v2.Parts)
			}
			if got := content(t, s, d.ID); string(got) != `{"answer":42.5}` {
				t.Fatalf("data %s", got)
			}
			if v2.ContentType() != "application/json" || v2.Size != int64(len(`{"answer":42.5}`)) {
				t.Fatalf("info %+v", v2)
			}
			if _, err := s.AppendChunk(ctxb, d.ID, []byte("x"), false); !errors.Is(err, ErrWrongKind) {
				t.Fatalf("chunk into data: %v", err)
			}
			must[Info](t)(s.Complete(ctxb, d.ID))
			if _, err := s.WriteData(ctxb, d.ID, map[string]any{}); !errors.Is(err, ErrCompleted) {
				t.Fatalf("write completed data: %v", err)
			}
		})
	}
}

func TestDatasetSchemaRefusal(t *testing.T) {
	for _, b := range backends(t, Config{}) {
		t.Run(b.name, func(t *testing.T) {
			s := b.store
			ds := must[Info](t)(s.Create(ctxb, Spec{Kind: KindDataset, TaskID: "t", ContextID: "c", Schema: salesSchema}))
			good := Row{"region": "north", "units": 3, "total": 12.5, "paid": true, "day": "2026-11-22", "extra": map[string]any{"k": []any{1}}}
			info, norm, err := s.AppendRows(ctxb, ds.ID, []Row{good, {"region": "south"}}, false)
			if err != nil {
				t.Fatal(err)
			}
			if info.Rows != 2 || len(norm) != 2 || norm[0]["units"] != int64(3) || norm[1]["total"] != nil {
				t.Fatalf("stored %+v rows %v", info, norm)
			}
			cases := []struct {
				name   string
				rows   []Row
				row    int
				column string
			}{
				{"unknown column", []Row{good, {"region": "x", "colour": "red"}}, 1, "colour"},
				{"string for number", []Row{{"total": "12"}}, 0, "total"},
				{"fraction for integer", []Row{good, good, {"units": 1.5}}, 2, "units"},
				{"number for boolean", []Row{{"paid": 1}}, 0, "paid"},
				{"bad date", []Row{{"day": "22/11/2026"}}, 0, "day"},
				{"number for string", []Row{{"region": 7}}, 0, "region"},
				{"null row", []Row{good, nil}, 1, ""},
			}
			for _, c := range cases {
				_, _, err := s.AppendRows(ctxb, ds.ID, c.rows, false)
				var re *RowError
				if !errors.As(err, &re) || !errors.Is(err, ErrSchemaMismatch) {
					t.Fatalf("%s: %v, want a RowError", c.name, err)
				}
				if re.Row != c.row || re.Column != c.column || re.Offset != 2 {
					t.Fatalf("%s: row %d column %q offset %d, want row %d column %q offset 2", c.name, re.Row, re.Column, re.Offset, c.row, c.column)
				}
				want := fmt.Sprintf("row %d (dataset row %d)", c.row, c.row+2)
				if !strings.Contains(err.Error(), want) || (c.column != "" && !strings.Contains(err.Error(), `"`+c.column+`"`)) {
					t.Fatalf("%s: message %q names neither row nor column", c.name, err)
				}
			}
			after, _ := s.Get(ctxb, ds.ID)
			if after.Rows != 2 || after.Parts != 1 {
				t.Fatalf("refused batches were stored: %+v", after)
			}
			want := `{"region":"north","units":3,"total":12.5,"paid":true,"day":"2026-11-22","extra":{"k":[1]}}` + "\n" +
				`{"region":"south","units":null,"total":null,"paid":null,"day":null,"extra":null}` + "\n"
			if got := content(t, s, ds.ID); string(got) != want {
				t.Fatalf("json lines:\n%s\nwant:\n%s", got, want)
			}
			rc, mime, _, err := Export(ctxb, s, ds.ID, FormatCSV)
			if err != nil {
				t.Fatal(err)
			}
			wantCSV := "region,units,total,paid,day,extra\nnorth,3,12.5,true,2026-11-22,\"{\"\"k\"\":[1]}\"\nsouth,,,,,\n"
			if got := readAll(t, rc); string(got) != wantCSV || mime != "text/csv; charset=utf-8" {
				t.Fatalf("csv %q (%s), want %q", got, mime, wantCSV)
			}
		})
	}
}

func TestExportFormats(t *testing.T) {
	s := NewMemory(nil, Config{})
	f := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c", MimeType: "text/html"}))
	must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("<p>hi</p>"), true))
	rc, mime, _, err := Export(ctxb, s, f.ID, FormatNative)
	if err != nil || mime != "text/html" || string(readAll(t, rc)) != "<p>hi</p>" {
		t.Fatalf("file export: %v %q", err, mime)
	}
	if _, _, _, err := Export(ctxb, s, f.ID, FormatCSV); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("csv of a file: %v", err)
	}
	if _, err := ParseFormat("xml"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad format: %v", err)
	}
	if f, _ := ParseFormat("ndjson"); f != FormatJSONL {
		t.Fatalf("ndjson = %q", f)
	}
	if _, _, _, err := Export(ctxb, s, "art-none", FormatNative); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

// blobFiles lists the object files in a local blob folder.
func blobFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBlobSpillAndDelete(t *testing.T) {
	for _, b := range backends(t, Config{InlineMax: 1024}) {
		t.Run(b.name, func(t *testing.T) {
			s := b.store
			count := func() int {
				if b.dir != "" {
					return len(blobFiles(t, b.dir))
				}
				return b.blobs.(*MemoryBlobs).Len()
			}
			f := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c", Binary: true}))
			small := bytes.Repeat([]byte{1}, 1024) // at the threshold: inline
			large := bytes.Repeat([]byte{2}, 1025) // over: blob
			must[Info](t)(s.AppendChunk(ctxb, f.ID, small, false))
			if n := count(); n != 0 {
				t.Fatalf("a part at the threshold went to a blob (%d blobs)", n)
			}
			must[Info](t)(s.AppendChunk(ctxb, f.ID, large, false))
			if n := count(); n != 1 {
				t.Fatalf("%d blobs after a part over the threshold, want 1", n)
			}
			// Replacing a blob part drops the old blob.
			must[Info](t)(s.ReplaceChunk(ctxb, f.ID, 1, bytes.Repeat([]byte{3}, 2000)))
			if n := count(); n != 1 {
				t.Fatalf("%d blobs after replacing the blob part, want 1", n)
			}
			must[Info](t)(s.ReplaceChunk(ctxb, f.ID, 1, []byte{4}))
			if n := count(); n != 0 {
				t.Fatalf("%d blobs after replacing with an inline part, want 0", n)
			}
			must[Info](t)(s.AppendChunk(ctxb, f.ID, large, false))
			ds := must[Info](t)(s.Create(ctxb, Spec{Kind: KindDataset, TaskID: "t", ContextID: "c", Schema: salesSchema}))
			var rows []Row
			for i := range 50 {
				rows = append(rows, Row{"region": fmt.Sprintf("region-%d", i), "units": i})
			}
			must[Info](t)(func() (Info, error) { i, _, err := s.AppendRows(ctxb, ds.ID, rows, true); return i, err }())
			data := must[Info](t)(s.Create(ctxb, Spec{Kind: KindData, TaskID: "t", ContextID: "c"}))
			must[Info](t)(s.WriteData(ctxb, data.ID, map[string]any{"text": strings.Repeat("z", 2000)}))
			if n := count(); n != 3 {
				t.Fatalf("%d blobs, want 3 (file, dataset batch, data)", n)
			}
			want := append(append(append([]byte{}, small...), 4), large...)
			if got := content(t, s, f.ID); !bytes.Equal(got, want) {
				t.Fatalf("file read back wrong: %d bytes, want %d", len(got), len(want))
			}
			if got := content(t, s, ds.ID); bytes.Count(got, []byte("\n")) != 50 {
				t.Fatalf("dataset from blob: %d lines", bytes.Count(got, []byte("\n")))
			}
			if got := must[map[string]any](t)(ReadData(ctxb, s, data.ID)); got["text"] != strings.Repeat("z", 2000) {
				t.Fatal("data from blob differs")
			}
			if err := s.Delete(ctxb, f.ID); err != nil {
				t.Fatal(err)
			}
			if n := count(); n != 2 {
				t.Fatalf("%d blobs after deleting the file, want 2", n)
			}
			if _, err := s.Get(ctxb, f.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted artifact: %v", err)
			}
			if err := s.Delete(ctxb, f.ID); err != nil {
				t.Fatalf("deleting twice: %v", err)
			}
			if err := s.DeleteTask(ctxb, "t"); err != nil {
				t.Fatal(err)
			}
			if n := count(); n != 0 {
				t.Fatalf("%d blobs after DeleteTask, want 0", n)
			}
			if l := must[[]Info](t)(s.ListByTask(ctxb, "t")); len(l) != 0 {
				t.Fatalf("task still lists %d artifacts", len(l))
			}
			if b.dir != "" {
				entries, _ := os.ReadDir(b.dir)
				if len(entries) != 0 {
					t.Fatalf("blob folder keeps %d entries", len(entries))
				}
			}
		})
	}
}

func TestListAndIsolationIndex(t *testing.T) {
	for _, b := range backends(t, Config{}) {
		t.Run(b.name, func(t *testing.T) {
			s := b.store
			// Ids with "/" must not let one prefix match another's keys.
			a := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "a", ContextID: "ctx"}))
			ab := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "a/b", ContextID: "ctx/x"}))
			c := must[Info](t)(s.Create(ctxb, Spec{Kind: KindData, TaskID: "c", ContextID: "ctx"}))
			if got := ids(must[[]Info](t)(s.ListByTask(ctxb, "a"))); fmt.Sprint(got) != fmt.Sprint([]string{a.ID}) {
				t.Fatalf("task a lists %v", got)
			}
			if got := ids(must[[]Info](t)(s.ListByTask(ctxb, "a/b"))); fmt.Sprint(got) != fmt.Sprint([]string{ab.ID}) {
				t.Fatalf("task a/b lists %v", got)
			}
			if got := ids(must[[]Info](t)(s.ListByContext(ctxb, "ctx"))); fmt.Sprint(got) != fmt.Sprint(ids([]Info{a, c})) {
				t.Fatalf("context lists %v", got)
			}
			list := must[[]Info](t)(s.ListByContext(ctxb, "ctx"))
			if list[0].CreatedAt.After(list[1].CreatedAt) {
				t.Fatal("list is not oldest first")
			}
		})
	}
}

func TestExpireTaskAndSweep(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	for _, b := range backends(t, Config{InlineMax: 10, Now: clk.Now}) {
		t.Run(b.name, func(t *testing.T) {
			s := b.store
			f := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "old", ContextID: "c"}))
			must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("this is over ten bytes"), true))
			keep := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "new", ContextID: "c"}))
			if err := s.ExpireTask(ctxb, "old", time.Hour); err != nil {
				t.Fatal(err)
			}
			if n := must[int](t)(s.Sweep(ctxb)); n != 0 {
				t.Fatalf("swept %d before the time", n)
			}
			if _, err := s.Get(ctxb, f.ID); err != nil {
				t.Fatalf("before expiry: %v", err)
			}
			clk.Add(time.Hour)
			if _, err := s.Get(ctxb, f.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("expired artifact still visible: %v", err)
			}
			if l := must[[]Info](t)(s.ListByContext(ctxb, "c")); len(l) != 1 || l[0].ID != keep.ID {
				t.Fatalf("context lists %v", ids(l))
			}
			if n := must[int](t)(s.Sweep(ctxb)); n != 1 {
				t.Fatalf("swept %d, want 1", n)
			}
			if b.dir != "" && len(blobFiles(t, b.dir)) != 0 {
				t.Fatal("sweep left the blob")
			}
			if b.dir == "" && b.blobs.(*MemoryBlobs).Len() != 0 {
				t.Fatal("sweep left the blob")
			}
			if n := must[int](t)(s.Sweep(ctxb)); n != 0 {
				t.Fatalf("second sweep removed %d", n)
			}
			// ttl 0 (a conversation deleted by the admin): the artifact
			// goes now, its blob files with it.
			must[Info](t)(s.AppendChunk(ctxb, keep.ID, []byte("this is over ten bytes too"), true))
			if b.dir != "" && len(blobFiles(t, b.dir)) != 1 {
				t.Fatalf("the kept artifact's chunk is not a blob: %v", blobFiles(t, b.dir))
			}
			if err := s.ExpireTask(ctxb, "new", 0); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctxb, keep.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("ttl 0 should delete now: %v", err)
			}
			if b.dir != "" && len(blobFiles(t, b.dir)) != 0 {
				t.Fatalf("ttl 0 left the blob: %v", blobFiles(t, b.dir))
			}
			if b.dir == "" && b.blobs.(*MemoryBlobs).Len() != 0 {
				t.Fatal("ttl 0 left the blob")
			}
		})
	}
}

func TestBadgerReopen(t *testing.T) {
	dir := t.TempDir()
	db := openBadger(t, dir)
	s, err := Open(db, nil, Config{InlineMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	f := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c", Name: "a.txt"}))
	must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("short "), false))
	must[Info](t)(s.AppendChunk(ctxb, f.ID, bytes.Repeat([]byte("long"), 50), false))
	ds := must[Info](t)(s.Create(ctxb, Spec{Kind: KindDataset, TaskID: "t", ContextID: "c", Schema: salesSchema}))
	must[Info](t)(func() (Info, error) {
		i, _, err := s.AppendRows(ctxb, ds.ID, []Row{{"region": "n"}}, false)
		return i, err
	}())
	before := content(t, s, f.ID)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "artifact-blobs")); err != nil {
		t.Fatalf("default blob folder beside Badger: %v", err)
	}

	db = openBadger(t, dir)
	defer db.Close()
	s, err = Open(db, nil, Config{InlineMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	info := must[Info](t)(s.Get(ctxb, f.ID))
	if info.Name != "a.txt" || info.Parts != 2 || info.Status != StatusBuilding {
		t.Fatalf("after reopen %+v", info)
	}
	if after := content(t, s, f.ID); !bytes.Equal(before, after) {
		t.Fatal("content changed across reopen")
	}
	// Writing goes on where it stopped.
	must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("!"), true))
	if got := content(t, s, f.ID); !bytes.Equal(got, append(before, '!')) {
		t.Fatal("append after reopen")
	}
	if _, norm, err := s.AppendRows(ctxb, ds.ID, []Row{{"region": "s"}}, true); err != nil || len(norm) != 1 {
		t.Fatal(err)
	}
	if got := must[Info](t)(s.Get(ctxb, ds.ID)); got.Rows != 2 {
		t.Fatalf("rows after reopen %d", got.Rows)
	}
}

func TestCorruptRecordIsAnError(t *testing.T) {
	s := NewMemory(nil, Config{})
	f := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c"}))
	must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("x"), false))
	_ = s.kv.update(func(tx kvTxn) error { return tx.set(partKey(f.ID, 0), []byte{9, 9, 9}) })
	rc, _, err := s.Open(ctxb, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Read(make([]byte, 10)); !errors.Is(err, loop.ErrCorrupt) {
		t.Fatalf("corrupt part: %v", err)
	}
	_ = s.kv.update(func(tx kvTxn) error { return tx.set(metaKey(f.ID), []byte("{")) })
	if _, err := s.Get(ctxb, f.ID); !errors.Is(err, loop.ErrCorrupt) {
		t.Fatalf("corrupt meta: %v", err)
	}
}

func TestCancelledContext(t *testing.T) {
	s := NewMemory(nil, Config{})
	f := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c"}))
	must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("one"), false))
	must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("two"), false))
	ctx, cancel := context.WithCancel(ctxb)
	rc, _, err := s.Open(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := rc.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := rc.Read(buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v", err)
	}
	if _, err := s.AppendChunk(ctx, f.ID, []byte("x"), false); !errors.Is(err, context.Canceled) {
		t.Fatalf("append with cancelled ctx: %v", err)
	}
}

// A deletion stopped halfway (the process died after marking the record)
// is invisible at once and finished by the next Sweep, blobs included.
func TestSweepFinishesInterruptedDelete(t *testing.T) {
	for _, b := range backends(t, Config{InlineMax: 4}) {
		t.Run(b.name, func(t *testing.T) {
			s := b.store
			f := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c"}))
			must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("goes to a blob"), false))
			must[Info](t)(s.AppendChunk(ctxb, f.ID, []byte("ok"), false))
			// What delete's first transaction does, and nothing after it.
			err := s.kv.update(func(tx kvTxn) error {
				m, err := s.loadRaw(tx, f.ID)
				if err != nil {
					return err
				}
				m.Deleting = true
				if err := tx.set(delKey(f.ID), nil); err != nil {
					return err
				}
				return s.save(tx, m)
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctxb, f.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("half-deleted artifact visible: %v", err)
			}
			if l := must[[]Info](t)(s.ListByTask(ctxb, "t")); len(l) != 0 {
				t.Fatalf("half-deleted artifact listed")
			}
			if n := must[int](t)(s.Sweep(ctxb)); n != 1 {
				t.Fatalf("sweep finished %d deletions, want 1", n)
			}
			var left []string
			_ = s.kv.view(func(tx kvTxn) error {
				return tx.keys([]byte("art"), func(k []byte) error { left = append(left, string(k)); return nil })
			})
			if len(left) != 0 {
				t.Fatalf("keys left after the sweep: %q", left)
			}
			if b.dir != "" && len(blobFiles(t, b.dir)) != 0 {
				t.Fatal("blob left after the sweep")
			}
			if b.dir == "" && b.blobs.(*MemoryBlobs).Len() != 0 {
				t.Fatal("blob left after the sweep")
			}
		})
	}
}

func TestSweepEvery(t *testing.T) {
	s := NewMemory(nil, Config{})
	f := must[Info](t)(s.Create(ctxb, Spec{Kind: KindFile, TaskID: "t", ContextID: "c"}))
	if err := s.ExpireTask(ctxb, "t", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxb)
	done := make(chan error, 1)
	go func() { done <- s.SweepEvery(ctx, time.Millisecond) }()
	// Wait until the sweeper has removed the record (no time bound asserted).
	for {
		var gone bool
		_ = s.kv.view(func(tx kvTxn) error {
			_, err := tx.get(metaKey(f.ID), nil)
			gone = errors.Is(err, errNoKey)
			return nil
		})
		if gone {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("SweepEvery returned %v", err)
	}
	if err := s.SweepEvery(ctxb, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero interval: %v", err)
	}
}
