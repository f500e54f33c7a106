package artifacts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/looopy-go/looopy/loop"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// CanonicalData returns data in the form a data artifact keeps it: the
// object after a JSON round trip (numbers as float64), and its JSON bytes.
// A client that decodes a data-write event's object and marshals it with
// encoding/json gets these bytes.
func CanonicalData(data map[string]any) (map[string]any, []byte, error) {
	if data == nil {
		return nil, nil, invalid("data must be a JSON object")
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, nil, invalid("data is not JSON: %v", err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, nil, invalid("data is not a JSON object: %v", err)
	}
	if b, err = json.Marshal(out); err != nil {
		return nil, nil, invalid("data is not JSON: %v", err)
	}
	return out, b, nil
}

// Open implements Store.
func (d *DB) Open(ctx context.Context, id string) (io.ReadCloser, Info, error) {
	info, err := d.Get(ctx, id)
	if err != nil {
		return nil, Info{}, fmt.Errorf("open artifact: %w", err)
	}
	if info.Kind == KindData && info.Parts == 0 {
		return io.NopCloser(strings.NewReader(emptyObject)), info, nil
	}
	return &partsReader{ctx: ctx, d: d, id: id, n: info.Parts, whole: info.Status == StatusComplete}, info, nil
}

// OpenPart implements Store.
func (d *DB) OpenPart(ctx context.Context, id string, index int) (io.ReadCloser, error) {
	info, err := d.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("open part %d: %w", index, err)
	}
	if index < 0 || index >= info.Parts {
		if info.Kind == KindData && index == 0 {
			return io.NopCloser(strings.NewReader(emptyObject)), nil
		}
		return nil, fmt.Errorf("open part %d of artifact %q: %w (it has %d)", index, id, ErrPartRange, info.Parts)
	}
	rc, _, err := d.openPart(ctx, id, index, nil)
	if err != nil {
		return nil, fmt.Errorf("open part %d of artifact %q: %w", index, id, err)
	}
	return rc, nil
}

