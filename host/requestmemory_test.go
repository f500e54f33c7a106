package host_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestEventStreamsKeepTheirRequestValues: an event stream runs after its
// handler has returned, and the HTTP server reuses a request's memory for
// the next request. Each stream must keep serving the context and the
// filters it was opened with while other requests, with other paths and
// queries, pass through the server.
func TestEventStreamsKeepTheirRequestValues(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	bg := context.Background()

	const n = 6
	ctxIDs := make([]string, n)
	for i := range ctxIDs {
		ctxIDs[i] = send(t, c, bg, &a2a.SendMessageRequest{Message: userMsg(fmt.Sprintf("open %d", i))}).ContextID
	}
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()

	// One stream per context, filtered by kind: it replays the first turn
	// and then waits for the second.
	type result struct {
		frames []frame
	}
	results := make([]chan result, n)
	for i, id := range ctxIDs {
		resp := openSSE(t, ctx, h.URL()+"/events/"+id+"?kinds=task-created,task-complete", "", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("events of %s: status %d", id, resp.StatusCode)
		}
		results[i] = make(chan result, 1)
		go func(i int, body io.Reader) {
			var fs []frame
			completes := 0
			fs = readFrames(t, body, func(f frame) bool {
				if f.Event == "task-complete" {
					completes++
				}
				return completes == 2
			})
			results[i] <- result{frames: fs}
		}(i, resp.Body)
	}

	// Traffic with other paths, queries and headers, on many connections,
	// while the streams wait.
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				junk := strings.Repeat(fmt.Sprintf("z%dy%d", w, j), 8)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
					h.URL()+"/events/"+junk+"?kinds=content-delta&taskId="+junk, nil)
				req.Header.Set("Last-Event-ID", "1")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}(w)
	}
	wg.Wait()

	// A second turn in each context: each stream must show its own.
	second := make([]string, n)
	for i, id := range ctxIDs {
		m := userMsg("again")
		m.ContextID = id
		second[i] = string(send(t, c, bg, &a2a.SendMessageRequest{Message: m}).ID)
	}
	for i := range results {
		var r result
		select {
		case r = <-results[i]:
		case <-ctx.Done():
			t.Fatalf("stream of context %d did not see its two turns", i)
		}
		if len(r.frames) != 4 {
			t.Fatalf("stream %d: %d frames, want 4 (two turns' created and complete): %+v", i, len(r.frames), r.frames)
		}
		for _, f := range r.frames {
			if f.Event != "task-created" && f.Event != "task-complete" {
				t.Fatalf("stream %d: kind filter lost, got %q", i, f.Event)
			}
			if !strings.Contains(f.Data, ctxIDs[i]) {
				t.Fatalf("stream %d: frame of another context: %s", i, f.Data)
			}
		}
		if !strings.Contains(r.frames[3].Data, second[i]) {
			t.Fatalf("stream %d: last frame %s is not its second task %s", i, r.frames[3].Data, second[i])
		}
	}
}

// TestCompressedBodiesAreRefused: the body limit counts the bytes sent, so
// a compressed body that would inflate past it is refused unread, with a
// JSON-RPC error that says why.
func TestCompressedBodiesAreRefused(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Limits.MaxBodyBytes = 64 << 10
	h := startHost(t, cfg)
	// 64 MiB of JSON whitespace inside a valid request, about 64 KiB gzipped.
	const prefix, spaces, suffix = `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"`, 64 << 20, `}}`
	gz := bytes.NewBuffer(gzipSpaces(t, prefix, spaces, suffix))
	if gz.Len() > int(cfg.Limits.MaxBodyBytes) {
		t.Fatalf("compressed body %d bytes is over the limit: the test does not test", gz.Len())
	}
	// The bomb is what it says: it inflates to the whole request.
	zr, err := gzip.NewReader(bytes.NewReader(gz.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, len(prefix))
	if _, err := io.ReadFull(zr, head); err != nil || string(head) != prefix {
		t.Fatalf("the compressed body starts %q (%v)", head, err)
	}
	var tail bytes.Buffer
	n, err := io.Copy(io.MultiWriter(io.Discard, &lastBytes{buf: &tail, keep: len(suffix)}), zr)
	if err != nil || n != spaces+int64(len(suffix)) || tail.String() != suffix {
		t.Fatalf("the compressed body inflates to %d more bytes ending %q (%v), want %d", n, tail.String(), err, spaces+len(suffix))
	}
	for _, enc := range []string{"gzip", "deflate", "br", "gzip, identity"} {
		code, r := rpc(t, h.URL(), "", gz.String(), "Content-Encoding", enc)
		if r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, "uncompressed") {
			t.Fatalf("Content-Encoding %s: status %d, reply %s; want -32600 naming compression", enc, code, r.raw)
		}
	}
	// identity is fine.
	_, r := rpc(t, h.URL(), "", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`, "Content-Encoding", "identity")
	if r.Error == nil || r.Error.Code != -32001 {
		t.Fatalf("identity encoding: %s, want task not found", r.raw)
	}
}

// gzipSpaces gzips prefix, then n spaces, then suffix, compressing the
// spaces only once per block: deflate blocks that start with a fresh
// compressor refer to nothing before them, so one compressed block of
// spaces can stand for each block of the run (the trailer's checksum and
// size are of the whole). Compressing 64 MiB outright costs seconds of
// CPU under the race detector.
func gzipSpaces(t *testing.T, prefix string, n int, suffix string) []byte {
	t.Helper()
	// Under flate's block size (16384 matches of 258 bytes), so a block of
	// the run is one deflate block, as when the whole is compressed at once.
	const block = 4 << 20
	part := func(data []byte, final bool) []byte {
		var b bytes.Buffer
		fw, err := flate.NewWriter(&b, flate.BestCompression)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fw.Write(data)
		if final {
			err = fw.Close()
		} else {
			err = fw.Flush() // ends byte-aligned, not the last block
		}
		if err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	run := bytes.Repeat([]byte(" "), block)
	out := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff} // gzip header: deflate, no name, no time
	out = append(out, part([]byte(prefix), false)...)
	crc := crc32.Update(0, crc32.IEEETable, []byte(prefix))
	whole := part(run, false)
	left := n
	for ; left > block; left -= block {
		out = append(out, whole...)
		crc = crc32.Update(crc, crc32.IEEETable, run)
	}
	last := append(run[:left:left], suffix...)
	out = append(out, part(last, true)...)
	crc = crc32.Update(crc, crc32.IEEETable, last)
	out = binary.LittleEndian.AppendUint32(out, crc)
	return binary.LittleEndian.AppendUint32(out, uint32(len(prefix)+n+len(suffix)))
}

// lastBytes keeps the last keep bytes written to it in buf.
type lastBytes struct {
	buf  *bytes.Buffer
	keep int
}

func (l *lastBytes) Write(p []byte) (int, error) {
	l.buf.Write(p)
	if over := l.buf.Len() - l.keep; over > 0 {
		l.buf.Next(over)
	}
	return len(p), nil
}
