package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

// fakeChat is an OpenAI-compatible chat-completions server on loopback
// (the model is the one fake the tests allow): it asks for a calc call,
// then answers with the tool's result. It records the headers it got.
type fakeChat struct {
	srv *http.Server
	url string

	mu      sync.Mutex
	headers []http.Header
}

func startFakeChat(t *testing.T) *fakeChat {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeChat{url: "http://" + ln.Addr().String() + "/v1"}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve)}
	go func() { _ = f.srv.Serve(ln) }()
	t.Cleanup(func() { _ = f.srv.Close() })
	return f
}

func (f *fakeChat) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	last := req.Messages[len(req.Messages)-1]
	var chunks []string
	if last.Role == "tool" {
		chunks = []string{
			fmt.Sprintf(`{"choices":[{"index":0,"delta":{"role":"assistant","content":"The answer is %v"},"finish_reason":null}]}`, last.Content),
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":6,"total_tokens":36}}`,
		}
	} else {
		chunks = []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"id":"call_1","index":0,"type":"function","function":{"name":"calc","arguments":"{\"expression\":\"6*7\"}"}}]},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":4,"total_tokens":24}}`,
		}
	}
	for _, c := range chunks {
		fmt.Fprintf(w, "data: %s\n\n", c)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (f *fakeChat) seen() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.headers...)
}

const (
	clientKey    = "client-KEY-7f3a9c21e0"
	adminToken   = "admin-TOKEN-55aa0b1c"
	pluginSecret = "sk-plugin-SECRET-9d8e7f6a5b"
	secretEnv    = "LOOOPY_TEST_OBS_OPENAI_KEY"
)

