//go:build long

package host_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The child's model answers "job <tag>": a ledger line, a slow stretch
// (kills land in it), a second ledger line, then the answer. Each ledger
// line is one real execution in the child.
const remoteChildScript = `{"rules":[{"name":"job","match":"^job (\\S+)$","steps":[
 {"text":"starting $1. ","delayMs":100},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 before"}}},
 {"text":"working on $1","delayMs":400},
 {"text":".","delayMs":400},
 {"text":".","delayMs":400},
 {"text":".","delayMs":400},
 {"text":". ","delayMs":400},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 after"}}},
 {"text":"finished $1","delayMs":100}]}]}`

// The parent's model hands "delegate <tag>" to the remote agent.
const remoteParentScript = `{"rules":[{"name":"delegate","match":"^delegate (\\S+)$","steps":[
 {"toolCall":{"name":"worker","arguments":{"prompt":"job $1"}}},
 {"text":"the worker says: {{lastToolResult}}"}]}]}`

// remotePair is a parent and a child host, each the real binary on its own
// data, on fixed loopback addresses (a host restarts where it was).
type remotePair struct {
	t                  *testing.T
	bin                string
	childCfg, parentCf string
	childAddr, parAddr string
	ledger             string
	log                *os.File
	child, parent      *hostProc
	env                []string // for both hosts, every start
}

func newRemotePair(t *testing.T, env ...string) *remotePair {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(root, "looopy")
	build := exec.Command("go", "build", "-o", bin, "./cmd/host")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build host: %v\n%s", err, out)
	}
	p := &remotePair{t: t, bin: bin, childAddr: freeAddr(t), parAddr: freeAddr(t), env: env}
	p.ledger = filepath.Join(root, "grants", "ledger")
	if err := os.MkdirAll(p.ledger, 0o755); err != nil {
		t.Fatal(err)
	}
	cplugins, pplugins := filepath.Join(root, "child-plugins"), filepath.Join(root, "parent-plugins")
	crashPlugin(t, cplugins, "scripted-model", map[string]any{"script": json.RawMessage(remoteChildScript)}, nil)
	crashPlugin(t, cplugins, "ledger", map[string]any{"dir": p.ledger}, []string{p.ledger})
	crashPlugin(t, pplugins, "scripted-model", map[string]any{"script": json.RawMessage(remoteParentScript)}, nil)
	limits := map[string]any{"heartbeat": "1s", "shutdownGrace": "1s", "turnTimeout": "5m"}
	write := func(name string, cfg map[string]any) string {
		b, _ := json.Marshal(cfg)
		f := filepath.Join(root, name)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	p.childCfg = write("child.json", map[string]any{
		"dataDir": filepath.Join(root, "child-data"), "pluginDir": cplugins, "logFormat": "json", "limits": limits,
		"plugins": map[string]any{"only": []string{"scripted-model", "ledger"}, "cacheDir": wasmCache},
	})
	p.parentCf = write("parent.json", map[string]any{
		"dataDir": filepath.Join(root, "parent-data"), "pluginDir": pplugins, "logFormat": "json", "limits": limits,
		"plugins": map[string]any{"only": []string{"scripted-model"}, "cacheDir": wasmCache},
		"remoteAgents": []map[string]any{{"name": "worker", "url": "http://" + p.childAddr,
			"allowPrivateNetwork": true, "reconnect": "120s"}},
	})
	var err error
	if p.log, err = os.Create(filepath.Join(root, "hosts.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.child != nil {
			p.child.kill()
		}
		if p.parent != nil {
			p.parent.kill()
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.log.Name())
			if len(b) > 30000 {
				b = b[len(b)-30000:]
			}
			t.Logf("hosts' log (tail):\n%s", b)
		}
		p.log.Close()
	})
	p.startChild()
	p.startParent()
	return p
}

func (p *remotePair) startChild() {
	p.child = startProcAt(p.t, p.bin, p.childCfg, p.childAddr, p.log, p.env...)
}
func (p *remotePair) startParent(env ...string) {
	p.parent = startProcAt(p.t, p.bin, p.parentCf, p.parAddr, p.log, append(slices.Clone(p.env), env...)...)
}

