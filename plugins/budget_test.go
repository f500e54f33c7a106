package plugins

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/pdk"
	"github.com/looopy-go/looopy/store"
)

// countingHandler counts the bytes of the messages logged through it.
type countingHandler struct {
	bytes atomic.Int64
	lines atomic.Int64
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.bytes.Add(int64(len(r.Message)))
	h.lines.Add(1)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

var floodFuncs = []string{"log", "emit", "kv_get", "kv_set", "kv_delete", "artifact_write", "http_request", "http_read", "http_close"}

func loadFlood(t *testing.T, cfg Config, edit func(m map[string]any)) *Registry {
	t.Helper()
	cfg.Policy.MaxCallTimeout = 5 * time.Minute // a hang guard on a loaded machine
	r := newRegistry(t, cfg)
	if _, err := r.Load(context.Background(), install(t, t.TempDir(), "flood", guestWasm(t, "flood"), func(m map[string]any) {
		caps(m)["hostFunctions"] = floodFuncs
		caps(m)["callTimeout"] = "5m"
		if edit != nil {
			edit(m)
		}
	})); err != nil {
		t.Fatal(err)
	}
	return r
}

// The log function: a call that logs 10 MB leaves at most its per-call
// budget in the host's log, and calls together at most the per-minute one.
func TestLogBudget(t *testing.T) {
	h := &countingHandler{}
	budgets := Budgets{LogBytesPerCall: 64 << 10, LogBytesPerMinute: 200 << 10}
	r := loadFlood(t, Config{Logger: slog.New(h), Policy: Policy{Budgets: budgets}}, nil)
	began := time.Now()
	before := h.bytes.Load()
	res := mustCall(t, r, "flood", `{"channel":"log","n":10000,"size":1000}`)
	if res.IsError || res.Content != "all written" {
		t.Fatalf("flood = %+v", res)
	}
	if got := h.bytes.Load() - before; got > budgets.LogBytesPerCall+1024 {
		t.Fatalf("one call logged %d bytes, budget %d", got, budgets.LogBytesPerCall)
	}
	for range 5 {
		mustCall(t, r, "flood", `{"channel":"log","n":1000,"size":1000}`)
	}
	minutes := int64(time.Since(began)/time.Minute) + 1
	if got := h.bytes.Load() - before; got > minutes*budgets.LogBytesPerMinute+8<<10 {
		t.Fatalf("six calls logged %d bytes in %d minute(s), budget %d a minute", got, minutes, budgets.LogBytesPerMinute)
	}
}

// Progress and events: past the per-call count or bytes, emit answers an
// error and nothing more reaches the task's events.
func TestEventBudget(t *testing.T) {
	r := loadFlood(t, Config{}, nil)
	var mu sync.Mutex
	var n int
	var bytes int
	env := &loop.ToolEnv{ContextID: "c", TaskID: "t", Emit: func(e loop.Event) {
		mu.Lock()
		defer mu.Unlock()
		n++
		if p, ok := e.(*loop.ToolProgress); ok {
			bytes += len(p.Message)
		}
		if th, ok := e.(*loop.ThoughtStream); ok {
			bytes += len(th.Content)
		}
	}}
	for _, c := range []struct {
		args    string
		maxN    int
		maxSize int
	}{
		{`{"channel":"progress","n":100000,"size":10}`, DefaultEventsPerCall, 0},
		{`{"channel":"event","n":100,"size":200000}`, 0, DefaultEventBytesPerCall},
	} {
		mu.Lock()
		n, bytes = 0, 0
		mu.Unlock()
		res, err := r.Call(context.Background(), call("flood", c.args), env)
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(res.Content, "over its budget") {
			t.Fatalf("%s: %+.300v", c.args, res)
		}
		mu.Lock()
		if c.maxN > 0 && n != c.maxN {
			t.Errorf("%s: %d events reached the task, want the budget %d", c.args, n, c.maxN)
		}
		if c.maxSize > 0 && bytes > c.maxSize {
			t.Errorf("%s: %d bytes reached the task, budget %d", c.args, bytes, c.maxSize)
		}
		mu.Unlock()
	}
}

// kv_set: per call (writes, bytes) and per plugin (keys, bytes, counted
// across calls and across a restart of the host on the same store).
func TestKVBudgetAndQuota(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	budgets := Budgets{KVQuotaBytes: 3 << 20, KVQuotaKeys: 1500}
	r := loadFlood(t, Config{KV: db, KVUsage: db, Policy: Policy{Budgets: budgets}}, nil)
	over := func(args, want string) {
		t.Helper()
		res := mustCall(t, r, "flood", args)
		if !res.IsError || !strings.Contains(res.Content, want) {
			t.Fatalf("%s = %+.300v; want %q", args, res, want)
		}
	}
	over(`{"channel":"kv","n":2000,"size":1}`, "too many key-value writes in one call")
	over(`{"channel":"kv","n":10,"size":1000000}`, "key-value space is full")
	// the 1000 keys written so far count; overwriting them is free
	if res := mustCall(t, r, "flood", `{"channel":"kv","n":1000,"size":1}`); res.IsError {
		t.Fatalf("overwriting = %+v", res)
	}
	over(`{"channel":"kv","n":600,"size":1,"start":1000}`, "holds too many keys")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()

	// A restart on the same store: the quota starts from what it holds.
	db, err = store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r = loadFlood(t, Config{KV: db, KVUsage: db, Policy: Policy{Budgets: budgets}}, nil)
	over(`{"channel":"kv","n":600,"size":1,"start":5000}`, "holds too many keys")
}

// describe: a plugin offering a thousand tools, or a tool whose schema
// is huge, is refused; the host's total is bounded too.
func TestToolDefinitionBudget(t *testing.T) {
	r := newRegistry(t, Config{Policy: Policy{Budgets: Budgets{MaxToolsTotal: 150}}})
	_, err := r.Load(context.Background(), install(t, t.TempDir(), "flood", guestWasm(t, "flood"), func(m map[string]any) {
		m["config"] = map[string]any{"tools": "1000"}
		caps(m)["hostFunctions"] = floodFuncs
		caps(m)["outputLimit"] = 16 << 20
	}))
	if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "1001 tools, over the limit of 128") {
		t.Fatalf("1000 tools: %v", err)
	}
	dir := t.TempDir()
	if _, err := r.Load(context.Background(), install(t, dir, "flood", guestWasm(t, "flood"), func(m map[string]any) {
		m["config"] = map[string]any{"tools": "100"}
		caps(m)["hostFunctions"] = floodFuncs
	})); err != nil {
		t.Fatal(err)
	}
	_, err = r.Load(context.Background(), install(t, dir, "flood2", guestWasm(t, "flood"), func(m map[string]any) {
		m["config"] = map[string]any{"tools": "0"}
		caps(m)["hostFunctions"] = floodFuncs
	}))
	if err == nil || !strings.Contains(err.Error(), "already offered") {
		t.Fatalf("conflicting tool: %v", err)
	}
}

