package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Attacks from web browsers on the real binary with its defaults (auth
// off): a page of another site driving the host (cross-site request
// forgery), a page reaching it through DNS rebinding, and an artifact
// written by a plugin opened on the host's origin. Chromium is a real
// headless browser; nothing here depends on speed (guards only fail fast).

// webScript: "art MIME CONTENT" has the webart plugin store CONTENT as an
// artifact of type MIME and answers its id.
const webScript = `{"rules":[{"name":"art","match":"(?s)^art (\\S+) (.+)$","steps":[
  {"toolCall":{"name":"web_artifact","arguments":{"mime":"$1","content":"$2"}}},
  {"text":"artifact {{lastToolResult}}"}]}],
 "default":{"steps":[{"text":"served"}]}}`

// startWebHost runs the binary with the defaults of a local host (auth off,
// loopback) and the webart plugin.
func startWebHost(t *testing.T) *sandboxHost {
	t.Helper()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	model, err := os.ReadFile("../../examples/plugins/scripted-model/scripted-model.wasm")
	if err != nil {
		t.Fatalf("the scripted model (run make plugins-go): %v", err)
	}
	installPlugin(t, pluginDir, "scripted-model", "model", model,
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}}, map[string]any{"script": webScript})
	art := buildGuest(t, filepath.Join(top, "webart.wasm"), "../../plugins/testdata/guests/webart")
	installPlugin(t, pluginDir, "webart", "tool", art, map[string]any{"hostFunctions": []string{"artifact_write", "result_read"}}, nil)
	return startSandboxHost(t, top, pluginDir, nil)
}

// webReq sends a request with the given headers ("Host" sets the Host
// header) and returns the status and body.
func webReq(t *testing.T, method, url, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	// A stream answered 200 is read no further than its first bytes.
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b), resp.Header
}

// taskCount is how many tasks ListTasks lists (auth off: every task).
func taskCount(t *testing.T, h *sandboxHost) int {
	t.Helper()
	a := h.rpc(t, "", "ListTasks", map[string]any{"pageSize": 100})
	if a.Error != nil {
		t.Fatalf("ListTasks: %d %s", a.Error.Code, a.Error.Message)
	}
	var r struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if err := json.Unmarshal(a.Result, &r); err != nil {
		t.Fatalf("ListTasks: %s: %v", a.Result, err)
	}
	return len(r.Tasks)
}

const (
	sendBody = `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"forged","role":"ROLE_USER","parts":[{"text":"forged turn"}]}}}`
	listBody = `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`
	mcpInit  = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
)

