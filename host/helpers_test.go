package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/looopy-go/looopy/host"
)

// testHost is a host running on a loopback port with Badger in a temp dir.
type testHost struct {
	*host.Main
	dir string
}

// wasmCache is shared by the tests' hosts, so each compiles a plugin once.
var wasmCache = filepath.Join(os.TempDir(), "looopy-host-test-wasm-cache")

// baseConfig serves the example plugins with the scripted model (its demo
// script) from a fresh Badger in dir.
func baseConfig(dir string) host.Config {
	return host.Config{
		Addr:      "127.0.0.1:0",
		DataDir:   dir,
		PluginDir: "../examples/plugins",
		Plugins: host.PluginsConfig{
			Only:     []string{"scripted-model", "calculator"},
			CacheDir: wasmCache,
		},
		Limits: host.LimitsConfig{
			Heartbeat:     host.Duration(100 * time.Millisecond),
			ShutdownGrace: host.Duration(2 * time.Second),
		},
	}
}

// warmCompileCache loads every example plugin once, before the tests start
// their hosts side by side, so that the compiled code of each is in
// wasmCache. On a clean machine the cache is empty: each test's host then
// compiled the same modules at the same moment as the others (a Go guest
// takes seconds; under the race detector on a loaded machine several
// minutes, past plugins.DefaultCompileTimeout, and a plugin refused for
// it was missing from the test's host). Its compile timeout is long: this
// compile is the one that must finish. What fails to load here is loaded
// (and reported) by the tests that use it.
func warmCompileCache() {
	dir, err := os.MkdirTemp("", "looopy-host-warm-")
	if err != nil {
		return
	}
	defer os.RemoveAll(dir)
	cfg := baseConfig(dir)
	cfg.Plugins.Only, cfg.Plugins.NoWatch = nil, true
	cfg.Plugins.CompileTimeout = host.Duration(30 * time.Minute)
	m := host.NewMain()
	m.Config = cfg
	m.Stdout = io.Discard
	if err := m.Start(context.Background()); err == nil {
		_ = m.Close()
	}
}

func startHost(t testing.TB, cfg host.Config) *testHost {
	t.Helper()
	m := host.NewMain()
	m.Config = cfg
	m.Stdout = io.Discard
	if os.Getenv("LOOOPY_TEST_LOG") != "" {
		m.Stdout = os.Stderr
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("run host: %v", err)
	}
	th := &testHost{Main: m, dir: cfg.DataDir}
	t.Cleanup(func() { _ = m.Close() })
	return th
}

// headerTransport adds headers to every request.
type headerTransport struct {
	base   http.RoundTripper
	header map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

func httpClient(token string) *http.Client {
	hdr := map[string]string{}
	if token != "" {
		hdr["Authorization"] = "Bearer " + token
	}
	return &http.Client{Transport: headerTransport{base: http.DefaultTransport, header: hdr}, Timeout: 30 * time.Second}
}

// client10 is the official a2a-go v2 client, from the agent card.
func client10(t testing.TB, base, token string) *a2aclient.Client {
	t.Helper()
	ctx := context.Background()
	card, err := agentcard.NewResolver(httpClient(token)).Resolve(ctx, base)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(httpClient(token)))
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

func userMsg(text string) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
}

func artifactText(t *a2a.Task) string {
	var sb strings.Builder
	for _, a := range t.Artifacts {
		for _, p := range a.Parts {
			sb.WriteString(p.Text())
		}
	}
	return sb.String()
}

// send sends a message with SendMessage and returns the task.
func send(t testing.TB, c *a2aclient.Client, ctx context.Context, req *a2a.SendMessageRequest) *a2a.Task {
	t.Helper()
	r, err := c.SendMessage(ctx, req)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	task, ok := r.(*a2a.Task)
	if !ok {
		t.Fatalf("send returned %T, want a task", r)
	}
	return task
}

// frame is one Server-Sent Events frame as read off the wire.
type frame struct {
	ID    string
	Event string
	Data  string
}

// readFrames reads frames from an SSE body until EOF or until stop says so.
func readFrames(t testing.TB, body io.Reader, stop func(frame) bool) []frame {
	t.Helper()
	var out []frame
	var cur frame
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Data != "" {
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out
				}
			}
			cur = frame{}
		case strings.HasPrefix(line, "id: "):
			cur.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.Event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.Data += line[6:]
		}
	}
	return out
}

// rpc posts a raw JSON-RPC body and decodes the response.
func rpc(t testing.TB, url, token, body string, hdr ...string) (int, rpcReply) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r rpcReply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("response %q is not JSON: %v", b, err)
	}
	r.raw = string(b)
	return resp.StatusCode, r
}

type rpcReply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	raw string
}

// openSSE posts (body != "") or gets url and returns the open response.
func openSSE(t testing.TB, ctx context.Context, url, token, body string, hdr ...string) *http.Response {
	t.Helper()
	method := http.MethodGet
	var rd io.Reader
	if body != "" {
		method, rd = http.MethodPost, strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, url, rd)
	req.Header.Set("Accept", "text/event-stream")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
