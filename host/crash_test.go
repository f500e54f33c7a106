//go:build long

package host_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// crashScript makes the model answer "run <tag>" with five rounds, each a
// slow ledger_append call, then a slow final answer: a turn lasts a few
// seconds, so kills land in model calls, between rounds and in tool calls.
const crashScript = `{"rules":[{"name":"run","match":"^run (\\S+)$","steps":[
 {"text":"starting $1. ","delayMs":120},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 step 1"}},"delayMs":120},
 {"text":"step 1 done. ","delayMs":120},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 step 2"}},"delayMs":120},
 {"text":"step 2 done. ","delayMs":120},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 step 3"}},"delayMs":120},
 {"text":"step 3 done. ","delayMs":120},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 step 4"}},"delayMs":120},
 {"text":"step 4 done. ","delayMs":120},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 step 5"}},"delayMs":120},
 {"text":"finished $1","delayMs":120}]}]}`

const (
	crashContexts = 40
	crashRounds   = 6
	crashCalls    = 5
	crashAdmin    = "crash-admin"
)

// crashPlugin writes a plugin folder name/ under dir from the example's
// wasm and template, with the given config.
func crashPlugin(t *testing.T, dir, name string, config map[string]any, paths []string) {
	t.Helper()
	src := filepath.Join("..", "examples", "plugins", name)
	wasm, err := os.ReadFile(filepath.Join(src, name+".wasm"))
	if err != nil {
		t.Fatalf("read %s wasm (run make plugins-go): %v", name, err)
	}
	dst := filepath.Join(dir, name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, name+".wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(src, "plugin.template.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(tmpl, &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	m["sha256"] = hex.EncodeToString(sum[:])
	m["config"] = config
	// The template's grant names a placeholder only the build fills; the
	// copies here grant what the test gives, or nothing.
	if caps, ok := m["capabilities"].(map[string]any); ok {
		delete(caps, "allowedPaths")
	}
	if paths != nil {
		caps, _ := m["capabilities"].(map[string]any)
		var ap []any
		for _, p := range paths {
			ap = append(ap, map[string]any{"path": p})
		}
		caps["allowedPaths"] = ap
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dst, "plugin.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostProc is the host binary running as a child process.
type hostProc struct {
	cmd  *exec.Cmd
	base string
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func startProc(t *testing.T, bin, config string, logw io.Writer, env ...string) *hostProc {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(bin, "-config", config, "-addr", addr, "-public-url", "http://"+addr)
	cmd.Stdout, cmd.Stderr = logw, logw
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start host: %v", err)
	}
	p := &hostProc{cmd: cmd, base: "http://" + addr}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			p.kill()
			t.Fatalf("host not ready after 60s (see its log)")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// longHostFiles writes cfg as root/looopy.json for the real binary and
// opens root/host.log for its output; when the test fails, the log's tail
// is shown.
func longHostFiles(t *testing.T, root string, cfg map[string]any) (config string, logf *os.File) {
	t.Helper()
	cb, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	config = filepath.Join(root, "looopy.json")
	if err := os.WriteFile(config, cb, 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err = os.Create(filepath.Join(root, "host.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("host log (tail):\n%s", b)
		}
	})
	return config, logf
}

// hostBinary returns the path of the real looopy binary the black-box
// tests run, built from this checkout once per test process (binaries).
func hostBinary(tb testing.TB) string {
	tb.Helper()
	bin, _ := binaries(tb)
	return bin
}

// kill ends the process with SIGKILL: nothing is flushed, nothing closed.
func (p *hostProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// TestLongCrashRecovery is issue 5's proof with the real binary: tasks that
// call a non-idempotent ledger tool, the host killed with SIGKILL at random
// moments over several rounds and restarted on the same data. Then every
// task has ended, completed with its whole conversation; every ledger call
// the journal shows completed ran exactly once, an interrupted one at most
// once, and nothing ran that the journal does not know; and the event
// streams, replayed from the start, have consecutive ids across the crashes.
func TestLongCrashRecovery(t *testing.T) {
	root := t.TempDir()
	bin := hostBinary(t)
	plugins := filepath.Join(root, "plugins")
	// the ledger writes beside the plugin folder, in the grants folder the
	// host allows by default (never inside the plugin folder)
	ledgerData := filepath.Join(root, "grants", "ledger")
	crashPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(crashScript)}, nil)
	crashPlugin(t, plugins, "ledger", map[string]any{"dir": ledgerData}, []string{ledgerData})
	if err := os.MkdirAll(ledgerData, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"dataDir":   filepath.Join(root, "data"),
		"pluginDir": plugins,
		"plugins":   map[string]any{"only": []string{"scripted-model", "ledger"}, "cacheDir": wasmCache},
		"admin":     map[string]any{"token": crashAdmin},
		"limits":    map[string]any{"heartbeat": "1s", "shutdownGrace": "1s", "turnTimeout": "5m"},
		"logFormat": "json",
	}
	config, logf := longHostFiles(t, root, cfg)

	ctx := context.Background()
	tasks := map[string]string{} // tag -> task id
	// A client per context follows its event stream live through the
	// crashes, reconnecting with Last-Event-ID to whichever host is up.
	watchers := newStreamWatchers()
	defer watchers.stop()
	startTasks := func(p *hostProc, from, to int) {
		c := client10(t, p.base, "")
		for i := from; i < to; i++ {
			tag := fmt.Sprintf("c%02d", i)
			msg := userMsg("run " + tag)
			msg.ContextID = "ctx-" + tag
			r, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg,
				Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
			if err != nil {
				t.Fatalf("send %s: %v", tag, err)
			}
			task, ok := r.(*a2a.Task)
			if !ok {
				t.Fatalf("send %s: got %T, want a task", tag, r)
			}
			tasks[tag] = string(task.ID)
			watchers.watch(tag)
		}
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	p := startProc(t, bin, config, logf)
	watchers.base.Store(&p.base)
	startTasks(p, 0, crashContexts/2)
	for round := 1; round <= crashRounds; round++ {
		if round == 2 {
			startTasks(p, crashContexts/2, crashContexts) // a second wave, started between crashes
		}
		working := countWorking(t, p.base)
		wait := time.Duration(300+rng.IntN(2200)) * time.Millisecond
		how := "at random"
		if round%3 == 0 {
			// Kill the instant a client is told about a new task: the
			// task and its input must be durable already.
			wait, how = 0, "right after acknowledging a task"
			tag := fmt.Sprintf("ack%d", round)
			msg := userMsg("run " + tag)
			msg.ContextID = "ctx-" + tag
			r, err := client10(t, p.base, "").SendMessage(ctx, &a2a.SendMessageRequest{Message: msg,
				Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
			if err != nil {
				t.Fatalf("send %s: %v", tag, err)
			}
			tasks[tag] = string(r.(*a2a.Task).ID)
			p.kill()
			watchers.watch(tag)
		} else if round%2 == 0 {
			// Aim at a tool call in flight: kill as a ledger line is written.
			wait = time.Duration(200+rng.IntN(800)) * time.Millisecond
			how = "as a ledger call wrote its line"
			time.Sleep(wait)
			awaitLedgerLine(filepath.Join(ledgerData, "ledger.log"))
		} else {
			time.Sleep(wait)
		}
		p.kill()
		t.Logf("round %d: killed the host %s (%v after it was ready), %d tasks working before", round, how, wait, working)
		p = startProc(t, bin, config, logf)
		watchers.base.Store(&p.base)
	}
	defer p.kill()

	// Every task ends.
	c := client10(t, p.base, "")
	final := map[string]*a2a.Task{}
	deadline := time.Now().Add(5 * time.Minute)
	for tag, id := range tasks {
		for {
			task, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
			if err != nil {
				t.Fatalf("get task %s (%s): %v", tag, id, err)
			}
			if task.Status.State.Terminal() {
				final[tag] = task
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s (%s) still %s after 5 minutes", tag, id, task.Status.State)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Every conversation is whole: the input, then the final answer.
	for tag, task := range final {
		if task.Status.State != a2a.TaskStateCompleted {
			t.Errorf("task %s: %s (%v), want completed", tag, task.Status.State, statusText(task))
			continue
		}
		if len(task.History) == 0 || task.History[0].Role != a2a.MessageRoleUser || partsText(task.History[0].Parts) != "run "+tag {
			t.Errorf("task %s: history does not open with its input: %v", tag, historyText(task))
		}
		if got := artifactText(task); !strings.Contains(got, "finished "+tag) {
			t.Errorf("task %s: final answer %q, want it to say finished %s", tag, got, tag)
		}
		// Each message once, in order, however many times the turn resumed.
		user, agent := string(a2a.MessageRoleUser)+": ", string(a2a.MessageRoleAgent)+": "
		want := []string{user + "run " + tag, agent + "starting " + tag + ". "}
		for i := 1; i < crashCalls; i++ {
			want = append(want, fmt.Sprintf("%sstep %d done. ", agent, i))
		}
		want = append(want, agent+"finished "+tag)
		if got := historyText(task); !slices.Equal(got, want) {
			t.Errorf("task %s: history %q, want %q", tag, got, want)
		}
		// And one tool result per call.
		var whole struct {
			History []struct {
				Role       string `json:"role"`
				ToolCallID string `json:"toolCallId"`
			} `json:"history"`
		}
		adminGet(t, p.base+"/admin/tasks/"+tasks[tag], &whole)
		results := map[string]int{}
		for _, m := range whole.History {
			if m.Role == "tool" {
				results[m.ToolCallID]++
			}
		}
		if len(results) != crashCalls {
			t.Errorf("task %s: tool results %v, want one for each of %d calls", tag, results, crashCalls)
		}
		for id, n := range results {
			if n != 1 {
				t.Errorf("task %s: %d results for call %s, want 1", tag, n, id)
			}
		}
	}

	// The ledger: one line per execution, keyed by its entry ("<tag> step N").
	ledger, err := os.ReadFile(filepath.Join(ledgerData, "ledger.log"))
	if err != nil {
		t.Fatalf("read ledger: %v", err)
	}
	lines := map[string]int{}
	for _, ln := range strings.Split(strings.TrimSpace(string(ledger)), "\n") {
		_, entry, ok := strings.Cut(ln, "\t")
		if !ok {
			t.Fatalf("ledger line %q has no tab", ln)
		}
		lines[entry]++
	}
	journaled := map[string]bool{}
	interrupted := 0
	for tag, id := range tasks {
		calls := adminJournal(t, p.base, id)
		if len(calls) != crashCalls {
			t.Errorf("task %s: %d journaled calls, want %d", tag, len(calls), crashCalls)
		}
		for _, call := range calls {
			var args struct {
				Entry string `json:"entry"`
			}
			_ = json.Unmarshal(call.Arguments, &args)
			journaled[args.Entry] = true
			n := lines[args.Entry]
			switch {
			case call.State != "completed" || call.Result == nil:
				t.Errorf("task %s: call %s is %s after the task ended", tag, call.CallID, call.State)
			case strings.Contains(call.Result.Content, "interrupted by a restart"):
				interrupted++
				if n > 1 {
					t.Errorf("task %s: interrupted call %s (%q) ran %d times", tag, call.CallID, args.Entry, n)
				}
			case n != 1:
				t.Errorf("task %s: completed call %s (%q) ran %d times, want exactly once", tag, call.CallID, args.Entry, n)
			}
		}
	}
	for entry, n := range lines {
		if !journaled[entry] {
			t.Errorf("ledger entry %q (%d lines) belongs to no journaled call", entry, n)
		}
	}
	t.Logf("%d tasks, %d ledger lines, %d calls interrupted by a kill", len(tasks), len(lines), interrupted)

	// A client reading each stream again from the start sees every id once,
	// in order, across the crashes: the Looopy stream of the context from
	// Last-Event-ID 0 has every event, so its ids are consecutive. The A2A
	// task stream (SubscribeToTask, resumed after id 1) leaves out the
	// events A2A has no form for, so its ids only rise, and it ends with
	// the task's final status.
	for tag, id := range tasks {
		ids, _ := contextStreamIDs(t, p.base, "ctx-"+tag)
		checkConsecutive(t, "context stream of "+tag, ids, 1)
		tids, last := taskStreamIDs(t, p.base, id, 1)
		checkRising(t, "task stream of "+tag, tids, 1)
		if !strings.Contains(last, `"statusUpdate"`) || !strings.Contains(strings.ToUpper(last), "COMPLETED") {
			t.Errorf("task stream of %s: last frame %s, want the completed status", tag, last)
		}
	}
	// The live clients saw every event once, in order, across the crashes.
	seen := watchers.wait(2 * time.Minute)
	reconnects := 0
	for tag := range tasks {
		w := seen[tag]
		if w == nil || !w.complete {
			var ids []uint64
			if w != nil {
				ids = w.ids
			}
			t.Errorf("live client of %s did not see the task complete (ids %v)", tag, ids)
			continue
		}
		reconnects += w.connects - 1
		checkConsecutive(t, "live stream of "+tag, w.ids, 1)
	}
	t.Logf("live clients reconnected %d times in all", reconnects)
}

func statusText(t *a2a.Task) string {
	if t.Status.Message == nil {
		return ""
	}
	return partsText(t.Status.Message.Parts)
}

// awaitLedgerLine returns as soon as the ledger grows (a ledger call has
// just written its line and not yet returned, or only just), or after five
// seconds. Killing the host then catches calls whose end the journal may
// not have recorded yet: they must be reported as interrupted, never run
// again.
func awaitLedgerLine(path string) {
	size := func() int64 {
		if fi, err := os.Stat(path); err == nil {
			return fi.Size()
		}
		return 0
	}
	from := size()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if size() > from {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// streamWatchers follow the Looopy event streams of contexts live, with
// the time each event arrived.
type streamWatchers struct {
	base   atomic.Pointer[string] // the host up now
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	seen   map[string]*watched
}

type watched struct {
	ids      []uint64
	at       []time.Time
	connects int
	complete bool
}

func newStreamWatchers() *streamWatchers {
	ctx, cancel := context.WithCancel(context.Background())
	return &streamWatchers{ctx: ctx, cancel: cancel, seen: map[string]*watched{}}
}

// watch follows the stream of ctx-<tag> until its task-complete event,
// reconnecting after every drop from the last id seen.
func (ws *streamWatchers) watch(tag string) {
	w := &watched{}
	ws.mu.Lock()
	ws.seen[tag] = w
	ws.mu.Unlock()
	ws.wg.Add(1)
	go func() {
		defer ws.wg.Done()
		var last uint64
		for ws.ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ws.ctx, "GET", *ws.base.Load()+"/events/ctx-"+tag, nil)
			req.Header.Set("Last-Event-ID", strconv.FormatUint(last, 10))
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				if err == nil {
					resp.Body.Close()
				}
				time.Sleep(50 * time.Millisecond) // the host is restarting
				continue
			}
			ws.mu.Lock()
			w.connects++
			ws.mu.Unlock()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if v, ok := strings.CutPrefix(line, "id:"); ok {
					if id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
						last = id
						ws.mu.Lock()
						w.ids = append(w.ids, id)
						w.at = append(w.at, time.Now())
						ws.mu.Unlock()
					}
				}
				if v, ok := strings.CutPrefix(line, "event:"); ok && strings.TrimSpace(v) == "task-complete" {
					resp.Body.Close()
					ws.mu.Lock()
					w.complete = true
					ws.mu.Unlock()
					return
				}
			}
			resp.Body.Close()
		}
	}()
}

// wait returns what each client saw once all have seen their task
// complete, or after d.
func (ws *streamWatchers) wait(d time.Duration) map[string]*watched {
	done := make(chan struct{})
	go func() { ws.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
	ws.stop()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.seen
}

// waitTags returns what each client saw once the clients of tags have
// seen their task complete, or after d; the other clients are stopped.
func (ws *streamWatchers) waitTags(tags []string, d time.Duration) map[string]*watched {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ws.mu.Lock()
		all := true
		for _, tag := range tags {
			if w := ws.seen[tag]; w == nil || !w.complete {
				all = false
			}
		}
		ws.mu.Unlock()
		if all {
			break
		}
	}
	ws.stop()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.seen
}

func (ws *streamWatchers) stop() {
	ws.cancel()
	ws.wg.Wait()
}

func checkConsecutive(t *testing.T, what string, ids []uint64, first uint64) {
	t.Helper()
	if len(ids) == 0 {
		t.Errorf("%s: no events", what)
		return
	}
	for i, id := range ids {
		if id != first+uint64(i) {
			t.Errorf("%s: ids %v: want %d, %d, … with no gap and no duplicate", what, ids, first, first+1)
			return
		}
	}
}

func checkRising(t *testing.T, what string, ids []uint64, after uint64) {
	t.Helper()
	if len(ids) == 0 {
		t.Errorf("%s: no events", what)
		return
	}
	for _, id := range ids {
		if id <= after {
			t.Errorf("%s: ids %v: want each above %d and above the one before (no duplicate)", what, ids, after)
			return
		}
		after = id
	}
}

func adminGet(t *testing.T, url string, out any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+crashAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

type journalCall struct {
	CallID    string          `json:"callId"`
	State     string          `json:"state"`
	Arguments json.RawMessage `json:"arguments"`
	Result    *struct {
		Content string `json:"content"`
	} `json:"result"`
}

func adminJournal(t *testing.T, base, taskID string) []journalCall {
	var out struct {
		Calls []journalCall `json:"calls"`
	}
	adminGet(t, base+"/admin/tasks/"+taskID+"/journal", &out)
	return out.Calls
}

func countWorking(t *testing.T, base string) int {
	var out struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	adminGet(t, base+"/admin/tasks?state=working&limit=1000", &out)
	return len(out.Tasks)
}

// sseIDs reads the ids of an SSE response until it ends or stop says so,
// and returns them with the data of the last frame.
func sseIDs(t *testing.T, what string, resp *http.Response, stop func(event string) bool) ([]uint64, string) {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
	}
	var ids []uint64
	var last string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "id:"); ok {
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("%s: bad id line %q", what, line)
			}
			ids = append(ids, id)
		}
		if v, ok := strings.CutPrefix(line, "data:"); ok {
			last = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "event:"); ok && stop(strings.TrimSpace(v)) {
			return ids, last
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: read: %v (ids so far %v)", what, err, ids)
	}
	return ids, last
}

func contextStreamIDs(t *testing.T, base, contextID string) ([]uint64, string) {
	req, _ := http.NewRequest("GET", base+"/events/"+contextID, nil)
	req.Header.Set("Last-Event-ID", "0")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("events of %s: %v", contextID, err)
	}
	return sseIDs(t, "events of "+contextID, resp, func(ev string) bool { return ev == "task-complete" })
}

func taskStreamIDs(t *testing.T, base, taskID string, after uint64) ([]uint64, string) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
		"params": map[string]any{"id": taskID}})
	req, _ := http.NewRequest("POST", base+"/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("subscribe to %s: %v", taskID, err)
	}
	return sseIDs(t, "task stream of "+taskID, resp, func(string) bool { return false })
}

// quickScript answers "quick <tag>" with one ledger call and an answer: a
// short turn, so that every crash point is reached many times.
const quickScript = `{"rules":[{"name":"quick","match":"^quick (\\S+)$","steps":[
 {"text":"on $1. ","delayMs":20},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1"}}},
 {"text":"finished $1","delayMs":20}]}]}`

// TestLongCrashPoints kills the host (it kills itself, SIGKILL, through
// LOOOPY_CRASHPOINT) at each point between two writes of a task's life,
// with tasks started by SendMessage with returnImmediately, by streaming
// clients and with a live /events follower per conversation; then starts
// it again on the same data and checks that every task a client was told
// about is found, ends completed with its input and one ledger line, that
// its A2A stream (replayed from its first id) ends with the final status,
// and that each follower saw every id of its stream once, in order.
func TestLongCrashPoints(t *testing.T) {
	root := t.TempDir()
	bin := hostBinary(t)
	// The task's lease and record are one write on Badger (lease-taken is
	// reached only where they are two: see host/taskrt TestStartWrites);
	// so are a turn's commit and its final events (turn-ending comes
	// before that write; turn-committed, between the two where they are
	// separate, is never reached: see TestTurnEndIsOneWriteWithItsCommit).
	points := []string{"task-starting", "task-saved", "turn-ending", "turn-settled"}
	for _, point := range points {
		for _, nth := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s:%d", point, nth), func(t *testing.T) {
				crashAt(t, bin, filepath.Join(root, fmt.Sprintf("%s-%d", point, nth)), fmt.Sprintf("%s:%d", point, nth))
			})
		}
	}
}

