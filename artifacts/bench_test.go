package artifacts

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"io"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

type benchStore struct {
	name string
	s    *DB
}

// benchStores returns Badger-on-disk stores (blobs in a local folder):
// "badger" with the recommended value threshold of 1 KiB (badgerOptions),
// "badger-vt1MiB" with Badger v4's default of 1 MiB, and a memory store.
func benchStores(b *testing.B) []benchStore {
	b.Helper()
	out := []benchStore{}
	for _, v := range []struct {
		name string
		opts func(string) badger.Options
	}{
		{"badger", badgerOptions},
		{"badger-vt1MiB", func(dir string) badger.Options { return badgerOptions(dir).WithValueThreshold(1 << 20) }},
	} {
		dir := b.TempDir()
		db, err := badger.Open(v.opts(dir))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		s, err := Open(db, nil, Config{})
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, benchStore{v.name, s})
	}
	return append(out, benchStore{"memory", NewMemory(nil, Config{})})
}

func BenchmarkAppendFileChunk64KiB(b *testing.B) {
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			info := must[Info](b)(st.s.Create(ctxb, Spec{Kind: KindFile, Binary: true, TaskID: "t", ContextID: "c"}))
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := st.s.AppendChunk(ctxb, info.ID, chunk, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchRows(n int) []Row {
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = Row{"region": fmt.Sprintf("region-%d", i), "units": float64(i), "total": float64(i) * 1.25,
			"paid": i%2 == 0, "day": "2026-11-22", "extra": map[string]any{"i": float64(i)}}
	}
	return rows
}

func BenchmarkAppendDatasetRows100(b *testing.B) {
	rows := benchRows(100)
	var size int
	for _, r := range must[[]Row](b)(NormalizeRows(salesSchema, rows, 0)) {
		line, _ := AppendRowJSON(nil, salesSchema, r)
		size += len(line)
	}
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			info := must[Info](b)(st.s.Create(ctxb, Spec{Kind: KindDataset, Schema: salesSchema, TaskID: "t", ContextID: "c"}))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := st.s.AppendRows(ctxb, info.ID, rows, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkReadFile streams a 64 MiB file artifact (64 KiB chunks) with a
// 64 KiB buffer.
func BenchmarkReadFile64MiB(b *testing.B) {
	const total = 64 << 20
	chunk := make([]byte, 64<<10)
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			info := must[Info](b)(st.s.Create(ctxb, Spec{Kind: KindFile, Binary: true, TaskID: "t", ContextID: "c"}))
			for i := range total / len(chunk) {
				chunk[0] = byte(i)
				if _, err := st.s.AppendChunk(ctxb, info.ID, chunk, false); err != nil {
					b.Fatal(err)
				}
			}
			buf := make([]byte, 64<<10)
			b.SetBytes(total)
			b.ReportAllocs()
			for b.Loop() {
				rc, _, err := st.s.Open(ctxb, info.ID)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{rc}, buf)
				_ = rc.Close()
				if err != nil || n != total {
					b.Fatalf("read %d: %v", n, err)
				}
			}
		})
	}
}

// BenchmarkReadDatasetCSV streams 10,000 rows as CSV.
func BenchmarkReadDatasetCSV(b *testing.B) {
	for _, st := range benchStores(b) {
		b.Run(st.name, func(b *testing.B) {
			info := must[Info](b)(st.s.Create(ctxb, Spec{Kind: KindDataset, Schema: salesSchema, TaskID: "t", ContextID: "c"}))
			rows := benchRows(100)
			for range 100 {
				if _, _, err := st.s.AppendRows(ctxb, info.ID, rows, false); err != nil {
					b.Fatal(err)
				}
			}
			var size int64
			b.ReportAllocs()
			for b.Loop() {
				rc, _, _, err := Export(ctxb, st.s, info.ID, FormatCSV)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, rc)
				_ = rc.Close()
				if err != nil {
					b.Fatal(err)
				}
				size = n
			}
			b.SetBytes(size)
			b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkEventOverhead appends one chunk per op on the memory store (so
// storage costs least and the layer's cost shows): the plain store, the
// emitting Writer with an emit that drops events, and the Writer with an
// emit that encodes each event to JSON as the event log does.
func BenchmarkEventOverhead(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		chunk := make([]byte, size)
		for i := range chunk {
			chunk[i] = 'a' + byte(i%26)
		}
		modes := []struct {
			name string
			emit func(loop.Event)
		}{
			{"store", nil},
			{"writer", func(loop.Event) {}},
			{"writer+json", func(e loop.Event) {
				if _, err := loop.EncodeEvent(e); err != nil {
					b.Fatal(err)
				}
			}},
		}
		for _, m := range modes {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, m.name), func(b *testing.B) {
				s := NewMemory(nil, Config{})
				w := NewWriter(s, Scope{ContextID: "c", TaskID: "t"}, m.emit)
				info := must[Info](b)(w.Create(ctxb, Spec{Kind: KindFile}))
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if m.emit == nil {
						_, err = s.AppendChunk(ctxb, info.ID, chunk, false)
					} else {
						_, err = w.AppendChunk(ctxb, info.ID, chunk, false)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkChunkEvent measures the event of one chunk alone: building the
// file-write (base64 for binary) and encoding it to JSON as the event log
// does. This is what the emitting layer adds to each append.
func BenchmarkChunkEvent(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, binary := range []bool{false, true} {
			chunk := make([]byte, size)
			for i := range chunk {
				chunk[i] = 'a' + byte(i%26)
			}
			name := fmt.Sprintf("%dKiB/text", size>>10)
			if binary {
				name = fmt.Sprintf("%dKiB/binary", size>>10)
			}
			b.Run(name, func(b *testing.B) {
				w := NewWriter(nil, Scope{}, func(e loop.Event) {
					if _, err := loop.EncodeEvent(e); err != nil {
						b.Fatal(err)
					}
				})
				info := Info{ID: "art-1", Kind: KindFile, Binary: binary, ContextID: "c", TaskID: "t"}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					w.emitChunk(info, 1, chunk, false)
				}
			})
		}
	}
}