// TestBlackBoxForeignOriginsRefused: with auth off (the default) every
// route refuses a request naming another site in its Host (DNS rebinding)
// or in its Origin (a page of another site), and the JSON-RPC and MCP
// routes refuse a body not sent as application/json (what a page of
// another site can send without a preflight). Nothing of a refused request
// runs. The host's own origin, requests without Origin (the official A2A
// clients of both versions) and the loopback names keep working.
func TestBlackBoxForeignOriginsRefused(t *testing.T) {
	t.Parallel()
	h := startWebHost(t)
	port := strings.TrimPrefix(h.base, "http://127.0.0.1:")
	evil := "attacker.example:" + port
	before := taskCount(t, h)

	asJSON := []string{"Content-Type", "application/json"}
	with := func(hdr ...string) []string { return append(append([]string{}, asJSON...), hdr...) }
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		want                     int
	}{
		// DNS rebinding: the page's own origin, the host reached by the attacker's name.
		{"rebound SendMessage", "POST", "/", sendBody, with("Host", evil, "Origin", "http://"+evil), 403},
		{"rebound ListTasks 0.3", "POST", "/a2a/v0.3", `{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{}}`, with("Host", evil), 403},
		{"rebound page", "GET", "/", "", []string{"Host", evil}, 403},
		{"rebound page file", "GET", "/ui/app.js", "", []string{"Host", evil}, 403},
		{"rebound events", "GET", "/events/ctx-1", "", []string{"Host", evil}, 403},
		{"rebound artifact", "GET", "/artifacts/art-1", "", []string{"Host", evil}, 403},
		{"rebound card", "GET", "/.well-known/agent-card.json", "", []string{"Host", evil}, 403},
		{"rebound metrics", "GET", "/metrics", "", []string{"Host", evil}, 403},
		{"rebound admin", "GET", "/admin/plugins", "", []string{"Host", evil, "Authorization", "Bearer admin-token"}, 403},
		{"rebound mcp", "POST", "/mcp", mcpInit, with("Host", evil, "Origin", "http://"+evil, "Accept", "application/json, text/event-stream"), 403},
		// Cross-site request forgery: the host's name, another site's page.
		{"foreign origin SendMessage", "POST", "/", sendBody, with("Origin", "http://attacker.example"), 403},
		{"foreign origin v1", "POST", "/a2a/v1", sendBody, with("Origin", "https://attacker.example"), 403},
		{"null origin", "POST", "/", sendBody, with("Origin", "null"), 403},
		{"other port's origin", "POST", "/", sendBody, with("Origin", "http://127.0.0.1:1"), 403},
		{"foreign origin events", "GET", "/events/ctx-1", "", []string{"Origin", "http://attacker.example"}, 403},
		{"foreign origin mcp", "POST", "/mcp", mcpInit, with("Origin", "http://attacker.example", "Accept", "application/json, text/event-stream"), 403},
		{"foreign origin admin", "POST", "/admin/plugins/webart/load", "", []string{"Origin", "http://attacker.example", "Authorization", "Bearer admin-token"}, 403},
		// Bodies a page of another site sends without a preflight.
		{"text/plain", "POST", "/", sendBody, []string{"Content-Type", "text/plain"}, 415},
		{"form", "POST", "/a2a/v1", sendBody, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"multipart", "POST", "/a2a/v0.3", "--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n" + sendBody + "\r\n--x--\r\n", []string{"Content-Type", "multipart/form-data; boundary=x"}, 415},
		{"no content type", "POST", "/", sendBody, nil, 415},
		{"mcp text/plain", "POST", "/mcp", mcpInit, []string{"Content-Type", "text/plain", "Accept", "application/json, text/event-stream"}, 415},
	} {
		st, body, hdr := webReq(t, tc.method, h.base+tc.path, tc.body, tc.hdr...)
		if st != tc.want {
			t.Errorf("%s: %s %s answered %d, want %d: %s", tc.name, tc.method, tc.path, st, tc.want, body)
			continue
		}
		if !strings.Contains(body, "server.allowed") && !strings.Contains(body, "application/json") {
			t.Errorf("%s: the refusal does not say why: %s", tc.name, body)
		}
		if hdr.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: refusal without nosniff", tc.name)
		}
	}
	if after := taskCount(t, h); after != before {
		t.Fatalf("refused requests ran turns: %d tasks before, %d after", before, after)
	}

	// What must keep working.
	for _, tc := range []struct {
		name string
		hdr  []string
	}{
		{"own origin", with("Origin", h.base)},
		{"localhost", with("Host", "localhost:"+port, "Origin", "http://localhost:"+port)},
		{"ipv6 loopback name", with("Host", "[::1]:"+port)},
		{"a tunnel's port", with("Host", "localhost:9")},
		{"json with charset", []string{"Content-Type", "application/json; charset=utf-8"}},
	} {
		if st, body, _ := webReq(t, "POST", h.base+"/", listBody, tc.hdr...); st != 200 {
			t.Errorf("%s: ListTasks answered %d: %s", tc.name, st, body)
		}
	}
	if st, body, _ := webReq(t, "POST", h.base+"/mcp", mcpInit, with("Origin", h.base, "Accept", "application/json, text/event-stream")...); st != 200 {
		t.Errorf("MCP initialize from the host's own origin: %d %s", st, body)
	}
	if text, state := turn(t, a2aClient(t, h.base, ""), "hello"); state != a2a.TaskStateCompleted || text != "served" {
		t.Fatalf("the official A2A client: %q %v", text, state)
	}
	if st, body, _ := webReq(t, "POST", h.base+"/a2a/v0.3", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m03","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`, asJSON...); st != 200 || !strings.Contains(body, "served") {
		t.Fatalf("A2A 0.3 SendMessage: %d %s", st, body)
	}
}

// webBrowser starts a headless Chromium for t, where the name rebind.test
// resolves to 127.0.0.1 (the end state of a DNS rebinding attack), and
// returns a tab. Chromium missing, the test is skipped (failed under CI),
// saying so.
func webBrowser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("LOOOPY_CHROMIUM")
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path != "" {
			break
		}
		path, _ = exec.LookPath(name)
	}
	if path == "" {
		msg := "BROWSER TEST NOT RUN: chromium is not installed (apt-get install -y chromium, or set LOOOPY_CHROMIUM)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("host-resolver-rules", "MAP rebind.test 127.0.0.1"),
		// Chromium's own partial guard against rebinding (a public page's
		// requests to a loopback address) is off: the host must not rely
		// on it, other browsers have none.
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks"),
		chromedp.UserDataDir(t.TempDir()),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	ctx, cancelGuard := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelGuard(); cancel(); cancelAlloc() })
	deny := chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorDeny})
		return err
	})
	if err := chromedp.Do(ctx, deny); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// TestBlackBoxBrowserAttacksRefused: in a real browser, against the binary
// with auth off:
//   - a page of another site (127.0.0.2) sends SendMessage as a "simple"
//     request (no-cors, text/plain, a form's encoding): no turn runs;
//   - a page whose name was rebound to the host (rebind.test) is refused
//     the page and every call, so it reads and runs nothing;
//   - an artifact holding a web page with script, opened at its link on
//     the host's origin, never runs: it is a download, nosniff, under a
//     sandbox policy.
func TestBlackBoxBrowserAttacksRefused(t *testing.T) {
	t.Parallel()
	h := startWebHost(t)
	ctx := webBrowser(t)
	port := strings.TrimPrefix(h.base, "http://127.0.0.1:")

	t.Run("cross-site page", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("127.0.0.2 is not a local address here: %v", err)
		}
		page := `<!doctype html><title>loading</title><script>
const target = ` + "`" + h.base + "/`" + `;
const send = (id, ct, body) => fetch(target, {method: "POST", mode: "no-cors", headers: ct ? {"Content-Type": ct} : {},
  body: body || JSON.stringify({jsonrpc: "2.0", id: 1, method: "SendMessage",
    params: {message: {messageId: id, role: "ROLE_USER", parts: [{text: "forged " + id}]}}})}).then(() => "sent", (e) => "refused");
Promise.all([send("plain", "text/plain"), send("form", "application/x-www-form-urlencoded"), send("none", ""),
  send("multipart", "", (() => { const f = new FormData(); f.append("x", "{}"); return f; })()),
  fetch(target, {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(() => "read", () => "preflight refused")])
  .then((r) => { document.title = "done " + r.join(","); });
</script>`
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, page)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })

		before := taskCount(t, h)
		if err := chromedp.Do(ctx, chromedp.Navigate("http://"+ln.Addr().String()+"/")); err != nil {
			t.Fatalf("the other site's page: %v", err)
		}
		title, err := chromedp.Run(ctx, chromedp.Poll[string](`document.title.startsWith("done") ? document.title : null`))
		if err != nil {
			t.Fatalf("the other site's page: %v", err)
		}
		t.Logf("the other site's page: %s", title)
		// Every request of the page has been answered (each promise
		// settled): a turn it started would be listed now.
		if after := taskCount(t, h); after != before {
			t.Fatalf("a page of another site ran %d turns on the host", after-before)
		}
	})

	t.Run("dns rebinding", func(t *testing.T) {
		// The attacker's page is loaded from the attacker's server (here:
		// answered by the browser's request interception); then the name
		// resolves to the host (the resolver rule), so the page's calls to
		// its own origin reach the host.
		before := taskCount(t, h)
		rebound := "http://rebind.test:" + port
		attacker := `<!doctype html><title>loading</title><script>
const status = (p) => p.then(r => r.status, e => "error " + e);
const post = (path, body, accept) => status(fetch(path, {method: "POST", headers: Object.assign({"Content-Type": "application/json"}, accept ? {Accept: accept} : {}), body}));
Promise.all([post("/", ` + "`" + listBody + "`" + `), post("/", ` + "`" + sendBody + "`" + `),
  post("/mcp", ` + "`" + mcpInit + "`" + `, "application/json, text/event-stream"),
  status(fetch("/events/ctx-1")), status(fetch("/.well-known/agent-card.json")), status(fetch("/"))])
  .then(rs => { document.title = "done " + rs.join(","); });
</script>`
		paused := chromedp.Events(ctx, fetch.RequestPaused)
		if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: rebound + "/attacker.html"}}})
			return err
		}), chromedp.Evaluate[chromedp.Void](`setTimeout(() => { location.href = "`+rebound+`/attacker.html"; }, 0)`)); err != nil {
			t.Fatal(err)
		}
		for ev, err := range paused {
			if err != nil {
				t.Fatalf("waiting for the attacker's page to load: %v", err)
			}
			fulfill := chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
				_, err := chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: ev.RequestID, ResponseCode: 200,
					ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "text/html"}}, Body: []byte(attacker)})
				return err
			})
			if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, fulfill)); err != nil {
				t.Fatal(err)
			}
			break
		}
		res, err := chromedp.Run(ctx, chromedp.Poll[string](`document.title.startsWith("done") ? document.title : null`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = chromedp.Run(ctx, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{})
			return err
		}))
		if res != "done 403,403,403,403,403,403" {
			t.Fatalf("the rebound page's calls (ListTasks, SendMessage, MCP initialize, events, card, page): %s, want all 403", res)
		}
		if after := taskCount(t, h); after != before {
			t.Fatalf("the rebound page ran %d turns", after-before)
		}
	})

	t.Run("html artifact", func(t *testing.T) {
		script := `<html><head><title>clean</title></head><body><script>document.title = "XSS RAN";` +
			`fetch("/", {method: "POST", headers: {"Content-Type": "application/json"}, body: '` + listBody + `'}).then(r => r.text()).then(t => document.title = "XSS READ " + t.length)` +
			`</script></body></html>`
		text, state := turn(t, a2aClient(t, h.base, ""), "art text/html "+script)
		id := regexp.MustCompile(`art-[0-9a-f]+`).FindString(text)
		if state != a2a.TaskStateCompleted || id == "" {
			t.Fatalf("the plugin wrote no artifact: %q %v", text, state)
		}
		st, body, hdr := webReq(t, "GET", h.base+"/artifacts/"+id, "")
		if st != 200 || !strings.Contains(body, "XSS RAN") {
			t.Fatalf("GET /artifacts/%s: %d %.200q", id, st, body)
		}
		if cd := hdr.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment") {
			t.Errorf("Content-Disposition %q, want an attachment", cd)
		}
		if hdr.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("no X-Content-Type-Options: nosniff")
		}
		if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "sandbox") {
			t.Errorf("Content-Security-Policy %q, want default-src 'none' and sandbox", csp)
		}
		// The link the agent hands out, opened in the browser.
		_ = chromedp.Do(ctx, chromedp.Navigate("about:blank"))
		navErr := chromedp.Do(ctx, chromedp.Navigate(h.base+"/artifacts/"+id))
		title, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.title`))
		if err != nil {
			t.Fatal(err)
		}
		href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("opening the artifact: navigation %v, now at %s, title %q", navErr, href, title)
		if strings.Contains(title, "XSS") {
			t.Fatalf("the artifact's script ran on the host's origin: title %q", title)
		}
	})

	t.Run("page headers", func(t *testing.T) {
		_, _, hdr := webReq(t, "GET", h.base+"/", "")
		if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("the page's Content-Security-Policy %q", csp)
		}
		if hdr.Get("X-Frame-Options") != "DENY" || hdr.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("the page's X-Frame-Options %q, X-Content-Type-Options %q", hdr.Get("X-Frame-Options"), hdr.Get("X-Content-Type-Options"))
		}
		// The page itself, served to its own origin, still works: it
		// lists the conversations through the guarded JSON-RPC route.
		if err := chromedp.Do(ctx, chromedp.Navigate(h.base+"/")); err != nil {
			t.Fatalf("the page: %v", err)
		}
		note, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const n = document.getElementById("contexts-note").textContent; const l = document.querySelectorAll("#context-list li").length; return l > 0 ? "listed " + l : (n || null); })()`))
		if err != nil {
			t.Fatalf("the page: %v", err)
		}
		if !strings.HasPrefix(note, "listed") {
			t.Fatalf("the page on its own origin did not list the conversations: %s", note)
		}
	})
}