// startProcAt starts the host binary on addr and waits until it is ready.
func startProcAt(t *testing.T, bin, config, addr string, logw io.Writer, env ...string) *hostProc {
	t.Helper()
	cmd := exec.Command(bin, "-config", config, "-addr", addr, "-public-url", "http://"+addr)
	cmd.Stdout, cmd.Stderr = logw, logw
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start host: %v", err)
	}
	hp := &hostProc{cmd: cmd, base: "http://" + addr}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(hp.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return hp
			}
		}
		if time.Now().After(deadline) {
			hp.kill()
			t.Fatalf("host on %s not ready after 90s (see its log)", addr)
		}
	}
}

// ledgerLines counts the child's real executions of each ledger entry.
func (p *remotePair) ledgerLines() map[string]int {
	b, _ := os.ReadFile(filepath.Join(p.ledger, "ledger.log"))
	out := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if _, entry, ok := strings.Cut(l, "\t"); ok {
			out[entry]++
		}
	}
	return out
}

// awaitLedger waits (fail-fast guard: 60s) until the ledger has entry.
func (p *remotePair) awaitLedger(entry string) {
	p.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); p.ledgerLines()[entry] == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.t.Fatalf("the child never wrote %q", entry)
		}
	}
}

// delegate starts "delegate <tag>" on the parent and returns its task id.
func (p *remotePair) delegate(ctx context.Context, tag string) a2a.TaskID {
	p.t.Helper()
	msg := userMsg("delegate " + tag)
	msg.ContextID = "ctx-" + tag
	r, err := client10(p.t, p.parent.base, "").SendMessage(ctx, &a2a.SendMessageRequest{Message: msg,
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		p.t.Fatalf("send %s: %v", tag, err)
	}
	return r.(*a2a.Task).ID
}

// awaitEnd polls a task on base until it is terminal (guard: 3 minutes).
func awaitEnd(t *testing.T, ctx context.Context, base string, id a2a.TaskID) *a2a.Task {
	t.Helper()
	c := client10(t, base, "")
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		tk, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
		if err == nil && tk.Status.State.Terminal() {
			return tk
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s never ended (last: %v, %v)", id, tk, err)
		}
	}
}

// childTasksOf lists the tasks the child holds that are not sub-tasks.
func (p *remotePair) childTasksOf(ctx context.Context) []*a2a.Task {
	p.t.Helper()
	list, err := client10(p.t, p.child.base, "").ListTasks(ctx, &a2a.ListTasksRequest{IncludeArtifacts: true})
	if err != nil {
		p.t.Fatalf("list the child's tasks: %v", err)
	}
	return list.Tasks
}

// checkOnce: the job ran in the child exactly once, whole.
func (p *remotePair) checkOnce(tag string) {
	p.t.Helper()
	lines := p.ledgerLines()
	if lines[tag+" before"] != 1 || lines[tag+" after"] != 1 {
		p.t.Fatalf("the child's ledger for %s: %v, want each line once (the child ran exactly once)", tag, lines)
	}
}

// TestLongRemoteParentKilledMidCall: the parent host is killed (SIGKILL)
// while its remote sub-agent works, and restarted on the same data. Its
// resumed turn subscribes to the remote task it had started (whose id it
// recorded when the child acknowledged), never sends the message again,
// and takes the child's answer: the child ran once (its ledger), the
// parent completes with the child's answer. A second call is canceled after
// the parent's restart: the cancel reaches the child's task.
func TestLongRemoteParentKilledMidCall(t *testing.T) {
	p := newRemotePair(t)
	ctx := context.Background()

	id := p.delegate(ctx, "p1")
	p.awaitLedger("p1 before") // the child is mid-job
	p.parent.kill()
	if n := p.ledgerLines()["p1 after"]; n != 0 {
		t.Fatalf("the child finished before the parent was killed: the kill missed the call")
	}
	p.startParent()
	task := awaitEnd(t, ctx, p.parent.base, id)
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "the worker says: finished p1") {
		t.Fatalf("parent after its restart: %s %q, want the child's whole answer", task.Status.State, artifactText(task))
	}
	p.checkOnce("p1")
	if tks := p.childTasksOf(ctx); len(tks) != 1 || tks[0].Status.State != a2a.TaskStateCompleted ||
		!strings.Contains(artifactText(tks[0]), "finished p1") {
		t.Fatalf("the child's tasks: %d, want one (p1's, completed): the message was sent again", len(tks))
	}

	// Cancel after a restart: the resumed call knows the remote task.
	id2 := p.delegate(ctx, "p2")
	p.awaitLedger("p2 before")
	p.parent.kill()
	p.startParent()
	var remote a2a.TaskID
	for _, tk := range p.childTasksOf(ctx) {
		if tk.Status.State == a2a.TaskStateWorking {
			remote = tk.ID
		}
	}
	if remote == "" {
		t.Fatal("no working task for p2 on the child")
	}
	// The parent's resumed call must follow the task before the cancel,
	// or the cancel would prove nothing: its conversation's stream says
	// when it does.
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	resp := openSSE(t, sctx, p.parent.base+"/events/ctx-p2", "", "")
	readFrames(t, resp.Body, func(f frame) bool {
		return strings.Contains(f.Data, "following the remote task again") && strings.Contains(f.Data, string(remote))
	})
	resp.Body.Close()
	scancel()
	if _, err := client10(t, p.parent.base, "").CancelTask(ctx, &a2a.CancelTaskRequest{ID: id2}); err != nil {
		t.Fatalf("cancel the parent: %v", err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		tk, err := client10(t, p.child.base, "").GetTask(ctx, &a2a.GetTaskRequest{ID: remote})
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status.State == a2a.TaskStateCanceled {
			break
		}
		if tk.Status.State.Terminal() || time.Now().After(deadline) {
			t.Fatalf("the child's task after the parent's cancel: %s, want canceled", tk.Status.State)
		}
	}
	if n := p.ledgerLines()["p2 before"]; n != 1 {
		t.Fatalf("p2 started %d times in the child", n)
	}
}

