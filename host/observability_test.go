package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/looopy-go/looopy/host"
)

// obsScript drives the scripted model for the observability tests:
//   - "par": a transient error on the first attempt (the loop retries),
//     then two parallel calculator calls, one of which fails, then text;
//   - "slow": text in many delayed chunks (to cancel mid-call).
const obsScript = `{"rules":[
 {"name":"par","match":"^par$","steps":[
   {"error":{"code":"overloaded","message":"busy, retry","transient":true,"attempts":1}},
   {"toolCall":{"name":"calc","arguments":{"expression":"6*7"}}},
   {"toolCall":{"name":"calc","arguments":{"expression":"1/("}}},
   {"text":"done: {{lastToolResult}}"}]},
 {"name":"slow","match":"^slow$","steps":[{"text":" t{{i}}","repeat":400,"delayMs":20}]}
]}`

// copyPlugin copies an example plugin into root, lets edit change its
// manifest, and writes the manifest with the digest of the wasm.
func copyPlugin(t testing.TB, root, name string, edit func(m map[string]any)) {
	t.Helper()
	src := filepath.Join("..", "examples", "plugins", name)
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
	if edit != nil {
		edit(m)
	}
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "plugin.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tracedHost runs a host whose spans go to an in-memory exporter.
func tracedHost(t *testing.T, cfg host.Config, logs io.Writer) (*testHost, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	m := host.NewMain()
	m.Config, m.Stdout, m.SpanExporter = cfg, io.Discard, exp
	if logs != nil {
		m.Stdout = logs
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("run host: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &testHost{Main: m, dir: cfg.DataDir}, exp
}

func attrOf(s tracetest.SpanStub, key string) (string, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

// trace is the spans of one turn, found by the task id on agent.turn.
type turnTrace struct {
	spans  []tracetest.SpanStub
	byID   map[string]tracetest.SpanStub
	parent func(s tracetest.SpanStub) (tracetest.SpanStub, bool)
}

func (tt turnTrace) named(prefix string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tt.spans {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// waitTurnTrace waits until the agent.turn span of task has ended, and
// returns every span of its trace.
func waitTurnTrace(t *testing.T, exp *tracetest.InMemoryExporter, task string) turnTrace {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, s := range exp.GetSpans() {
			if v, _ := attrOf(s, "looopy.task_id"); s.Name == "agent.turn" && v == task {
				tt := turnTrace{byID: map[string]tracetest.SpanStub{}}
				for _, o := range exp.GetSpans() {
					if o.SpanContext.TraceID() == s.SpanContext.TraceID() {
						tt.spans = append(tt.spans, o)
						tt.byID[o.SpanContext.SpanID().String()] = o
					}
				}
				tt.parent = func(c tracetest.SpanStub) (tracetest.SpanStub, bool) {
					p, ok := tt.byID[c.Parent.SpanID().String()]
					return p, ok
				}
				return tt
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no agent.turn span for task %s; spans: %v", task, spanNames(exp.GetSpans()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func spanNames(ss tracetest.SpanStubs) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func obsConfig(t *testing.T) host.Config {
	t.Helper()
	root := filepath.Join(t.TempDir(), "plugins")
	copyPlugin(t, root, "scripted-model", func(m map[string]any) { m["config"] = map[string]any{"script": obsScript} })
	copyPlugin(t, root, "calculator", nil)
	cfg := baseConfig(t.TempDir())
	cfg.PluginDir = root
	cfg.Plugins.Only = nil
	cfg.Plugins.NoWatch = true
	return cfg
}

func TestTraceOfATurnWithParallelToolsAFailingToolAndARetry(t *testing.T) {
	t.Parallel()
	h, exp := tracedHost(t, obsConfig(t), nil)
	c := client10(t, h.URL(), "")
	task := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("par")})
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task %s", task.Status.State)
	}
	tt := waitTurnTrace(t, exp, string(task.ID))

	// The hierarchy: agent.turn → agent.execute → iteration[n] →
	// llm.call | tools.execute → tool[calc].
	wantParent := map[string]string{"agent.execute": "agent.turn", "iteration[": "agent.execute",
		"llm.call": "iteration[", "tools.execute": "iteration[", "tool[calc]": "tools.execute"}
	for child, parent := range wantParent {
		spans := tt.named(child)
		if len(spans) == 0 {
			t.Fatalf("no %s span; spans: %v", child, spanNames(tt.spans))
		}
		for _, s := range spans {
			p, ok := tt.parent(s)
			if !ok || !strings.HasPrefix(p.Name, parent) {
				t.Errorf("%s has parent %q, want %s", s.Name, p.Name, parent)
			}
		}
	}
	// The store writes that matter: the checkpoints (after the model asked
	// for tools, after the tools ran) and the turn's commit.
	commits := tt.named("store.commit_turn")
	if len(commits) != 1 || len(tt.named("store.checkpoint")) != 2 {
		t.Errorf("%d store.commit_turn, %d store.checkpoint spans; want 1 and 2", len(commits), len(tt.named("store.checkpoint")))
	} else if p, _ := tt.parent(commits[0]); p.Name != "agent.execute" {
		t.Errorf("store.commit_turn under %q", p.Name)
	} else if v, _ := attrOf(commits[0], "looopy.status"); v != "completed" {
		t.Errorf("store.commit_turn status %q", v)
	}
	turn := tt.named("agent.turn")[0]
	for k, want := range map[string]string{"looopy.context_id": task.ContextID, "looopy.task_id": string(task.ID)} {
		if v, _ := attrOf(turn, k); v != want {
			t.Errorf("agent.turn %s = %q, want %q", k, v, want)
		}
	}
	exec := tt.named("agent.execute")[0]
	for k, want := range map[string]string{"looopy.status": "completed", "looopy.iterations": "2", "looopy.tool_calls": "2"} {
		if v, _ := attrOf(exec, k); v != want {
			t.Errorf("agent.execute %s = %q, want %q", k, v, want)
		}
	}
	// The retry: the first llm.call failed (recorded with its error), the
	// second attempt succeeded, both under iteration[1].
	var failed, ok int
	for _, s := range tt.named("llm.call") {
		if s.Status.Code == codes.Error {
			failed++
			if !strings.Contains(s.Status.Description, "busy, retry") {
				t.Errorf("failed llm.call status %q", s.Status.Description)
			}
			if v, _ := attrOf(s, "looopy.attempt"); v != "1" {
				t.Errorf("failed llm.call attempt %s", v)
			}
			continue
		}
		ok++
		if _, has := attrOf(s, "gen_ai.usage.output_tokens"); !has {
			t.Errorf("llm.call without token usage: %v", s.Attributes)
		}
	}
	if failed != 1 || ok != 2 {
		t.Errorf("llm.call spans: %d failed, %d ok; want 1 and 2", failed, ok)
	}
	// Parallel tools: both calc spans under the same tools.execute, one failed.
	calcs := tt.named("tool[calc]")
	if len(calcs) != 2 || calcs[0].Parent.SpanID() != calcs[1].Parent.SpanID() {
		t.Fatalf("calc spans %d, want 2 under one tools.execute", len(calcs))
	}
	var toolErrs int
	for _, s := range calcs {
		succ, _ := attrOf(s, "looopy.tool.success")
		if s.Status.Code == codes.Error {
			toolErrs++
			if succ != "false" {
				t.Errorf("failed tool span says success=%s", succ)
			}
		}
	}
	if toolErrs != 1 {
		t.Errorf("%d failed calc spans, want 1", toolErrs)
	}
	// Each plugin call has its span: name, version, operation; the failed
	// calculator call is marked failed.
	calls := map[string]int{}
	var pluginErrs int
	for _, s := range tt.named("plugin.call") {
		p, _ := tt.parent(s)
		name, _ := attrOf(s, "looopy.plugin.name")
		op, _ := attrOf(s, "looopy.plugin.op")
		version, _ := attrOf(s, "looopy.plugin.version")
		calls[p.Name+" "+name+" "+op+" "+version]++
		if s.Status.Code == codes.Error {
			pluginErrs++
			if p.Name != "llm.call" || !strings.Contains(s.Status.Description, "busy, retry") {
				t.Errorf("failed plugin.call under %s: %q", p.Name, s.Status.Description)
			}
		}
	}
	want := map[string]int{"llm.call scripted-model generate 1.0.0": 3, "tool[calc] calculator tool_call 1.0.0": 2}
	for k, n := range want {
		if calls[k] != n {
			t.Errorf("plugin.call %q: %d spans, want %d (all: %v)", k, calls[k], n, calls)
		}
	}
	// The model plugin's error fails its call; the calculator answered the
	// bad expression with a tool error, a call that worked.
	if pluginErrs != 1 {
		t.Errorf("%d failed plugin.call spans, want 1", pluginErrs)
	}
}

func TestTraceOfACanceledTurn(t *testing.T) {
	t.Parallel()
	h, exp := tracedHost(t, obsConfig(t), nil)
	c := client10(t, h.URL(), "")
	ctx := context.Background()
	var taskID a2a.TaskID
	chunks := 0
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("slow")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			taskID = e.ID
		case *a2a.TaskArtifactUpdateEvent:
			if chunks++; chunks == 2 {
				if _, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: taskID}); err != nil {
					t.Fatalf("cancel: %v", err)
				}
			}
		}
	}
	tt := waitTurnTrace(t, exp, string(taskID))
	exec := tt.named("agent.execute")[0]
	if v, _ := attrOf(exec, "looopy.status"); v != "canceled" || exec.Status.Code != codes.Error ||
		!strings.Contains(exec.Status.Description, "canceled") {
		t.Fatalf("agent.execute status %s %q (looopy.status %s), want an error saying canceled", exec.Status.Code, exec.Status.Description, v)
	}
	turn := tt.named("agent.turn")[0]
	if turn.Status.Code != codes.Error {
		t.Fatalf("agent.turn status %v", turn.Status)
	}
	calls := tt.named("llm.call")
	if len(calls) != 1 || calls[0].Status.Code != codes.Error {
		t.Fatalf("llm.call spans %d (status %v), want 1 failed", len(calls), calls)
	}
	// The CancelTask request has its own span, named after the method.
	var cancelSpan bool
	for _, s := range exp.GetSpans() {
		if s.Name == "CancelTask" {
			cancelSpan = true
		}
	}
	if !cancelSpan {
		t.Fatalf("no CancelTask span: %v", spanNames(exp.GetSpans()))
	}
}

// A client's traceparent is continued by the span of its JSON-RPC call.
func TestRequestSpanContinuesTheClientsTrace(t *testing.T) {
	t.Parallel()
	h, exp := tracedHost(t, baseConfig(t.TempDir()), nil)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hello"}]}}}`
	code, r := rpc(t, h.URL()+"/a2a/v1", "", body, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if code != http.StatusOK || r.Error != nil {
		t.Fatalf("send: %d %s", code, r.raw)
	}
	var span *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "SendMessage" {
			span = &s
		}
	}
	if span == nil {
		t.Fatalf("no SendMessage span: %v", spanNames(exp.GetSpans()))
	}
	if span.SpanContext.TraceID().String() != traceID || span.Parent.SpanID().String() != parentID || !span.Parent.IsRemote() {
		t.Fatalf("SendMessage span in trace %s under %s, want %s under %s", span.SpanContext.TraceID(), span.Parent.SpanID(), traceID, parentID)
	}
	if span.SpanKind.String() != "server" {
		t.Fatalf("span kind %s", span.SpanKind)
	}
	// The turn runs on the host's context but in the request's trace, as a
	// child of the request's span.
	var turn *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "agent.turn" {
			turn = &s
		}
	}
	if turn == nil || turn.SpanContext.TraceID().String() != traceID || turn.Parent.SpanID() != span.SpanContext.SpanID() {
		t.Fatalf("agent.turn not under the SendMessage span: %+v", turn)
	}
	if v, _ := attrOf(*span, "rpc.method"); v != "SendMessage" {
		t.Fatalf("rpc.method %q", v)
	}
	// An unknown method gets a span too, marked failed, under a fixed name
	// (a client cannot mint span names or metric series).
	_, _ = rpc(t, h.URL()+"/a2a/v1", "", `{"jsonrpc":"2.0","id":2,"method":"NoSuchMethod"}`)
	var bad bool
	for _, s := range exp.GetSpans() {
		if v, _ := attrOf(s, "rpc.method"); s.Name == "jsonrpc" && v == "NoSuchMethod" && s.Status.Code == codes.Error {
			bad = true
		}
	}
	if !bad {
		t.Fatalf("no failed span for an unknown method: %v", spanNames(exp.GetSpans()))
	}
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)

