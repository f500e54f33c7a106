package web_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/looopy-go/looopy/host"
)

// The page is tested in a real headless Chromium (Debian's chromium
// package) driven by chromedp, against a real host serving the scripted
// model and the calculator plugin. One browser serves the package's
// tests; each test has its own tab (its own sessionStorage).

var (
	browserOnce   sync.Once
	browserCtx    context.Context
	browserCancel context.CancelFunc
	browserErr    error
)

var wasmCache = filepath.Join(os.TempDir(), "looopy-host-test-wasm-cache")

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		_ = shared.Close()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	if browserCancel != nil {
		browserCancel()
	}
	if code == 0 && shotsDir != "" && os.Getenv("LOOOPY_TEST_ARTIFACTS") == "" {
		// screenshots are kept (their paths logged) only when a test failed
		_ = os.RemoveAll(shotsDir)
	}
	os.Exit(code)
}

// chromiumPath finds the browser: $LOOOPY_CHROMIUM, or chromium on PATH.
// Missing, the test fails under CI and is skipped, saying so, elsewhere.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LOOOPY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "BROWSER TESTS NOT RUN: chromium is not installed (apt-get install -y chromium, or set LOOOPY_CHROMIUM to its path)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// tab opens a new tab of the package's browser, closed when t ends; every
// action in it is bounded by a generous guard.
func tab(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath(t)
	browserOnce.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path),
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.WindowSize(1280, 900),
		)
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(alloc)
		browserErr = chromedp.Do(ctx) // starts the browser
		browserCtx = ctx
		browserCancel = func() { cancel(); cancelAlloc() }
	})
	if browserErr != nil {
		t.Fatalf("start chromium: %v", browserErr)
	}
	ctx, cancel := chromedp.NewContext(browserCtx)
	ctx, cancelGuard := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelGuard(); cancel() })
	return ctx
}

// artifactsDir is where screenshots go, kept after the run:
// $LOOOPY_TEST_ARTIFACTS/web, or a new folder under the system's temporary
// folder. Every screenshot's path is logged.
func artifactsDir(t *testing.T) string {
	t.Helper()
	shotsOnce.Do(func() {
		if base := os.Getenv("LOOOPY_TEST_ARTIFACTS"); base != "" {
			shotsDir = filepath.Join(base, "web")
			shotsErr = os.MkdirAll(shotsDir, 0o755)
			return
		}
		shotsDir, shotsErr = os.MkdirTemp("", "looopy-web-screenshots-")
	})
	if shotsErr != nil {
		t.Fatal(shotsErr)
	}
	return shotsDir
}

var (
	shotsOnce sync.Once
	shotsDir  string
	shotsErr  error
)

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(artifactsDir(t), t.Name()+"-"+name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot: %s", p)
}

const (
	aliceKey   = "web-test-alice-key"
	adminToken = "web-test-admin-token"
)

func config(dir, addr string, auth bool) host.Config {
	cfg := host.Config{
		Addr:      addr,
		DataDir:   dir,
		PluginDir: "../../examples/plugins",
		Plugins: host.PluginsConfig{
			Only:     []string{"scripted-model", "calculator"},
			CacheDir: wasmCache,
		},
		Limits: host.LimitsConfig{
			Heartbeat:     host.Duration(100 * time.Millisecond),
			ShutdownGrace: host.Duration(2 * time.Second),
		},
	}
	if auth {
		cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: aliceKey, Principal: "alice"}}}
		cfg.Admin = host.AdminConfig{Token: adminToken}
	}
	return cfg
}

func startHost(t *testing.T, cfg host.Config) *host.Main {
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
	t.Cleanup(func() { _ = m.Close() })
	return m
}

var (
	sharedOnce sync.Once
	shared     *host.Main
	sharedDir  string
	sharedErr  error
)

// openHost is a host with auth off shared by the tests that need nothing
// of their own (each works in a conversation of its own): the scripted
// model, the calculator, the researcher sub-agent, echo and the dataset
// writer, with debug thoughts recorded. It stops when the package's tests
// end.
func openHost(t *testing.T) *host.Main {
	t.Helper()
	sharedOnce.Do(func() {
		if sharedDir, sharedErr = os.MkdirTemp("", "looopy-web-test-"); sharedErr != nil {
			return
		}
		cfg := config(sharedDir, "127.0.0.1:0", false)
		cfg.InMemory = true
		cfg.Plugins.Only = []string{"scripted-model", "calculator", "researcher", "echo", "dataset-writer"}
		// The loop's debug thoughts are recorded: the page must never
		// show them (they are the admin's).
		cfg.Thoughts.Debug = true
		cfg.Thoughts.Record = "detailed"
		m := host.NewMain()
		m.Config = cfg
		m.Stdout = io.Discard
		if os.Getenv("LOOOPY_TEST_LOG") != "" {
			m.Stdout = os.Stderr
		}
		sharedErr = m.Run(context.Background())
		shared = m
	})
	if sharedErr != nil {
		t.Fatalf("run the shared host: %v", sharedErr)
	}
	return shared
}