// openPart returns part n: inline bytes (read into buf) or the blob.
// The returned buffer may be passed again to reuse its memory once the
// previous reader is done.
func (d *DB) openPart(ctx context.Context, id string, n int, buf []byte) (io.ReadCloser, []byte, error) {
	key := partKey(id, n)
	var p part
	err := d.kv.view(func(tx kvTxn) error {
		b, err := tx.get(key, buf)
		if err == nil {
			buf = b
		}
		if errors.Is(err, errNoKey) {
			return fmt.Errorf("part %d is gone (artifact deleted or expired while read): %w", n, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if p, err = decodePart(b); err != nil {
			return &loop.CorruptError{Key: string(key), Err: err}
		}
		return nil
	})
	if err != nil {
		return nil, buf, err
	}
	if p.Blob == "" {
		return io.NopCloser(bytes.NewReader(p.Inline)), buf, nil
	}
	rc, err := d.blobs.Get(ctx, p.Blob)
	return rc, buf, err
}

// partsReader streams parts 0..n-1 one after the other, holding at most
// one inline part (at most Config.InlineMax bytes) in memory.
//
// It keeps the ctx of Open: the stream is that call's result, and
// cancelling the ctx is how its owner stops it (as with an HTTP body).
//
// An artifact that was not complete when opened (whole false) may be
// ended failed, and emptied, or deleted while it is read: a part gone then
// ends the stream where it is, as the artifact's end would have (its
// status said what is read is not whole). A part gone from a complete
// artifact is an error: a reader must not take a cut copy for the whole.
type partsReader struct {
	ctx     context.Context
	d       *DB
	id      string
	n, next int
	cur     io.ReadCloser
	buf     []byte
	closed  bool
	whole   bool
}

func (r *partsReader) Read(p []byte) (int, error) {
	for {
		if r.closed {
			return 0, errors.New("read of a closed artifact reader")
		}
		if r.cur == nil {
			if r.next >= r.n {
				return 0, io.EOF
			}
			if err := r.ctx.Err(); err != nil {
				return 0, err
			}
			rc, buf, err := r.d.openPart(r.ctx, r.id, r.next, r.buf)
			if errors.Is(err, ErrNotFound) && !r.whole {
				r.next = r.n
				return 0, io.EOF
			}
			if err != nil {
				return 0, fmt.Errorf("read artifact %q: %w", r.id, err)
			}
			r.cur, r.buf = rc, buf
			r.next++
		}
		n, err := r.cur.Read(p)
		if errors.Is(err, io.EOF) {
			_ = r.cur.Close()
			r.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (r *partsReader) Close() error {
	r.closed = true
	if r.cur != nil {
		err := r.cur.Close()
		r.cur = nil
		return err
	}
	return nil
}

// Format is how Export renders a dataset.
type Format string

// Export formats.
const (
	FormatNative Format = ""      // what Open streams (file bytes, data JSON, dataset JSON lines)
	FormatJSONL  Format = "jsonl" // datasets: one JSON object per line
	FormatCSV    Format = "csv"   // datasets: a header line, then one record per row
)

// ParseFormat reads a format name ("", "jsonl", "ndjson", "csv").
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "":
		return FormatNative, nil
	case "jsonl", "ndjson", "json-lines":
		return FormatJSONL, nil
	case "csv":
		return FormatCSV, nil
	}
	return "", invalid("unknown format %q (want csv or jsonl)", s)
}

// Export streams an artifact for download and returns the MIME type to
// send with it. This is what GET /artifacts/{id} serves: a file with its
// own MIME type, data as application/json, a dataset as JSON lines
// (application/x-ndjson) or, with FormatCSV, as text/csv. CSV and JSON
// lines apply to datasets only. The stream never holds more than one part.
func Export(ctx context.Context, s Reader, id string, f Format) (io.ReadCloser, string, Info, error) {
	rc, info, err := s.Open(ctx, id)
	if err != nil {
		return nil, "", Info{}, err
	}
	if f != FormatNative && info.Kind != KindDataset {
		_ = rc.Close()
		// The client's error (a format that applies to datasets only):
		// ErrInvalid, which the host answers 400.
		return nil, "", Info{}, fmt.Errorf("export artifact %q as %s: %w: %w: it is a %s; csv and jsonl apply to datasets only",
			id, f, ErrInvalid, ErrWrongKind, info.Kind)
	}
	switch f {
	case FormatCSV:
		return newCSVReader(rc, info.Schema), "text/csv; charset=utf-8", info, nil
	case FormatNative, FormatJSONL:
		return rc, info.ContentType(), info, nil
	}
	_ = rc.Close()
	return nil, "", Info{}, fmt.Errorf("export artifact %q: %w", id, invalid("unknown format %q", f))
}

// csvReader turns a dataset's JSON lines into CSV as it is read.
type csvReader struct {
	src    io.ReadCloser
	lines  *bufio.Reader
	schema *loop.DatasetSchema
	out    bytes.Buffer
	w      *csv.Writer
	rec    []string
	row    map[string]json.RawMessage
	header bool
	err    error
}

func newCSVReader(src io.ReadCloser, schema *loop.DatasetSchema) *csvReader {
	c := &csvReader{src: src, lines: bufio.NewReaderSize(src, 64<<10), schema: schema, rec: make([]string, len(schema.Columns)), row: map[string]json.RawMessage{}}
	c.w = csv.NewWriter(&c.out)
	return c
}

func (c *csvReader) Read(p []byte) (int, error) {
	for c.out.Len() == 0 {
		if c.err != nil {
			return 0, c.err
		}
		c.fill()
	}
	return c.out.Read(p)
}

// fill converts the next line (or the header) into c.out.
func (c *csvReader) fill() {
	if !c.header {
		c.header = true
		c.err = csvHeader(c.w, c.schema)
		c.w.Flush()
		return
	}
	line, err := c.lines.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A row longer than the buffer: gather it whole.
		long := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = c.lines.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if len(bytes.TrimSpace(line)) > 0 {
		if cerr := csvRecord(c.schema, line, c.rec, c.row); cerr != nil {
			c.err = cerr
			return
		}
		if werr := c.w.Write(c.rec); werr != nil {
			c.err = werr
			return
		}
		c.w.Flush()
	}
	if err != nil {
		c.err = err // io.EOF at the end
	}
}

func (c *csvReader) Close() error { return c.src.Close() }