// A host with auth, an admin token and a model plugin holding a secret
// runs a turn with a tool call: the plugin's outbound request carries the
// turn's trace context and the secret; the secret and the keys appear in
// no log line, no span and no event; /metrics shows the turn.
func TestSecretsNeverLeakAndTheTraceReachesThePluginsHTTP(t *testing.T) {
	chat := startFakeChat(t)
	t.Setenv(secretEnv, pluginSecret)
	root := t.TempDir()
	copyPlugin(t, root, "openai", func(m map[string]any) {
		m["config"] = map[string]any{"baseUrl": chat.url, "model": "test-model"}
		m["secrets"] = map[string]any{"apiKey": secretEnv}
		caps := m["capabilities"].(map[string]any)
		caps["allowedHosts"] = []string{"127.0.0.1"}
		caps["allowPrivateNetwork"] = true
	})
	copyPlugin(t, root, "calculator", nil)
	cfg := baseConfig(t.TempDir())
	cfg.PluginDir = root
	cfg.Plugins = host.PluginsConfig{NoWatch: true, CacheDir: wasmCache, AllowedHosts: []string{"127.0.0.1"},
		AllowPrivateNetwork: true, Secrets: []string{secretEnv}}
	cfg.Model.Plugin = "openai"
	cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: clientKey, Principal: "alice"}}}
	cfg.Admin.Token = adminToken
	cfg.LogLevel, cfg.LogFormat = "debug", "json"
	cfg.TraceSpans = true // the spans are written to the log too
	var logs syncLines
	h, exp := tracedHost(t, cfg, &logs)

	// A streaming turn, read to its end: the events a client sees.
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	body := `{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"what is 6*7?"}]}}}`
	resp := openSSE(t, context.Background(), h.URL()+"/a2a/v1", clientKey, body,
		"traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
	events, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(events), "The answer is 42") || !strings.Contains(string(events), "TASK_STATE_COMPLETED") {
		t.Fatalf("the turn did not complete with the tool's answer:\n%s", events)
	}
	var taskID string
	if m := regexp.MustCompile(`"taskId":"([^"]+)"`).FindSubmatch(events); m != nil {
		taskID = string(m[1])
	}
	tt := waitTurnTrace(t, exp, taskID)
	// Looopy's own event stream of the context, replayed from the start:
	// tool starts with their arguments, results, statuses.
	var contextID string
	if m := regexp.MustCompile(`"contextId":"([^"]+)"`).FindSubmatch(events); m != nil {
		contextID = string(m[1])
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lresp := openSSE(t, ctx, h.URL()+"/events/"+contextID+"?lastEventId=0", clientKey, "")
	var looopyEvents strings.Builder
	for _, f := range readFrames(t, lresp.Body, func(f frame) bool { return strings.Contains(f.Data, `"task-complete"`) }) {
		looopyEvents.WriteString(f.Data + "\n")
	}
	if !strings.Contains(looopyEvents.String(), `"tool-start"`) {
		t.Fatalf("the Looopy event stream has no tool-start:\n%s", looopyEvents.String())
	}
	cancel()

	// The plugin's outbound requests: the secret as its bearer token, and a
	// traceparent in the turn's trace, whose parent is the turn's llm.call.
	seen := chat.seen()
	if len(seen) != 2 {
		t.Fatalf("the model server got %d requests, want 2", len(seen))
	}
	// The plugin.call spans of the model plugin, children of llm.call.
	llmCalls := map[string]bool{}
	for _, s := range tt.named("plugin.call") {
		if p, ok := tt.parent(s); ok && p.Name == "llm.call" {
			if v, _ := attrOf(s, "looopy.plugin.name"); v != "openai" {
				t.Errorf("plugin.call under llm.call names plugin %q", v)
			}
			if v, _ := attrOf(s, "gen_ai.request.model"); v != "test-model" {
				t.Errorf("plugin.call under llm.call names model %q, want test-model", v)
			}
			llmCalls[s.SpanContext.SpanID().String()] = true
		}
	}
	turnTrace := tt.named("agent.turn")[0].SpanContext.TraceID().String()
	for i, hd := range seen {
		if hd.Get("Authorization") != "Bearer "+pluginSecret {
			t.Errorf("request %d: Authorization %q, want the plugin's secret", i, hd.Get("Authorization"))
		}
		tp := strings.Split(hd.Get("traceparent"), "-")
		if len(tp) != 4 || tp[1] != turnTrace || !llmCalls[tp[2]] {
			t.Errorf("request %d: traceparent %q, want trace %s under a plugin.call span %v", i, hd.Get("traceparent"), turnTrace, llmCalls)
		}
	}

	// The logs: JSON lines; those written inside the turn carry its trace.
	if err := h.Close(); err != nil { // flushes the span log
		t.Fatal(err)
	}
	out := logs.String()
	var traced int
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if line["trace_id"] == turnTrace {
			traced++
		}
	}
	if traced == 0 {
		t.Errorf("no log line carries the turn's trace id %s", turnTrace)
	}

	// No secret anywhere: logs, spans (names, attributes, events), events.
	var spanText strings.Builder
	for _, s := range exp.GetSpans() {
		b, _ := json.Marshal(struct {
			Name  string
			Attrs any
			Evs   any
			St    any
		}{s.Name, s.Attributes, s.Events, s.Status})
		spanText.Write(b)
	}
	for name, text := range map[string]string{"logs": out, "spans": spanText.String(), "A2A events": string(events),
		"Looopy events": looopyEvents.String()} {
		for _, secret := range []string{pluginSecret, clientKey, adminToken} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s contain the secret %q", name, secret)
			}
		}
	}
	if !strings.Contains(out, `"span":"tool[calc]"`) {
		t.Errorf("the span log misses tool[calc]: the leak check saw no spans")
	}
}