// freeAddr returns a loopback address nobody listens on now, for a host
// that must come back on the same address after a restart.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// wait polls a JavaScript condition until it is true.
func wait(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		dump, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, cond, err, dump)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// say types a message and sends it.
func say(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("prompt"), text),
		chromedp.Click(chromedp.ID("send")),
	); err != nil {
		t.Fatalf("say %q: %v", text, err)
	}
}

func useKeys(t *testing.T, ctx context.Context, key, admin string) {
	t.Helper()
	steps := []chromedp.Action[chromedp.Void]{chromedp.SetValue(chromedp.ID("api-key"), key)}
	if admin != "" {
		steps = append(steps, chromedp.SetValue(chromedp.ID("admin-token"), admin))
	}
	if err := chromedp.Do(ctx, append(steps, chromedp.Click(chromedp.ID("save-keys")))...); err != nil {
		t.Fatalf("use keys: %v", err)
	}
}

// turnDone is true when the page shows n turns, every one ended.
func turnsDone(n int) string {
	return fmt.Sprintf(`(() => { const ts = document.querySelectorAll('#transcript > .turn');
		return ts.length === %d && [...ts].every(t => ['completed','failed','canceled','rejected'].includes(t.dataset.status)); })()`, n)
}

// A turn with a tool call, with auth on: refused without the key, then the
// call's arguments and result and the streamed answer; the key stays in
// sessionStorage; the plugins panel shows grants and health with the admin
// token; text from the conversation is never taken as HTML.
func TestPageToolCallWithAuth(t *testing.T) {
	ctx := tab(t)
	m := startHost(t, config(t.TempDir(), "127.0.0.1:0", true))
	if err := chromedp.Do(ctx, chromedp.Navigate(m.URL()+"/")); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the page", `document.getElementById('plugins-note') !== null`)

	// No key: the host refuses, and the page says so.
	say(t, ctx, "calc 2+2")
	wait(t, ctx, "the refusal", `!document.getElementById('error').hidden`)
	if msg := eval[string](t, ctx, `document.getElementById('error').textContent`); !strings.Contains(strings.ToLower(msg), "credential") {
		t.Fatalf("error without a key = %q, want the host's refusal", msg)
	}
	wait(t, ctx, "the plugins note", `document.getElementById('plugins-note').textContent.includes('admin token')`)
	screenshot(t, ctx, "refused")

	useKeys(t, ctx, aliceKey, adminToken)
	say(t, ctx, "calc 2+2")
	wait(t, ctx, "the turn", turnsDone(1))
	tool := eval[map[string]any](t, ctx, `(() => { const b = document.querySelector('.tool[data-tool="calc"]');
		return b ? {state: b.dataset.state, args: b.querySelector('.args').textContent, result: b.querySelector('.result').textContent} : null; })()`)
	if tool == nil || tool["state"] != "done" || !strings.Contains(tool["args"].(string), `"expression": "2+2"`) || !strings.Contains(tool["result"].(string), "4") {
		t.Fatalf("tool call shown as %v, want calc with 2+2 giving 4", tool)
	}
	turn := eval[map[string]any](t, ctx, `(() => { const t = document.querySelector('#transcript > .turn');
		return {status: t.dataset.status, user: t.querySelector('.user').textContent, text: [...t.querySelectorAll('.text')].map(e => e.textContent).join('|')}; })()`)
	if turn["status"] != "completed" || turn["user"] != "calc 2+2" || !strings.Contains(turn["text"].(string), "2+2 = 4") {
		t.Fatalf("turn shown as %v", turn)
	}
	// The key is kept for this tab only.
	store := eval[map[string]any](t, ctx, `({local: localStorage.length, session: sessionStorage.getItem('looopy.apiKey')})`)
	if store["local"] != float64(0) || store["session"] != aliceKey {
		t.Fatalf("storage = %v, want the key in sessionStorage only", store)
	}
	// The plugins panel, from /admin/plugins with the admin token.
	wait(t, ctx, "the plugin list", `document.querySelector('.plugin[data-plugin="calculator"] .grant') !== null`)
	if h := eval[string](t, ctx, `document.querySelector('.plugin[data-plugin="calculator"] .health').dataset.health`); h != "ok" {
		t.Fatalf("calculator health shown as %q", h)
	}
	// The conversation is listed.
	wait(t, ctx, "the context list", `document.querySelectorAll('#context-list li').length === 1`)

	// Markup in the conversation is shown as text, never run.
	say(t, ctx, `<img src=x onerror="window.pwned=1">`)
	wait(t, ctx, "the echo", turnsDone(2))
	got := eval[map[string]any](t, ctx, `({imgs: document.querySelectorAll('#transcript img').length, pwned: window.pwned === 1,
		text: document.getElementById('transcript').textContent.includes('<img src=x onerror=')})`)
	if got["imgs"] != float64(0) || got["pwned"] != false || got["text"] != true {
		t.Fatalf("markup in the conversation: %v, want it shown as text", got)
	}
	screenshot(t, ctx, "done")
}

