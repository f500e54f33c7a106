package artifacts

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// The decoders of stored records and plugin ops must never panic, and
// what they accept must survive a round trip.

func FuzzDecodeMeta(f *testing.F) {
	good, _ := encodeMeta(metaRecord{Info: Info{ID: "art-1", Kind: KindDataset, TaskID: "t", ContextID: "c", Status: StatusBuilding,
		Schema: salesSchema, Parts: 2, Rows: 10, CreatedAt: time.Unix(1, 0).UTC()}})
	f.Add(good)
	f.Add([]byte(`{"v":1,"id":"a","kind":"file","status":"complete","parts":-1}`))
	f.Add([]byte(`{"v":1,"id":"a","kind":"data","status":"building","parts":3}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		again, err := encodeMeta(m)
		if err != nil {
			t.Fatalf("accepted record does not encode: %v", err)
		}
		m2, err := decodeMeta(again)
		if err != nil {
			t.Fatalf("re-encoded record refused: %v", err)
		}
		if m2.ID != m.ID || m2.Kind != m.Kind || m2.Parts != m.Parts || m2.Status != m.Status {
			t.Fatalf("round trip changed the record: %+v vs %+v", m, m2)
		}
	})
}

func FuzzDecodePart(f *testing.F) {
	f.Add(encodePart(part{Inline: []byte("hello")}))
	f.Add(encodePart(part{Inline: nil, Rows: 3}))
	f.Add(encodePart(part{Blob: "art-1/00ff", Size: 1 << 30, Rows: 100}))
	f.Add([]byte{1, 1, 0, 5, 3, 'a', '/', 'b'})
	f.Add([]byte{1, 1, 0, 5, 4, '.', '.', '/', 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePart(b)
		if err != nil {
			return
		}
		if p.Blob != "" {
			if strings.Contains(p.Blob, "..") && checkBlobKey(p.Blob) == nil {
				for _, seg := range strings.Split(p.Blob, "/") {
					if seg == ".." || seg == "." {
						t.Fatalf("accepted a blob key that climbs: %q", p.Blob)
					}
				}
			}
		}
		p2, err := decodePart(encodePart(p))
		if err != nil {
			t.Fatalf("re-encoded part refused: %v", err)
		}
		if !bytes.Equal(p2.Inline, p.Inline) || p2.Blob != p.Blob || p2.Size != p.Size || p2.Rows != p.Rows {
			t.Fatalf("round trip changed the part: %+v vs %+v", p, p2)
		}
	})
}

func FuzzDecodeOp(f *testing.F) {
	f.Add([]byte(`{"op":"create","kind":"dataset","schema":{"columns":[{"name":"a","type":"integer"}]}}`))
	f.Add([]byte(`{"op":"append","artifactId":"art-1","rows":[{"a":1}],"last":true}`))
	f.Add([]byte(`{"op":"append","artifactId":"art-1","csv":"a\n1\n"}`))
	f.Add([]byte(`{"op":"write","artifactId":"x","data":{"k":[1,2]}}`))
	f.Add([]byte(`{"op":"replace","artifactId":"x","index":-1,"text":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		op, err := DecodeOp(b)
		if err != nil {
			return
		}
		// Whatever decodes must apply without panicking: an error is fine.
		s := NewMemory(nil, Config{MaxPartSize: 1 << 16})
		w := NewWriter(s, Scope{ContextID: "c", TaskID: "t"}, func(e loop.Event) {
			if _, err := loop.EncodeEvent(e); err != nil {
				t.Fatalf("event does not encode: %v", err)
			}
		})
		if op.Op != "create" {
			info, err := w.Create(ctxb, Spec{ID: "x", Kind: KindDataset, Schema: &loop.DatasetSchema{Columns: []loop.DatasetColumn{{Name: "a", Type: TypeJSON}}}})
			if err != nil {
				t.Fatal(err)
			}
			op.ArtifactID = info.ID
		}
		_, _ = w.Apply(ctxb, op)
		_, _ = json.Marshal(op)
	})
}

func FuzzRowsFromCSV(f *testing.F) {
	f.Add("region,units,total,paid,day,extra\nn,1,2.5,true,2026-01-01,{}\n")
	f.Add("units\n1.5\n")
	f.Add("\"a\n")
	f.Fuzz(func(t *testing.T, text string) {
		rows, err := RowsFromCSV(salesSchema, strings.NewReader(text))
		if err != nil {
			return
		}
		norm, err := NormalizeRows(salesSchema, rows, 0)
		if err != nil {
			return // types convert, values may still be refused (a bad date)
		}
		for _, r := range norm {
			line, err := AppendRowJSON(nil, salesSchema, r)
			if err != nil {
				t.Fatalf("normalized row does not encode: %v", err)
			}
			// The line is what encoding/json makes of the row, columns in order.
			var want []byte
			want = append(want, '{')
			for i, c := range salesSchema.Columns {
				if i > 0 {
					want = append(want, ',')
				}
				k, _ := json.Marshal(c.Name)
				v, _ := json.Marshal(r[c.Name])
				want = append(append(append(want, k...), ':'), v...)
			}
			want = append(want, '}', '\n')
			if !bytes.Equal(line, want) {
				t.Fatalf("row line %s, encoding/json makes %s", line, want)
			}
		}
	})
}
