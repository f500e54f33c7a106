//go:build long

package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/artifacts/s3blob/miniotest"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// clusterScript: "run <tag>" writes a dataset artifact (make_dataset), then
// makes four slow, non-idempotent ledger calls, then answers.
const clusterScript = `{"rules":[{"name":"run","match":"^run (\\S+)$","steps":[
 {"text":"starting $1. ","delayMs":100},
 {"toolCall":{"name":"make_dataset","arguments":{"name":"$1-data","rows":300}},"delayMs":100},
 {"text":"data written. ","delayMs":100},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 step 1"}},"delayMs":300},
 {"text":"step 1 done. ","delayMs":300},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 step 2"}},"delayMs":300},
 {"text":"step 2 done. ","delayMs":300},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 step 3"}},"delayMs":300},
 {"text":"step 3 done. ","delayMs":300},
 {"toolCall":{"name":"ledger_append","arguments":{"entry":"$1 step 4"}},"delayMs":300},
 {"text":"finished $1","delayMs":100}]}]}`

const clusterTasks = 6

// TestLongClusterFailover is issue 15's proof with the real binary: three
// host processes share one Redis (state, events, leases) and one MinIO
// (artifact parts). Tasks start on host A while their clients stream from
// host B; A is killed with SIGKILL mid-turn; B or C takes each task over
// once its lease lapses and resumes it through the journal: no completed
// ledger call runs again, the clients' streams on B go on without a gap or
// a repeat, and the dataset each task wrote on A downloads from C.
func TestLongClusterFailover(t *testing.T) {
	redis := redistest.Start(t, redistest.Options{})
	minio := miniotest.Start(t)
	root := t.TempDir()
	bin := hostBinary(t)
	// The ledger's file is shared by the three hosts, so that it counts
	// every execution wherever it ran.
	ledgerData := filepath.Join(root, "ledger")
	if err := os.MkdirAll(ledgerData, 0o755); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(root, "hosts.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	failed := true
	defer func() {
		if failed {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 30000 {
				b = b[len(b)-30000:]
			}
			t.Logf("hosts' log (tail):\n%s", b)
		}
	}()
	// Each host has its own data directory and its own plugin folder with
	// the same plugins (what an operator deploys to every host).
	config := func(name string) string {
		dir := filepath.Join(root, name)
		plugins := filepath.Join(dir, "plugins")
		crashPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(clusterScript)}, nil)
		crashPlugin(t, plugins, "ledger", map[string]any{"dir": ledgerData}, []string{ledgerData})
		crashPlugin(t, plugins, "dataset-writer", nil, nil)
		cfg := map[string]any{
			"dataDir":   filepath.Join(dir, "data"),
			"pluginDir": plugins,
			"plugins":   map[string]any{"only": []string{"scripted-model", "ledger", "dataset-writer"}, "cacheDir": wasmCache, "pathRoots": []string{ledgerData}},
			"admin":     map[string]any{"token": crashAdmin},
			"limits":    map[string]any{"heartbeat": "1s", "shutdownGrace": "1s", "turnTimeout": "5m", "leaseTTL": "2s", "hostId": name},
			"store": map[string]any{
				"backend": "redis",
				"redis":   map[string]any{"addr": redis.Addr, "prefix": "cluster:"},
				"s3": map[string]any{"endpoint": minio.Endpoint, "bucket": "looopy-cluster", "insecure": true,
					"accessKey": miniotest.AccessKey, "secretKey": "env:LOOOPY_TEST_S3_SECRET", "inlineMax": 256},
			},
			"logFormat": "json",
		}
		b, _ := json.Marshal(cfg)
		path := filepath.Join(dir, "looopy.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Setenv("LOOOPY_TEST_S3_SECRET", miniotest.SecretKey)
	a := startProc(t, bin, config("host-a"), logf)
	defer a.kill()
	b := startProc(t, bin, config("host-b"), logf)
	defer b.kill()
	c := startProc(t, bin, config("host-c"), logf)
	defer c.kill()

	// The clients stream from B; the tasks start on A.
	watchers := newStreamWatchers()
	watchers.base.Store(&b.base)
	defer watchers.stop()
	ctx := context.Background()
	ca := client10(t, a.base, "")
	tasks := map[string]string{}
	for i := range clusterTasks {
		tag := fmt.Sprintf("k%d", i)
		watchers.watch(tag)
		msg := userMsg("run " + tag)
		msg.ContextID = "ctx-" + tag
		r, err := ca.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg, Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
		if err != nil {
			t.Fatalf("send %s: %v", tag, err)
		}
		task, ok := r.(*a2a.Task)
		if !ok {
			t.Fatalf("send %s: got %T, want a task", tag, r)
		}
		tasks[tag] = string(task.ID)
	}
	// Kill A as a ledger call writes its line: mid-turn, mid-tool-call.
	ledger := filepath.Join(ledgerData, "ledger.log")
	for deadline := time.Now().Add(guardWait); ; {
		if n := countLines(ledger); n >= clusterTasks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ledger calls ran on host A within %v", guardWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	awaitLedgerLine(ledger)
	killed := time.Now()
	a.kill()
	working := countWorking(t, b.base)
	t.Logf("killed host A with %d tasks working", working)
	if working == 0 {
		t.Fatal("every task ended before host A was killed: the test proves nothing")
	}

	// B or C takes every task over and finishes it.
	cc := client10(t, c.base, "")
	final := map[string]*a2a.Task{}
	deadline := time.Now().Add(guardWait)
	for tag, id := range tasks {
		for {
			task, err := cc.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
			if err != nil {
				t.Fatalf("get task %s from C: %v", tag, err)
			}
			if task.Status.State.Terminal() {
				final[tag] = task
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s still %s %v after host A died", tag, task.Status.State, guardWait)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("every task ended %v after host A was killed", time.Since(killed).Round(time.Millisecond))
	for tag, task := range final {
		if task.Status.State != a2a.TaskStateCompleted {
			t.Errorf("task %s: %s (%s), want completed", tag, task.Status.State, statusText(task))
		} else if got := artifactText(task); !strings.Contains(got, "finished "+tag) {
			t.Errorf("task %s: answer %q", tag, got)
		}
	}

	// No completed ledger call ran twice; an interrupted one at most once.
	lines := map[string]int{}
	raw, _ := os.ReadFile(ledger)
	for _, ln := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		_, entry, _ := strings.Cut(ln, "\t")
		lines[entry]++
	}
	idRe := regexp.MustCompile(`written as artifact (\S+)`)
	takenOver := 0
	for tag, id := range tasks {
		calls := adminJournal(t, c.base, id)
		artifactID := ""
		for _, call := range calls {
			if call.State != "completed" || call.Result == nil {
				t.Errorf("task %s: call %s is %s", tag, call.CallID, call.State)
				continue
			}
			if m := idRe.FindStringSubmatch(call.Result.Content); m != nil {
				artifactID = strings.TrimRight(m[1], ".,;")
				continue
			}
			var args struct {
				Entry string `json:"entry"`
			}
			_ = json.Unmarshal(call.Arguments, &args)
			n := lines[args.Entry]
			if strings.Contains(call.Result.Content, "interrupted by a restart") {
				takenOver++
				if n > 1 {
					t.Errorf("task %s: interrupted call %q ran %d times", tag, args.Entry, n)
				}
			} else if n != 1 {
				t.Errorf("task %s: completed call %q ran %d times, want once", tag, args.Entry, n)
			}
		}
		// The dataset written on A (its rows in S3) downloads from C.
		if artifactID == "" {
			t.Errorf("task %s: no dataset in its journal", tag)
			continue
		}
		resp, err := http.Get(c.base + "/artifacts/" + artifactID + "?format=csv")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Count(string(body), "\n") != 301 {
			t.Errorf("task %s: artifact %s from C: %d, %d lines, want 200 and a header and 300 rows", tag, artifactID, resp.StatusCode, strings.Count(string(body), "\n"))
		}
	}
	t.Logf("%d ledger lines, %d calls interrupted by the kill", len(lines), takenOver)

	// The clients on B saw every event once, in order, on one connection.
	seen := watchers.wait(guardWait)
	var stall time.Duration
	for tag := range tasks {
		w := seen[tag]
		if w == nil || !w.complete {
			t.Errorf("client of %s on B did not see its task complete: %+v", tag, w)
			continue
		}
		if w.connects != 1 {
			t.Errorf("client of %s on B connected %d times, want once (B never went down)", tag, w.connects)
		}
		checkConsecutive(t, "stream of "+tag+" on B", w.ids, 1)
		// Failover as the client sees it: from the kill to its next event.
		for _, at := range w.at {
			if at.After(killed) {
				stall = max(stall, at.Sub(killed))
				break
			}
		}
	}
	t.Logf("failover: the clients' streams went on at most %v after host A was killed (lease TTL 2s)", stall.Round(time.Millisecond))
	failed = t.Failed()
}

const guardWait = 3 * time.Minute

func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}