func crashAt(t *testing.T, bin, root, crashpoint string) {
	plugins := filepath.Join(root, "plugins")
	// The ledger's folder lies beside the plugin folder, where the host's
	// default policy grants folders (never inside: the host owns it).
	ledgerData := filepath.Join(root, "grants", "ledger")
	crashPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(quickScript)}, nil)
	crashPlugin(t, plugins, "ledger", map[string]any{"dir": ledgerData}, []string{ledgerData})
	if err := os.MkdirAll(ledgerData, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"dataDir":   filepath.Join(root, "data"),
		"pluginDir": plugins,
		"plugins":   map[string]any{"only": []string{"scripted-model", "ledger"}, "cacheDir": wasmCache},
		"admin":     map[string]any{"token": crashAdmin},
		"limits":    map[string]any{"heartbeat": "1s", "shutdownGrace": "1s", "turnTimeout": "5m"},
		"logFormat": "json",
	}
	config, logf := longHostFiles(t, root, cfg)

	ctx := context.Background()
	watchers := newStreamWatchers()
	defer watchers.stop()
	p := startProc(t, bin, config, logf, "LOOOPY_CRASHPOINT="+crashpoint)
	watchers.base.Store(&p.base)
	exited := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(exited) }()

	// Clients start tasks until the host dies; each task a client was
	// told about is kept.
	var mu sync.Mutex
	told := map[string]string{} // tag -> task id
	var wg sync.WaitGroup
	// One client, made before the first task: the host may die at the
	// first task's first write, while other clients would still be reading
	// its card.
	c := client10(t, p.base, "")
	for i := 0; i < 12; i++ {
		tag := fmt.Sprintf("q%02d", i)
		watchers.watch(tag)
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := userMsg("quick " + tag)
			msg.ContextID = "ctx-" + tag
			if i%2 == 0 {
				r, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg,
					Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
				if err == nil {
					mu.Lock()
					told[tag] = string(r.(*a2a.Task).ID)
					mu.Unlock()
				} else {
					t.Logf("send %s: %v", tag, err)
				}
				return
			}
			for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: msg}) {
				if err != nil {
					t.Logf("stream %s: %v", tag, err)
					return
				}
				if task, ok := ev.(*a2a.Task); ok {
					mu.Lock()
					told[tag] = string(task.ID)
					mu.Unlock()
				}
			}
		}()
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		p.kill()
		t.Fatalf("the host never reached %s", crashpoint)
	}
	wg.Wait()
	if len(told) == 0 && !strings.HasPrefix(crashpoint, "task-starting:1") && !strings.HasPrefix(crashpoint, "task-saved:1") {
		t.Logf("no client was told about a task before the kill at %s", crashpoint)
	}

	p = startProc(t, bin, config, logf)
	defer p.kill()
	watchers.base.Store(&p.base)
	c = client10(t, p.base, "")
	deadline := time.Now().Add(2 * time.Minute)
	for tag, id := range told {
		var task *a2a.Task
		for {
			var err error
			task, err = c.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
			if err != nil {
				t.Fatalf("task %s (%s), acknowledged before the kill at %s: %v", tag, id, crashpoint, err)
			}
			if task.Status.State.Terminal() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s still %s after 2 minutes", tag, task.Status.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if task.Status.State != a2a.TaskStateCompleted {
			t.Errorf("task %s: %s (%s), want completed", tag, task.Status.State, statusText(task))
		}
		if h := historyText(task); len(h) == 0 || h[0] != string(a2a.MessageRoleUser)+": quick "+tag {
			t.Errorf("task %s: history %q does not open with its input", tag, h)
		}
		tids, last := taskStreamIDs(t, p.base, id, 1)
		checkRising(t, "task stream of "+tag, tids, 1)
		if !strings.Contains(last, `"statusUpdate"`) || !strings.Contains(strings.ToUpper(last), "COMPLETED") {
			t.Errorf("task stream of %s: last frame %s, want the completed status", tag, last)
		}
	}
	// Every ledger line belongs to a task that ran; none ran twice.
	ledger, _ := os.ReadFile(filepath.Join(ledgerData, "ledger.log"))
	lines := map[string]int{}
	for _, ln := range strings.Split(strings.TrimSpace(string(ledger)), "\n") {
		if _, entry, ok := strings.Cut(ln, "\t"); ok {
			lines[entry]++
		}
	}
	for entry, n := range lines {
		if n > 1 {
			t.Errorf("ledger entry %q written %d times", entry, n)
		}
	}
	// The followers of the conversations whose task a client was told
	// about saw them complete, every id once, in order.
	seen := watchers.waitTags(slices.Collect(maps.Keys(told)), 2*time.Minute)
	for tag := range told {
		w := seen[tag]
		if w == nil || !w.complete {
			t.Errorf("live client of %s did not see the task complete", tag)
			continue
		}
		checkConsecutive(t, "live stream of "+tag, w.ids, 1)
	}
	t.Logf("%s: %d tasks told, %d ledger lines", crashpoint, len(told), len(lines))
}