// GET /metrics after a scripted turn: the series of turns, iterations,
// tool and model calls, tokens, plugins, streams and the store.
func TestMetricsAfterATurn(t *testing.T) {
	t.Parallel()
	h, _ := tracedHost(t, obsConfig(t), nil)
	c := client10(t, h.URL(), "")
	task := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("par")})
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task %s", task.Status.State)
	}
	// The task's metadata says what its turn used.
	u, _ := task.Metadata["usage"].(map[string]any)
	if u == nil || u["toolCalls"] != float64(2) || u["iterations"] != float64(2) || u["totalTokens"].(float64) <= 0 {
		t.Fatalf("task metadata %v, want usage with 2 tool calls, 2 iterations and tokens", task.Metadata)
	}
	series := scrape(t, h.URL()+"/metrics")
	want := map[string]float64{
		`looopy_turns_total{reason="stop",status="completed"}`:                    1,
		`looopy_iterations_total`:                                                 2,
		`looopy_model_calls_total{outcome="error"}`:                               1,
		`looopy_model_calls_total{outcome="ok"}`:                                  2,
		`looopy_tool_calls_total{outcome="ok",tool="calc"}`:                       1,
		`looopy_tool_calls_total{outcome="error",tool="calc"}`:                    1,
		`looopy_tool_duration_seconds_count{outcome="ok",tool="calc"}`:            1,
		`looopy_model_duration_seconds_count{outcome="ok"}`:                       2,
		`looopy_plugin_calls_total{plugin="calculator",version="1.0.0"}`:          2,
		`looopy_plugin_healthy{plugin="scripted-model",version="1.0.0"}`:          1,
		`looopy_principal_tool_calls_total{principal="local"}`:                    2,
		`looopy_rpc_requests_total{method="SendMessage",outcome="ok"}`:            1,
		`looopy_turns_running`:                                                    0,
		`looopy_agents_cached`:                                                    1,
		`looopy_sse_streams{kind="a2a"}`:                                          0,
		`looopy_tool_duration_seconds_bucket{outcome="ok",tool="calc",le="+Inf"}`: 1,
		`looopy_store_write_duration_seconds_count{op="commit_turn"}`:             1,
		`looopy_store_write_duration_seconds_count{op="checkpoint"}`:              2,
	}
	for k, v := range want {
		got, ok := series[k]
		if !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{`looopy_model_tokens_total{gen_ai_token_type="input"}`, `looopy_model_tokens_total{gen_ai_token_type="output"}`,
		`looopy_principal_tokens_total{principal="local"}`, `looopy_tool_duration_seconds_sum{outcome="ok",tool="calc"}`,
		`looopy_model_duration_seconds_sum{outcome="ok"}`, `looopy_store_size_bytes{part="vlog"}`} {
		if series[k] <= 0 {
			t.Errorf("%s = %v, want > 0", k, series[k])
		}
	}
	// The value log is preallocated sparse: the size is what it takes on
	// disk, far below its length of gigabytes.
	if v := series[`looopy_store_size_bytes{part="vlog"}`]; v > 1<<30 {
		t.Errorf("vlog size %v: the file length, not its disk usage", v)
	}
}

// scrape reads a Prometheus text exposition into series → value.
func scrape(t *testing.T, url string, token ...string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range token {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetricsToken(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Observability.MetricsToken = "metrics-TOKEN-1234"
	h := startHost(t, cfg)
	for tok, want := range map[string]int{"": http.StatusUnauthorized, "wrong": http.StatusUnauthorized, "metrics-TOKEN-1234": http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, h.URL()+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("token %q: status %d, want %d", tok, resp.StatusCode, want)
		}
	}
}

// With auth on and no metrics token, /metrics (which names principals)
// needs the admin token: an API key of a principal is not enough.
func TestMetricsNeedACredentialWithAuthOn(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: "key-alice-0001", Principal: "alice"}}}
	cfg.Admin.Token = "admin-TOKEN-5678"
	h := startHost(t, cfg)
	for tok, want := range map[string]int{"": http.StatusUnauthorized, "key-alice-0001": http.StatusUnauthorized,
		"admin-TOKEN-5678": http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, h.URL()+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("token %q: status %d, want %d", tok, resp.StatusCode, want)
		}
		if want == http.StatusOK && !strings.Contains(string(b), "looopy_") {
			t.Errorf("admin token: no metrics in %q", b)
		}
	}
}