// TestLongRemoteChildKilledMidCall: the child host is killed (SIGKILL)
// mid-job and restarted on the same data and address. The child resumes
// its own task from its checkpoint (its completed ledger call is not run
// again); the parent, whose stream broke, keeps trying (remoteAgents'
// reconnect), follows the task again once the child is back and gets its
// answer: the parent completes with the child's answer, each ledger line
// once.
func TestLongRemoteChildKilledMidCall(t *testing.T) {
	p := newRemotePair(t)
	ctx := context.Background()
	id := p.delegate(ctx, "c1")
	p.awaitLedger("c1 before")
	p.child.kill()
	if n := p.ledgerLines()["c1 after"]; n != 0 {
		t.Fatalf("the child finished before it was killed: the kill missed the call")
	}
	p.startChild()
	task := awaitEnd(t, ctx, p.parent.base, id)
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "the worker says: ") ||
		!strings.Contains(artifactText(task), "finished c1") {
		t.Fatalf("parent after the child's restart: %s %q, want the child's answer", task.Status.State, artifactText(task))
	}
	p.checkOnce("c1")
}

// TestLongRemoteParentKilledBeforeRecording: the parent host kills itself
// the moment the child has acknowledged the message and before the remote
// task's id is recorded (LOOOPY_CRASHPOINT=remote-acknowledged). The
// resumed call finds the task by the call's deterministic context id
// (ListTasks) and follows it: the message is not sent again, the child ran
// once, the parent completes with the child's answer.
func TestLongRemoteParentKilledBeforeRecording(t *testing.T) {
	p := newRemotePair(t)
	ctx := context.Background()
	p.parent.kill()
	p.startParent("LOOOPY_CRASHPOINT=remote-acknowledged:1")
	id := p.delegate(ctx, "a1")
	exited := make(chan error, 1)
	go func() { exited <- p.parent.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the parent never reached the crash point")
	}
	p.parent = nil
	if tks := p.childTasksOf(ctx); len(tks) != 1 {
		t.Fatalf("the child holds %d tasks when the parent died, want the one it acknowledged", len(tks))
	}
	p.startParent()
	task := awaitEnd(t, ctx, p.parent.base, id)
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "the worker says: finished a1") {
		t.Fatalf("parent after its restart: %s %q, want the child's answer", task.Status.State, artifactText(task))
	}
	p.checkOnce("a1")
	if tks := p.childTasksOf(ctx); len(tks) != 1 {
		t.Fatalf("the child holds %d tasks: the message was sent again", len(tks))
	}
}

// traceCollector is an OTLP/HTTP endpoint that keeps, per task id, the
// trace ids of the agent.execute spans it was sent.
type traceCollector struct {
	mu     sync.Mutex
	traces map[string]map[string]bool // task id → trace ids
}