// A schema may refer only inside itself: a $ref to a file or a URL is
// refused at load, and nothing of the file shows in the error.
func TestSchemaRefersOnlyInsideItself(t *testing.T) {
	r := newRegistry(t, Config{})
	for _, ref := range []string{"file:///etc/passwd", "http://127.0.0.1:1/schema.json", "/etc/passwd"} {
		_, err := r.Load(context.Background(), install(t, t.TempDir(), "flood", guestWasm(t, "flood"), func(m map[string]any) {
			m["config"] = map[string]any{"ref": ref}
			caps(m)["hostFunctions"] = floodFuncs
		}))
		if err == nil {
			t.Fatalf("$ref %s: loaded", ref)
		}
		if strings.Contains(err.Error(), "root:") {
			t.Fatalf("$ref %s: the file's content is in the error: %v", ref, err)
		}
	}
	if _, err := r.Load(context.Background(), install(t, t.TempDir(), "flood", guestWasm(t, "flood"), func(m map[string]any) {
		m["config"] = map[string]any{"ref": "#/definitions/none"}
		caps(m)["hostFunctions"] = floodFuncs
	})); err == nil {
		t.Fatal("a dangling inner $ref loaded")
	}
}

// storedArtifacts writes plugins' artifacts into a real artifact store (in
// memory) and counts what reached it.
type storedArtifacts struct {
	db     *artifacts.DB
	mu     sync.Mutex
	writes int
	bytes  int
}

