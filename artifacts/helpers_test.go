package artifacts

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// badgerOptions are the options the artifact store is measured and tested
// with: values over 1 KiB live in Badger's value log (as Badger's own
// earlier versions defaulted to), so 64 KiB chunks are not copied through
// the LSM tree's compressed blocks on every read.
func badgerOptions(dir string) badger.Options {
	return badger.DefaultOptions(dir).WithLogger(nil).WithMemTableSize(16 << 20).WithBlockCacheSize(8 << 20).WithValueThreshold(1 << 10)
}

// openBadger opens a real Badger database on disk.
func openBadger(t testing.TB, dir string) *badger.DB {
	t.Helper()
	db, err := badger.Open(badgerOptions(dir))
	if err != nil {
		t.Fatalf("open badger: %v", err)
	}
	return db
}

// backend is a store under test and what it is made of.
type backend struct {
	name  string
	store *DB
	blobs BlobStore
	dir   string // blob folder, for local blobs
}

// backends returns a fresh Badger-on-disk store (local blob folder) and a
// memory store, both with cfg.
func backends(t *testing.T, cfg Config) []backend {
	t.Helper()
	dir := t.TempDir()
	db := openBadger(t, dir+"/badger")
	t.Cleanup(func() { _ = db.Close() })
	blobs, err := OpenLocal(LocalConfig{Dir: dir + "/blobs"})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := Open(db, blobs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mb := NewMemoryBlobs()
	return []backend{
		{name: "badger", store: bs, blobs: blobs, dir: dir + "/blobs"},
		{name: "memory", store: NewMemory(mb, cfg), blobs: mb},
	}
}

func readAll(t testing.TB, rc io.ReadCloser) []byte {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return b
}

func content(t testing.TB, s Store, id string) []byte {
	t.Helper()
	rc, _, err := s.Open(context.Background(), id)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	return readAll(t, rc)
}

// recorder captures events as a client would receive them: each one is
// encoded to JSON and decoded again, so the rebuild works from the wire
// form alone.
type recorder struct {
	mu     sync.Mutex
	events []loop.Event
	t      testing.TB
}

func (r *recorder) emit(e loop.Event) {
	b, err := loop.EncodeEvent(e)
	if err != nil {
		r.t.Errorf("encode event: %v", err)
		return
	}
	d, err := loop.DecodeEvent(b)
	if err != nil {
		r.t.Errorf("decode event: %v", err)
		return
	}
	r.mu.Lock()
	r.events = append(r.events, d)
	r.mu.Unlock()
}

func (r *recorder) all() []loop.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]loop.Event(nil), r.events...)
}

// rebuilt is an artifact as a client rebuilds it from events alone.
type rebuilt struct {
	kind     Kind
	name     string
	mimeType string
	chunks   [][]byte
	data     map[string]any
	version  int
	schema   *loop.DatasetSchema
	rows     []Row
	complete bool
	nextIdx  int
}

// bytes is the rebuilt content in the form Store.Open streams it.
func (r *rebuilt) bytes(t testing.TB) []byte {
	t.Helper()
	switch r.kind {
	case KindFile:
		return bytes.Join(r.chunks, nil)
	case KindData:
		b, err := json.Marshal(r.data)
		if err != nil {
			t.Fatal(err)
		}
		return b
	default:
		var out []byte
		for _, row := range r.rows {
			var err error
			if out, err = AppendRowJSON(out, r.schema, row); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
}

// rebuild follows the client rules of Writer's documentation: an index-0
// event starts an artifact over; every other index must follow the last.
func rebuild(t testing.TB, events []loop.Event) map[string]*rebuilt {
	t.Helper()
	out := map[string]*rebuilt{}
	get := func(id string, k Kind) *rebuilt {
		r := out[id]
		if r == nil {
			r = &rebuilt{kind: k}
			out[id] = r
		}
		return r
	}
	for _, e := range events {
		switch ev := e.(type) {
		case *loop.FileWrite:
			r := get(ev.ArtifactID, KindFile)
			if r.complete {
				t.Fatalf("file-write after the last chunk of %s", ev.ArtifactID)
			}
			if ev.Index == 0 {
				r.chunks, r.nextIdx, r.name, r.mimeType = nil, 0, ev.Name, ev.MimeType
			}
			if ev.Index != r.nextIdx {
				t.Fatalf("file-write of %s: index %d, want %d", ev.ArtifactID, ev.Index, r.nextIdx)
			}
			data := []byte(ev.Data)
			if ev.Encoding == "base64" {
				var err error
				if data, err = base64.StdEncoding.DecodeString(ev.Data); err != nil {
					t.Fatal(err)
				}
			}
			r.chunks = append(r.chunks, data)
			r.nextIdx++
			r.complete = ev.Complete
		case *loop.DataWrite:
			r := get(ev.ArtifactID, KindData)
			r.data, r.version, r.name = ev.Data, ev.Version, ev.Name
		case *loop.DatasetWrite:
			r := get(ev.ArtifactID, KindDataset)
			if r.complete {
				t.Fatalf("dataset-write after the last batch of %s", ev.ArtifactID)
			}
			if ev.Index == 0 {
				if ev.Schema == nil {
					t.Fatalf("dataset-write index 0 of %s without schema", ev.ArtifactID)
				}
				r.rows, r.nextIdx, r.schema, r.name = nil, 0, ev.Schema, ev.Name
			}
			if ev.Index != r.nextIdx {
				t.Fatalf("dataset-write of %s: index %d, want %d", ev.ArtifactID, ev.Index, r.nextIdx)
			}
			r.rows = append(r.rows, ev.Rows...)
			r.nextIdx++
			r.complete = ev.Complete
		}
	}
	return out
}

// clock is a settable clock for expiry tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func ids(infos []Info) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.ID
	}
	sort.Strings(out)
	return out
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