// syncLines collects log output safely from many goroutines.
type syncLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLines) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLines) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func fmtSpans(ss tracetest.SpanStubs) string {
	var sb strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&sb, "%s %s %v %v\n", s.Name, s.Status.Description, s.Attributes, s.Events)
	}
	return sb.String()
}

// A plugin's log line (c-textstats logs through looopy.log) carries the
// plugin's name and the trace and span of its call; the loop's retry
// warning carries the turn's trace.
func TestLogLinesCarryTheTraceAndThePluginsName(t *testing.T) {
	t.Parallel()
	cfg := obsConfig(t)
	copyPlugin(t, cfg.PluginDir, "c-textstats", nil)
	script := strings.Replace(obsScript, `"rules":[`, `"rules":[
 {"name":"words","match":"^words$","steps":[
   {"error":{"code":"overloaded","message":"busy","transient":true,"attempts":1}},
   {"toolCall":{"name":"word_count","arguments":{"text":"one two three"}}},{"text":"ok"}]},`, 1)
	copyPlugin(t, cfg.PluginDir, "scripted-model", func(m map[string]any) { m["config"] = map[string]any{"script": script} })
	cfg.LogFormat = "json"
	var logs syncLines
	h, exp := tracedHost(t, cfg, &logs)
	c := client10(t, h.URL(), "")
	task := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("words")})
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task %s", task.Status.State)
	}
	tt := waitTurnTrace(t, exp, string(task.ID))
	traceID := tt.named("agent.turn")[0].SpanContext.TraceID().String()
	var pluginSpan string
	for _, s := range tt.named("plugin.call") {
		if v, _ := attrOf(s, "looopy.plugin.name"); v == "c-textstats" {
			pluginSpan = s.SpanContext.SpanID().String()
		}
	}
	var sawPlugin, sawRetry bool
	for _, l := range strings.Split(logs.String(), "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) != nil {
			continue
		}
		switch {
		case strings.HasPrefix(fmt.Sprint(line["msg"]), "word_count: 3 words"):
			sawPlugin = true
			if line["plugin"] != "c-textstats" || line["trace_id"] != traceID || line["span_id"] != pluginSpan {
				t.Errorf("plugin log line %v: want plugin c-textstats, trace %s, span %s", line, traceID, pluginSpan)
			}
		case line["msg"] == "retrying model call":
			sawRetry = true
			if line["trace_id"] != traceID {
				t.Errorf("retry log line %v: want trace %s", line, traceID)
			}
		}
	}
	if !sawPlugin || !sawRetry {
		t.Fatalf("plugin line seen %v, retry line seen %v in:\n%s", sawPlugin, sawRetry, logs.String())
	}
}