func (s *storedArtifacts) WriteArtifact(ctx context.Context, scope ArtifactScope, w *pdk.ArtifactWrite) (string, error) {
	wr := artifacts.NewWriter(s.db, artifacts.Scope{ContextID: scope.ContextID, TaskID: scope.TaskID, Owner: "alice"}, scope.Emit)
	res, err := wr.Apply(ctx, artifacts.Op{Op: "create", Kind: artifacts.Kind(w.Type), Name: w.Name})
	if err != nil {
		return "", err
	}
	text := w.Text
	if _, err := wr.Apply(ctx, artifacts.Op{Op: "append", ArtifactID: res.ArtifactID, Text: &text, Last: true}); err != nil {
		return "", err
	}
	s.mu.Lock()
	s.writes++
	s.bytes += len(text)
	s.mu.Unlock()
	return res.ArtifactID, nil
}

// artifact_write: past the per-call count or bytes, the write answers an
// error naming the budget and nothing more reaches the artifact store.
func TestArtifactBudget(t *testing.T) {
	for _, c := range []struct {
		name     string
		budgets  Budgets
		args     string
		want     string
		maxN     int
		maxBytes int
	}{
		{"writes", Budgets{ArtifactWritesPerCall: 20}, `{"channel":"artifact","n":500,"size":10}`,
			"too many artifact writes in one call (limit 20)", 20, 0},
		{"bytes", Budgets{ArtifactBytesPerCall: 1 << 20}, `{"channel":"artifact","n":100,"size":65536}`,
			"artifact bytes written in one call (limit 1048576)", 0, 1 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			sa := &storedArtifacts{db: artifacts.NewMemory(artifacts.NewMemoryBlobs(), artifacts.Config{})}
			r := loadFlood(t, Config{Artifacts: sa, Policy: Policy{Budgets: c.budgets}}, nil)
			res := mustCall(t, r, "flood", c.args)
			if !res.IsError || !strings.Contains(res.Content, c.want) {
				t.Fatalf("flood = %+.300v; want %q", res, c.want)
			}
			sa.mu.Lock()
			writes, bytes := sa.writes, sa.bytes
			sa.mu.Unlock()
			if c.maxN > 0 && writes != c.maxN {
				t.Errorf("%d writes reached the store, want the budget %d", writes, c.maxN)
			}
			if c.maxBytes > 0 && (bytes > c.maxBytes || bytes == 0) {
				t.Errorf("%d bytes reached the store, budget %d", bytes, c.maxBytes)
			}
			// The next call has its own budget.
			if res := mustCall(t, r, "flood", `{"channel":"artifact","n":1,"size":10}`); res.IsError {
				t.Fatalf("a small call after: %+v", res)
			}
		})
	}
}

// Outbound HTTP: past the per-call requests, the request is refused before
// it leaves the host; past the per-call bytes, reading stops. Both name the
// budget, and the next call has its own.
func TestHTTPBudget(t *testing.T) {
	var hits atomic.Int64
	body := strings.Repeat("y", 256<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, body)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	budgets := Budgets{HTTPRequestsPerCall: 8, HTTPBytesPerCall: 1 << 20}
	eg := NewEgress(EgressConfig{})
	defer eg.Close()
	r := loadFlood(t, Config{Egress: eg,
		Policy: Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true, Budgets: budgets}},
		func(m map[string]any) {
			caps(m)["allowedHosts"] = []string{"127.0.0.1"}
			caps(m)["allowPrivateNetwork"] = true
		})

	res := mustCall(t, r, "flood", `{"channel":"http","n":100,"size":0,"url":"`+srv.URL+`/small"}`)
	if !res.IsError || !strings.Contains(res.Content, "too many requests in one call (limit 8)") {
		t.Fatalf("100 requests = %+.300v", res)
	}
	if got := hits.Load(); got != 8 {
		t.Fatalf("%d requests reached the server, budget 8", got)
	}

	res = mustCall(t, r, "flood", `{"channel":"http","n":8,"size":0,"url":"`+srv.URL+`/big"}`)
	if !res.IsError || !strings.Contains(res.Content, "response bytes read in one call (limit 1048576)") {
		t.Fatalf("2 MiB of responses = %+.300v", res)
	}
	if !strings.Contains(res.Content, "after 1048576 bytes read") {
		t.Fatalf("the guest read other than the budget: %.300s", res.Content)
	}

	hits.Store(0)
	if res := mustCall(t, r, "flood", `{"channel":"http","n":2,"size":0,"url":"`+srv.URL+`/small"}`); res.IsError || hits.Load() != 2 {
		t.Fatalf("a small call after: %+v (%d requests)", res, hits.Load())
	}
}