// A slow turn canceled from the page stops streaming and ends canceled.
func TestPageCancel(t *testing.T) {
	ctx := tab(t)
	m := openHost(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(m.URL()+"/")); err != nil {
		t.Fatal(err)
	}
	say(t, ctx, "SLOW 6s")
	wait(t, ctx, "the first ticks", `(document.querySelector('#transcript .text') || {}).textContent?.includes('tick1')`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#transcript .turn .cancel`))); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the canceled status", `(document.querySelector('#transcript > .turn') || {dataset: {}}).dataset.status === 'canceled'`)
	text := eval[string](t, ctx, `document.querySelector('#transcript .text').textContent`)
	if strings.Contains(text, "tick6") || strings.Contains(text, "Done.") {
		t.Fatalf("a canceled turn streamed to its end: %q", text)
	}
	if hidden := eval[bool](t, ctx, `document.querySelector('#transcript .turn .cancel').hidden`); !hidden {
		t.Fatal("the cancel button is still offered on a canceled turn")
	}
	screenshot(t, ctx, "canceled")
}

// The host restarts (same data folder, same address) under an open page:
// the page reconnects its event stream with Last-Event-ID, draws nothing
// twice, and the conversation goes on.
func TestPageReconnectAfterRestart(t *testing.T) {
	ctx := tab(t)
	dir, addr := t.TempDir(), freeAddr(t)
	m := startHost(t, config(dir, addr, true))
	if err := chromedp.Do(ctx, chromedp.Navigate(m.URL()+"/")); err != nil {
		t.Fatal(err)
	}
	useKeys(t, ctx, aliceKey, "")
	say(t, ctx, "calc 2+2")
	wait(t, ctx, "the first turn", turnsDone(1))
	wait(t, ctx, "the live stream", `document.getElementById('conn').dataset.state === 'live'`)
	before := eval[float64](t, ctx, `window.looopyStats.lastEventId`)

	if err := m.Close(); err != nil {
		t.Fatalf("close host: %v", err)
	}
	wait(t, ctx, "the page to notice", `document.getElementById('conn').dataset.state === 'reconnecting'`)
	screenshot(t, ctx, "reconnecting")
	m2 := startHost(t, config(dir, addr, true))
	_ = m2
	wait(t, ctx, "the stream back", `document.getElementById('conn').dataset.state === 'live'`)
	say(t, ctx, "calc 3+3")
	wait(t, ctx, "the second turn", turnsDone(2))

	st := eval[map[string]float64](t, ctx, `window.looopyStats`)
	if st["reconnects"] < 1 || st["duplicates"] != 0 || st["lastEventId"] <= before {
		t.Fatalf("stream stats %v (last id before the restart %v): want a reconnect, no event twice, new events", st, before)
	}
	n := eval[map[string]float64](t, ctx, `({tools: document.querySelectorAll('.tool').length,
		first: (document.getElementById('transcript').textContent.match(/2\+2 = 4/g) || []).length,
		second: (document.getElementById('transcript').textContent.match(/3\+3 = 6/g) || []).length})`)
	if n["tools"] != 2 || n["first"] != 1 || n["second"] != 1 {
		t.Fatalf("after the restart the page shows %v, want each turn once", n)
	}
	screenshot(t, ctx, "after-restart")
}

// copyPlugin copies an example plugin into dir with its manifest's config
// and granted paths replaced (nil paths: none).
func copyPlugin(t *testing.T, dir, name string, cfg map[string]any, paths []string) {
	t.Helper()
	src := filepath.Join("..", "..", "examples", "plugins", name)
	wasm, err := os.ReadFile(filepath.Join(src, name+".wasm"))
	if err != nil {
		t.Fatalf("read %s.wasm (run make plugins-go): %v", name, err)
	}
	b, err := os.ReadFile(filepath.Join(src, "plugin.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	m["sha256"] = hex.EncodeToString(sum[:])
	m["config"] = cfg
	caps, _ := m["capabilities"].(map[string]any)
	delete(caps, "allowedPaths")
	if paths != nil {
		var ap []any
		for _, p := range paths {
			ap = append(ap, map[string]any{"path": p})
		}
		caps["allowedPaths"] = ap
	}
	out := filepath.Join(dir, name)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	mb, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(out, name+".wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "plugin.json"), mb, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A call that needs an approval pauses its turn; the page shows the
// request (the call, the plugin and its grant) and its Approve button
// answers it with the extension's data part; the call runs once, only
// after the approval.
func TestPageApproval(t *testing.T) {
	ctx := tab(t)
	root := t.TempDir()
	plugins, ledger := filepath.Join(root, "plugins"), filepath.Join(root, "ledger")
	if err := os.MkdirAll(ledger, 0o755); err != nil {
		t.Fatal(err)
	}
	copyPlugin(t, plugins, "scripted-model", map[string]any{}, nil)
	copyPlugin(t, plugins, "ledger", map[string]any{"dir": ledger}, []string{ledger})
	cfg := config(filepath.Join(root, "data"), "127.0.0.1:0", true)
	cfg.PluginDir = plugins
	cfg.Plugins.Only = []string{"scripted-model", "ledger"}
	cfg.Plugins.PathRoots = []string{root}
	cfg.Plugins.NoWatch = true
	cfg.Interaction = host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_append"}}}
	m := startHost(t, cfg)
	if err := chromedp.Do(ctx, chromedp.Navigate(m.URL()+"/")); err != nil {
		t.Fatal(err)
	}
	useKeys(t, ctx, aliceKey, "")
	say(t, ctx, "ledger pay 10")
	wait(t, ctx, "the approval request", `document.querySelector('#transcript .request button.approve') !== null`)
	req := eval[map[string]any](t, ctx, `(() => { const t = document.querySelector('#transcript > .turn'), r = t.querySelector('.request');
		return {status: t.dataset.status, prompt: r.querySelector('.prompt').textContent, data: r.querySelector('.request-data').textContent}; })()`)
	if req["status"] != "waiting-input" || !strings.Contains(req["prompt"].(string), "ledger_append") ||
		!strings.Contains(req["data"].(string), `"pay 10"`) || !strings.Contains(req["data"].(string), "ledger") {
		t.Fatalf("approval request shown as %v", req)
	}
	if _, err := os.Stat(filepath.Join(ledger, "ledger.log")); !os.IsNotExist(err) {
		t.Fatalf("the ledger was written before the approval: %v", err)
	}
	screenshot(t, ctx, "request")

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#transcript .request button.approve`))); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the approved turn", turnsDone(1))
	if st := eval[string](t, ctx, `document.querySelector('#transcript > .turn').dataset.status`); st != "completed" {
		t.Fatalf("turn after the approval: %s", st)
	}
	wait(t, ctx, "the call", `(document.querySelector('.tool[data-tool="ledger_append"]') || {dataset: {}}).dataset.state === 'done'`)
	b, err := os.ReadFile(filepath.Join(ledger, "ledger.log"))
	if err != nil || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), "pay 10") {
		t.Fatalf("ledger after one approval = %q (%v), want one line", b, err)
	}
	screenshot(t, ctx, "approved")
}

// Thoughts and their verbosity switch (and the admin's debug thoughts
// never shown), a sub-agent's call, a dataset artifact as a table, and a
// binary file artifact downloaded by the browser, its bytes checked.
func TestPageThoughtsSubAgentDataset(t *testing.T) {
	ctx := tab(t)
	m := openHost(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(m.URL()+"/")); err != nil {
		t.Fatal(err)
	}
	say(t, ctx, "think about rain")
	wait(t, ctx, "the thinking turn", turnsDone(1))
	if th := eval[string](t, ctx, `[...document.querySelectorAll('#transcript .thought')].map(e => e.textContent).join('|')`); !strings.Contains(th, "rain") {
		t.Fatalf("thought shown as %q", th)
	}
	// The answer once, whatever thoughts came between its deltas and its
	// complete text.
	if txt := eval[string](t, ctx, `[...document.querySelectorAll('#transcript .text')].map(e => e.textContent).join('|')`); txt != "I thought about about rain." {
		t.Fatalf("answer shown as %q", txt)
	}
	// shown: the thoughts visible now (type/verbosity), by the switch's level.
	const shown = `[...document.querySelectorAll('#transcript .thought')].filter(e => getComputedStyle(e).display !== 'none').map(e => e.dataset.type + '/' + e.dataset.verbosity).sort().join(',')`
	setLevel := func(v string) string {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("thought-verbosity"), v)); err != nil {
			t.Fatal(err)
		}
		eval[bool](t, ctx, `document.getElementById('thought-verbosity').dispatchEvent(new Event('change'))`)
		return eval[string](t, ctx, shown)
	}
	levels := map[string]string{}
	for _, v := range []string{"normal", "brief", "detailed", "none"} {
		levels[v] = setLevel(v)
		for _, typ := range strings.Split(levels[v], ",") {
			if typ == "" {
				continue
			}
			if lv := typ[strings.Index(typ, "/")+1:]; v == "brief" && lv != "brief" || v == "normal" && lv == "detailed" {
				t.Fatalf("at %s the page shows a %s thought: %s", v, lv, levels[v])
			}
		}
		if v == "detailed" {
			screenshot(t, ctx, "thoughts-detailed")
		}
	}
	if levels["none"] != "" {
		t.Fatalf("thoughts switched off still shown: %s", levels["none"])
	}
	for v, want := range map[string][]string{
		"brief":    {"planning/brief", "decision/brief"},
		"normal":   {"planning/brief", "reasoning/normal", "decision/brief"},
		"detailed": {"strategy/detailed", "observation/detailed", "reasoning/normal"},
	} {
		for _, w := range want {
			if !strings.Contains(levels[v], w) {
				t.Fatalf("at %s the page shows %s, want %s among them", v, levels[v], w)
			}
		}
	}
	if strings.Contains(levels["normal"], "strategy") || strings.Contains(levels["brief"], "reasoning") {
		t.Fatalf("levels: %v", levels)
	}
	// The choice stays for the tab.
	if got := eval[string](t, ctx, `sessionStorage.getItem('looopy.thoughts')`); got != "none" {
		t.Fatalf("switch kept as %q", got)
	}
	setLevel("detailed")
	// The debug thoughts the host records (thoughts.debug) are the admin's:
	// nothing of them on the page, at the most detailed level.
	if page := eval[string](t, ctx, `document.documentElement.outerHTML`); strings.Contains(page, "calling the model with") ||
		strings.Contains(page, "pre-llm") || strings.Contains(page, "thought-process") {
		t.Fatal("the page shows the loop's debug thoughts")
	}

	say(t, ctx, "research owls")
	wait(t, ctx, "the research turn", turnsDone(2))
	sub := eval[map[string]any](t, ctx, `(() => { const t = document.querySelectorAll('#transcript > .turn')[1];
		const r = t.querySelector('.tool[data-tool="researcher"]');
		return {researcher: r ? r.dataset.state : '', result: r ? r.querySelector('.result').textContent : '',
			note: [...t.querySelectorAll('.note')].map(n => n.textContent).join('|')}; })()`)
	if sub["researcher"] != "done" || !strings.Contains(sub["result"].(string), "owls") || !strings.Contains(sub["note"].(string), "sub-agent researcher") {
		t.Fatalf("sub-agent turn shown as %v", sub)
	}

	say(t, ctx, "dataset 3")
	wait(t, ctx, "the dataset turn", turnsDone(3))
	ds := eval[map[string]any](t, ctx, `(() => { const a = document.querySelector('.artifact');
		return a ? {link: a.querySelector('a.download').textContent, head: [...a.querySelectorAll('th')].map(c => c.textContent).join(','),
			rows: a.querySelectorAll('tbody tr').length} : null; })()`)
	if ds == nil || ds["rows"] != float64(3) || !strings.Contains(ds["head"].(string), "label") || !strings.Contains(ds["link"].(string), "demo") {
		t.Fatalf("dataset shown as %v", ds)
	}
	screenshot(t, ctx, "rich")

	// A binary file artifact (every byte value), downloaded by clicking
	// its link: the browser saves exactly the bytes the tool wrote.
	say(t, ctx, "file 3000")
	wait(t, ctx, "the file turn", turnsDone(4))
	wait(t, ctx, "the file's link", `(() => { const a = [...document.querySelectorAll('.artifact')].find(a => a.textContent.includes('demo.bin'));
		return !!a && !a.querySelector('.note').textContent.includes('writing'); })()`)
	dir := t.TempDir()
	progress := chromedp.Events(ctx, browser.DownloadProgress)
	if err := chromedp.Do(ctx,
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			events := true
			_, err := chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
				Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: &events})
			return err
		}),
		chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll('.artifact')].find(a => a.textContent.includes('demo.bin')).querySelector('a.download').click()`),
	); err != nil {
		t.Fatal(err)
	}
	var saved string
	for ev, err := range progress {
		if err != nil {
			t.Fatalf("download: %v", err)
		}
		if ev.State == browser.DownloadProgressStateCanceled {
			t.Fatal("the download was canceled")
		}
		if ev.State == browser.DownloadProgressStateCompleted {
			saved = filepath.Join(dir, ev.GUID)
			break
		}
	}
	got, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 3000)
	for i := range want {
		want[i] = byte((i*7 + 3) % 256) // the dataset-writer's make_file pattern
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("downloaded %d bytes, want the %d the tool wrote (first differing at %d)", len(got), len(want), firstDiff(got, want))
	}
	if errText := eval[string](t, ctx, `document.getElementById('error').textContent`); errText != "" {
		t.Fatalf("the page shows an error: %s", errText)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A call to a tool the client offered pauses its turn; the page draws a
// form for the tool's result from the pausing status's data (the
// extension's requests), and the result sent from the page lets the turn
// go on. The forms for a text question and a credential are drawn from the
// same data (rendering only: this host raises neither yet).
func TestPageClientToolForm(t *testing.T) {
	ctx := tab(t)
	m := openHost(t)
	const ext = "https://github.com/looopy-go/looopy/blob/main/docs/A2A_EXTENSION.md#v1"
	contextID := fmt.Sprintf("web-client-tool-%d", time.Now().UnixNano())
	msg := map[string]any{"messageId": "m-locate", "role": "ROLE_USER", "contextId": contextID,
		"parts": []any{map[string]any{"text": "locate"}},
		"metadata": map[string]any{ext: map[string]any{"clientTools": []any{map[string]any{
			"name": "get_location", "description": "The user's current city.",
			"parameters":   map[string]any{"type": "object", "properties": map[string]any{"precision": map[string]any{"type": "string"}}},
			"resultSchema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}},
		}}}}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": map[string]any{"message": msg}})
	req, _ := http.NewRequest("POST", m.URL()+"/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Extensions", ext)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(answer), "INPUT_REQUIRED") {
		t.Fatalf("the task did not pause for the client tool: %s", answer)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(m.URL()+"/#"+contextID)); err != nil {
		t.Fatal(err)
	}
	const form = `.request[data-input-type="client-tool"][data-source="status"] form[data-form="client-tool"]`
	wait(t, ctx, "the client tool's form", `document.querySelector('`+form+`') !== null`)
	shown := eval[map[string]any](t, ctx, `(() => { const r = document.querySelector('.request[data-input-type="client-tool"]');
		return {prompt: r.querySelector('.prompt').textContent, data: r.querySelector('.request-data').textContent,
			skeleton: r.querySelector('textarea[name="data"]').value, source: r.dataset.source}; })()`)
	if !strings.Contains(shown["prompt"].(string), "get_location") || !strings.Contains(shown["data"].(string), "resultSchema") || shown["source"] != "status" ||
		!strings.Contains(shown["skeleton"].(string), `"city"`) {
		t.Fatalf("client tool request shown as %v", shown)
	}
	screenshot(t, ctx, "client-tool")
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(form+` textarea[name="content"]`), "Lisbon"),
		chromedp.SetValue(chromedp.CSS(form+` textarea[name="data"]`), `{"city": "Lisbon"}`),
		chromedp.Click(chromedp.CSS(form+` button[type="submit"]`)),
	); err != nil {
		t.Fatal(err)
	}
	wait(t, ctx, "the turn after the result", turnsDone(1))
	end := eval[map[string]any](t, ctx, `(() => { const t = document.querySelector('#transcript > .turn');
		return {status: t.dataset.status, text: [...t.querySelectorAll('.text')].map(e => e.textContent).join('|'),
			answered: t.querySelector('.request').dataset.answered || '', error: document.getElementById('error').textContent}; })()`)
	if end["status"] != "completed" || end["text"] != "Your client says: Lisbon" || end["answered"] != "true" || end["error"] != "" {
		t.Fatalf("after the result sent from the page: %v", end)
	}
	screenshot(t, ctx, "client-tool-answered")

	// A text question and a credential request, as a pausing status
	// carries them, drawn by the page's own renderer.
	eval[bool](t, ctx, `render('task-status', {kind: 'task-status', taskId: 'forms-task', contextId: '`+contextID+`',
		status: 'waiting-auth', metadata: {requests: [
			{inputId: 'text:q1', inputType: 'text', requireUser: true, prompt: 'Which city?'},
			{inputId: 'auth:a1', inputType: 'auth', requireUser: true, prompt: 'Sign in to the mail service',
			 auth: {provider: 'mail', authType: 'oauth2', scopes: ['mail.read'], authUrl: 'https://auth.example.test/start'}},
			{inputId: 'text:old', inputType: 'text', prompt: 'answered already', answer: {inputId: 'text:old', text: 'x'}}]}}) || true`)
	forms := eval[map[string]any](t, ctx, `(() => { const q = (s) => document.querySelector(s);
		return {text: !!q('.request[data-input-id="text:q1"] form[data-form="text"] input[name="text"]'),
			token: !!q('.request[data-input-id="auth:a1"] form[data-form="auth"] input[type="password"][name="token"]'),
			link: (q('.request[data-input-id="auth:a1"] a.auth-url') || {}).href || '',
			note: (q('.request[data-input-id="auth:a1"] .note') || {}).textContent || '',
			answered: !!q('.request[data-input-id="text:old"]')}; })()`)
	if forms["text"] != true || forms["token"] != true || forms["link"] != "https://auth.example.test/start" ||
		!strings.Contains(forms["note"].(string), "mail.read") || forms["answered"] != false {
		t.Fatalf("text and auth forms drawn as %v", forms)
	}
	screenshot(t, ctx, "text-and-auth-forms")

	// A sign-in URL that is not a web address (a plugin's or the model's
	// javascript: URL) is shown as text, never made a link.
	eval[bool](t, ctx, `render('task-status', {kind: 'task-status', taskId: 'forms-task-2', contextId: '`+contextID+`',
		status: 'waiting-auth', metadata: {requests: [
			{inputId: 'auth:a2', inputType: 'auth', requireUser: true, prompt: 'Sign in',
			 auth: {provider: 'mail', authType: 'oauth2', authUrl: 'javascript:document.title="owned"'}}]}}) || true`)
	bad := eval[map[string]any](t, ctx, `(() => { const r = document.querySelector('.request[data-input-id="auth:a2"]');
		return {drawn: !!r, links: r ? r.querySelectorAll('a').length : -1, text: r ? r.textContent : ''}; })()`)
	if bad["drawn"] != true || bad["links"] != float64(0) || !strings.Contains(bad["text"].(string), "javascript:") {
		t.Fatalf("a javascript: sign-in URL drawn as %v", bad)
	}
}

// The conversation's events expire (limits.taskTTL) under an open page,
// then the next turn runs in it. The stream's ids go on after the expiry,
// so the page's open stream draws the new turn, once, with ids above those
// it had; before, they started at 1 again and the page, waiting for ids
// above its last one, never drew the turn.
func TestPageAcrossTheStreamsExpiry(t *testing.T) {
	ctx := tab(t)
	cfg := config(t.TempDir(), "127.0.0.1:0", true)
	cfg.Limits.TaskTTL = host.Duration(2 * time.Second)
	cfg.Limits.ConversationTTL = host.Retention(time.Hour)
	m := startHost(t, cfg)
	if err := chromedp.Do(ctx, chromedp.Navigate(m.URL()+"/")); err != nil {
		t.Fatal(err)
	}
	useKeys(t, ctx, aliceKey, "")
	say(t, ctx, "calc 2+2")
	wait(t, ctx, "the first turn", turnsDone(1))
	wait(t, ctx, "the live stream", `document.getElementById('conn').dataset.state === 'live'`)
	before := eval[float64](t, ctx, `window.looopyStats.lastEventId`)
	contextID := eval[string](t, ctx, `decodeURIComponent(location.hash.slice(1))`)

	// The conversation's events expire: a resume from id 1 is refused.
	guard := time.Now().Add(time.Minute)
	for {
		req, _ := http.NewRequest(http.MethodGet, m.URL()+"/events/"+contextID, nil)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		req.Header.Set("Last-Event-ID", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			break
		}
		if time.Now().After(guard) {
			t.Fatal("the conversation's events did not expire in a minute (taskTTL 2s)")
		}
		time.Sleep(100 * time.Millisecond)
	}

	say(t, ctx, "calc 3+3")
	wait(t, ctx, "the second turn", turnsDone(2))
	wait(t, ctx, "the second answer", `document.getElementById('transcript').textContent.includes('3+3 = 6')`)
	st := eval[map[string]float64](t, ctx, `window.looopyStats`)
	if st["duplicates"] != 0 || st["lastEventId"] <= before {
		t.Fatalf("stream stats %v (last id before the expiry %v): want no event twice, new events", st, before)
	}
	n := eval[map[string]float64](t, ctx, `({tools: document.querySelectorAll('.tool').length,
		second: (document.getElementById('transcript').textContent.match(/3\+3 = 6/g) || []).length})`)
	if n["tools"] != 2 || n["second"] != 1 {
		t.Fatalf("after the expiry the page shows %v, want the second turn once", n)
	}
}

// The page is away (its event stream cut, its requests for events
// blocked) while the host restarts and another client's turn in the same
// conversation comes and its events expire: back, the page's resume from
// its last event id is refused (410, the events after it are gone), and
// the page reads the conversation's stream again from its start, says so,
// and goes on live. Before, it retried the refused resume for ever (and a
// browser kept the 410, cacheable by default, for the read from the
// start: the host's errors now say no-store, and the page's stream asks
// for none).
func TestPageRereadsWhenItsResumeExpired(t *testing.T) {
	ctx := tab(t)
	dir, addr := t.TempDir(), freeAddr(t)
	cfg := config(dir, addr, true)
	cfg.Limits.TaskTTL = host.Duration(2 * time.Second)
	cfg.Limits.ConversationTTL = host.Retention(time.Hour)
	m := startHost(t, cfg)
	if err := chromedp.Do(ctx, chromedp.Navigate(m.URL()+"/")); err != nil {
		t.Fatal(err)
	}
	useKeys(t, ctx, aliceKey, "")
	say(t, ctx, "calc 2+2")
	wait(t, ctx, "the first turn", turnsDone(1))
	wait(t, ctx, "the live stream", `document.getElementById('conn').dataset.state === 'live'`)
	before := eval[float64](t, ctx, `window.looopyStats.lastEventId`)
	contextID := eval[string](t, ctx, `decodeURIComponent(location.hash.slice(1))`)

	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	block := func(on bool) {
		t.Helper()
		var ps []*network.BlockPattern
		if on {
			ps = []*network.BlockPattern{{URLPattern: "*://*:*/events/*", Block: true}}
		}
		if _, err := chromedp.Call(ctx, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: ps}); err != nil {
			t.Fatal(err)
		}
	}
	block(true)
	if err := m.Close(); err != nil {
		t.Fatalf("close host: %v", err)
	}
	wait(t, ctx, "the page to notice", `document.getElementById('conn').dataset.state === 'reconnecting'`)
	m2 := startHost(t, cfg)

	// Another client's turn in the conversation, whose events then expire.
	msg := map[string]any{"messageId": "m-other", "role": "ROLE_USER", "contextId": contextID,
		"parts": []any{map[string]any{"text": "calc 3+3"}}}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": map[string]any{"message": msg}})
	req, _ := http.NewRequest("POST", m2.URL()+"/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(answer), "COMPLETED") {
		t.Fatalf("the other client's turn: %s", answer)
	}
	guard := time.Now().Add(time.Minute)
	for {
		req, _ := http.NewRequest(http.MethodGet, m2.URL()+"/events/"+contextID, nil)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		req.Header.Set("Last-Event-ID", fmt.Sprint(int64(before)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusGone {
			// Cacheable by default: a browser would answer the read from
			// the start with it.
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Fatalf("the refused resume has Cache-Control %q, want no-store", cc)
			}
			break
		}
		if time.Now().After(guard) {
			t.Fatalf("a resume after id %v still answers %d after a minute (taskTTL 2s), want 410", before, resp.StatusCode)
		}
		time.Sleep(100 * time.Millisecond)
	}

	block(false)
	wait(t, ctx, "the stream read again", `window.looopyStats.rereads >= 1 && document.getElementById('conn').dataset.state === 'live'`)
	if msg := eval[string](t, ctx, `document.getElementById('error').textContent`); !strings.Contains(msg, "expired") {
		t.Fatalf("the page says %q, want that events expired", msg)
	}
	say(t, ctx, "calc 4+4")
	wait(t, ctx, "the next answer", `document.getElementById('transcript').textContent.includes('4+4 = 8')`)
	if st := eval[map[string]float64](t, ctx, `window.looopyStats`); st["duplicates"] != 0 {
		t.Fatalf("stream stats %v: want no event twice", st)
	}
	screenshot(t, ctx, "reread-after-expiry")
}