// A principal over its token limit: the next turn ends as failed, saying
// which limit, and the usage survives a restart of the host.
func TestUsageLimitPerPrincipal(t *testing.T) {
	t.Parallel()
	cfg := obsConfig(t)
	cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: "key-alice-0001", Principal: "alice"}, {Key: "key-bob-0002", Principal: "bob"}}}
	cfg.Observability.UsageLimits = map[string]host.UsageLimit{"alice": {Tokens: 1}, "*": {ToolCalls: 100}}
	cfg.Observability.MetricsToken = "metrics-token-0003"
	h, _ := tracedHost(t, cfg, nil)
	alice, bob := client10(t, h.URL(), "key-alice-0001"), client10(t, h.URL(), "key-bob-0002")
	ctx := context.Background()
	// The first turn runs (nothing used yet) and goes over the limit
	// after its first model response, before its tools run.
	first := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("par")})
	if first.Status.State != a2a.TaskStateFailed || first.Status.Message == nil ||
		!strings.Contains(first.Status.Message.Parts[0].Text(), `principal "alice" has used`) {
		t.Fatalf("first turn: %s %+v, want failed by the budget", first.Status.State, first.Status.Message)
	}
	second := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("hello")})
	if second.Status.State != a2a.TaskStateFailed || !strings.Contains(second.Status.Message.Parts[0].Text(), "its limit is 1") {
		t.Fatalf("second turn: %s, want refused by the budget", second.Status.State)
	}
	// Bob has his own budget.
	if b := send(t, bob, ctx, &a2a.SendMessageRequest{Message: userMsg("par")}); b.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("bob's turn: %s", b.Status.State)
	}
	series := scrape(t, h.URL()+"/metrics", "metrics-token-0003")
	if series[`looopy_turns_total{reason="budget",status="failed"}`] != 2 {
		t.Fatalf("budget turns %v", series[`looopy_turns_total{reason="budget",status="failed"}`])
	}

	// After a restart the counters come back from the store.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h2, _ := tracedHost(t, cfg, nil)
	third := send(t, client10(t, h2.URL(), "key-alice-0001"), ctx, &a2a.SendMessageRequest{Message: userMsg("hello")})
	if third.Status.State != a2a.TaskStateFailed {
		t.Fatalf("after a restart alice's turn is %s, want failed by the budget", third.Status.State)
	}
}

