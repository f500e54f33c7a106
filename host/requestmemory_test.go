package host_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
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
	var raw bytes.Buffer
	raw.WriteString(`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"`)
	raw.Write(bytes.Repeat([]byte(" "), 64<<20))
	raw.WriteString(`}}`)
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	_, _ = zw.Write(raw.Bytes())
	_ = zw.Close()
	if gz.Len() > int(cfg.Limits.MaxBodyBytes) {
		t.Fatalf("compressed body %d bytes is over the limit: the test does not test", gz.Len())
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