func (c *traceCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				if sp.Name != "agent.execute" {
					continue
				}
				for _, kv := range sp.Attributes {
					if kv.Key == "looopy.task_id" {
						id := kv.Value.GetStringValue()
						if c.traces[id] == nil {
							c.traces[id] = map[string]bool{}
						}
						c.traces[id][hex.EncodeToString(sp.TraceId)] = true
					}
				}
			}
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func (c *traceCollector) of(task string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id := range c.traces[task] {
		out = append(out, id)
	}
	return out
}

// TestLongRemoteOneTrace: both hosts, the real binary, export their spans
// to one OTLP collector; the parent's turn and the child's turn of the
// remote task are in one trace (the call carries traceparent).
func TestLongRemoteOneTrace(t *testing.T) {
	col := &traceCollector{traces: map[string]map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: col}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p := newRemotePair(t, "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+ln.Addr().String(), "OTEL_BSP_SCHEDULE_DELAY=200")
	ctx := context.Background()
	id := p.delegate(ctx, "t1")
	if task := awaitEnd(t, ctx, p.parent.base, id); task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("parent: %s %q", task.Status.State, artifactText(task))
	}
	tks := p.childTasksOf(ctx)
	if len(tks) != 1 {
		t.Fatalf("the child holds %d tasks, want 1", len(tks))
	}
	var parentTraces, childTraces []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		parentTraces, childTraces = col.of(string(id)), col.of(string(tks[0].ID))
		if len(parentTraces) > 0 && len(childTraces) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans never exported: parent's task %v, child's %v", parentTraces, childTraces)
		}
	}
	if len(parentTraces) != 1 || len(childTraces) != 1 || parentTraces[0] != childTraces[0] {
		t.Fatalf("parent's turn in traces %v, child's in %v: want one trace across both hosts", parentTraces, childTraces)
	}
}

// TestLongRemoteChildLostTheTask: the child is killed mid-job and comes
// back on the same address with empty data (its task lost). The parent's
// call, following the task again, is told the task is not found and ends
// with an error result the parent's model reads; the parent's task
// completes with it, and nothing is sent again.
func TestLongRemoteChildLostTheTask(t *testing.T) {
	p := newRemotePair(t)
	ctx := context.Background()
	id := p.delegate(ctx, "l1")
	p.awaitLedger("l1 before")
	p.child.kill()
	b, err := os.ReadFile(p.childCfg)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["dataDir"] = filepath.Join(t.TempDir(), "fresh-child-data")
	b, _ = json.Marshal(cfg)
	fresh := filepath.Join(t.TempDir(), "child-fresh.json")
	if err := os.WriteFile(fresh, b, 0o644); err != nil {
		t.Fatal(err)
	}
	p.child = startProcAt(t, p.bin, fresh, p.childAddr, p.log)
	task := awaitEnd(t, ctx, p.parent.base, id)
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), `agent "worker" failed: the remote agent no longer knows its task`) {
		t.Fatalf("parent after the child lost its task: %s %q, want the not-found error result", task.Status.State, artifactText(task))
	}
	if tks := p.childTasksOf(ctx); len(tks) != 0 {
		t.Fatalf("the fresh child holds %d tasks: the message was sent again", len(tks))
	}
	if n := p.ledgerLines()["l1 before"]; n != 1 {
		t.Fatalf("l1 started %d times", n)
	}
}

// TestLongRemoteBothKilledMidCall: the child and then the parent are
// killed mid-job; the parent comes back first, while the child is still
// down (its card cannot be fetched, so the agent's tool is not offered).
// The resumed call is still taken up: it waits for the agent (reconnect),
// the child comes back and resumes its own task, and the parent gets its
// answer; each ledger line once, one task on the child.
func TestLongRemoteBothKilledMidCall(t *testing.T) {
	p := newRemotePair(t)
	ctx := context.Background()
	id := p.delegate(ctx, "b1")
	p.awaitLedger("b1 before")
	p.child.kill()
	p.parent.kill()
	p.child = nil
	p.startParent()
	// The parent's resumed call waits for the child: its sub-task says
	// it follows the task again only once the child is back.
	p.startChild()
	task := awaitEnd(t, ctx, p.parent.base, id)
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "the worker says: finished b1") {
		t.Fatalf("parent after both restarts: %s %q, want the child's answer", task.Status.State, artifactText(task))
	}
	p.checkOnce("b1")
	if tks := p.childTasksOf(ctx); len(tks) != 1 {
		t.Fatalf("the child holds %d tasks: the message was sent again", len(tks))
	}
}