// The plugins' series: loads and hot reloads (with their spans), instance
// creations, pools, memory, call durations.
func TestPluginMetricsAndReloadSpans(t *testing.T) {
	t.Parallel()
	cfg := obsConfig(t)
	cfg.Admin.Token = "admin-token-for-reload"
	h, exp := tracedHost(t, cfg, nil)
	c := client10(t, h.URL(), "")
	send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("par")})
	req, _ := http.NewRequest(http.MethodPost, h.URL()+"/admin/plugins/calculator/load", nil)
	req.Header.Set("Authorization", "Bearer admin-token-for-reload")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("reload: %d", resp.StatusCode)
	}
	series := scrape(t, h.URL()+"/metrics")
	for k, v := range map[string]float64{
		`looopy_plugin_loads_total{outcome="loaded",plugin="calculator"}`:                                                  1,
		`looopy_plugin_loads_total{outcome="reloaded",plugin="calculator"}`:                                                1,
		`looopy_plugin_call_duration_seconds_count{op="tool_call",outcome="ok",plugin="calculator",version="1.0.0"}`:       2,
		`looopy_plugin_call_duration_seconds_count{op="generate",outcome="error",plugin="scripted-model",version="1.0.0"}`: 1,
		`looopy_plugin_pool_instances{plugin="calculator",version="1.0.0"}`:                                                1,
	} {
		if got, ok := series[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{`looopy_plugin_instances_created_total{plugin="calculator",version="1.0.0"}`,
		`looopy_plugin_pool_size{plugin="scripted-model",version="1.0.0"}`,
		`looopy_plugin_pool_idle{plugin="scripted-model",version="1.0.0"}`,
		`looopy_plugin_memory_pages{plugin="calculator",version="1.0.0"}`,
		`looopy_plugin_memory_pages{plugin="scripted-model",version="1.0.0"}`} {
		if series[k] <= 0 {
			t.Errorf("%s = %v, want > 0", k, series[k])
		}
	}
	var reloaded bool
	for _, s := range exp.GetSpans() {
		if s.Name != "plugin.load" {
			continue
		}
		if v, _ := attrOf(s, "looopy.plugin.outcome"); v == "reloaded" {
			prev, _ := attrOf(s, "looopy.plugin.previous_version")
			name, _ := attrOf(s, "looopy.plugin.name")
			reloaded = name == "calculator" && prev == "1.0.0"
		}
	}
	if !reloaded {
		t.Fatalf("no plugin.load span of the calculator's reload: %s", fmtSpans(exp.GetSpans()))
	}
}

func TestUsageLimitsAreValidated(t *testing.T) {
	t.Parallel()
	for _, js := range []string{`{"observability":{"usageLimits":{"bob":{"tokens":-1}}}}`, `{"observability":{"usageLimits":{"":{"tokens":5}}}}`,
		`{"observability":{"usageLimits":{"bob":{"tokenz":5}}}}`} {
		if _, err := host.ParseConfig([]byte(js)); err == nil {
			t.Errorf("config %s accepted", js)
		}
	}
	c, err := host.ParseConfig([]byte(`{"observability":{"metricsToken":"env:X","usageLimits":{"*":{"tokens":1000,"toolCalls":50}}}}`))
	if err != nil || c.Observability.UsageLimits["*"].ToolCalls != 50 {
		t.Fatalf("valid config: %v %+v", err, c.Observability)
	}
}

// While a streamed turn runs, the gauges show it: one A2A stream open, one
// turn running; afterwards none.
func TestGaugesOfARunningTurn(t *testing.T) {
	t.Parallel()
	h, _ := tracedHost(t, obsConfig(t), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"slow"}]}}}`
	resp := openSSE(t, ctx, h.URL()+"/a2a/v1", "", body)
	var taskID string
	frames := readFrames(t, resp.Body, func(f frame) bool { return strings.Contains(f.Data, `"artifactUpdate"`) })
	if m := regexp.MustCompile(`"taskId":"([^"]+)"`).FindStringSubmatch(frames[len(frames)-1].Data); m != nil {
		taskID = m[1]
	}
	series := scrape(t, h.URL()+"/metrics")
	if series[`looopy_sse_streams{kind="a2a"}`] != 1 || series[`looopy_turns_running`] != 1 {
		t.Fatalf("during the turn: streams %v, running %v; want 1 and 1", series[`looopy_sse_streams{kind="a2a"}`], series[`looopy_turns_running`])
	}
	code, r := rpc(t, h.URL()+"/a2a/v1", "", `{"jsonrpc":"2.0","id":2,"method":"CancelTask","params":{"id":"`+taskID+`"}}`)
	if code != http.StatusOK || r.Error != nil {
		t.Fatalf("cancel %s: %d %s", taskID, code, r.raw)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // the stream ends with the canceled status
	series = scrape(t, h.URL()+"/metrics")
	if series[`looopy_turns_running`] != 0 || series[`looopy_turns_total{reason="canceled",status="canceled"}`] != 1 {
		t.Fatalf("after the cancel: running %v, canceled turns %v", series[`looopy_turns_running`], series[`looopy_turns_total{reason="canceled",status="canceled"}`])
	}
}
