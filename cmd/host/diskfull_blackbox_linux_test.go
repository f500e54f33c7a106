package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountSmall mounts a tmpfs of size bytes at dir (root only) and unmounts
// it when the test ends (after the hosts it started have stopped).
func mountSmall(t *testing.T, dir string, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem (tmpfs) for the data folder needs root")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, b)
	}
	t.Cleanup(func() {
		for range 50 {
			if exec.Command("umount", dir).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("umount %s failed", dir)
	})
}

// resize gives the tmpfs at dir a new size (space returns, or goes).
func resize(t *testing.T, dir, size string) {
	t.Helper()
	if b, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s: %v: %s", dir, err, b)
	}
}

// taskStates maps each task the principal lists to its state.
func (h *sandboxHost) taskStates(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	token := ""
	for {
		a := h.rpc(t, "", "ListTasks", map[string]any{"historyLength": 0, "pageSize": 100, "pageToken": token})
		if a.Error != nil {
			t.Fatalf("ListTasks: %d %s", a.Error.Code, a.Error.Message)
		}
		var r struct {
			Tasks []struct {
				ID     string `json:"id"`
				Status struct {
					State string `json:"state"`
				} `json:"status"`
			} `json:"tasks"`
			NextPageToken string `json:"nextPageToken"`
		}
		if err := json.Unmarshal(a.Result, &r); err != nil {
			t.Fatal(err)
		}
		for _, task := range r.Tasks {
			out[task.ID] = task.Status.State
		}
		if r.NextPageToken == "" {
			return out
		}
		token = r.NextPageToken
	}
}

func running(st string) bool { return st == "TASK_STATE_WORKING" || st == "TASK_STATE_SUBMITTED" }

// The data folder's filesystem fills up under a flood of turns (a real
// tmpfs of 224 MiB, the real binary). Before, Badger wrote into its memory
// mapped log on the full disk and the host died of SIGBUS, and could not
// start again on it. Now: new tasks are refused, before anything is
// stored, with -32000 STORAGE_FULL (store.minFreeBytes); the host keeps
// serving reads; the turns already acknowledged end, completed or failed;
// when space returns a new task is taken and runs without a restart; and
// after kill -9 every acknowledged task is there, in the state the host
// reported.
func TestBlackBoxDiskFull(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	small := filepath.Join(top, "small")
	mountSmall(t, small, "224m")
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": bigThoughtsScript})
	cfg := map[string]any{
		"dataDir": filepath.Join(small, "data"),
		// 16 MiB memtables; new tasks need 160 MiB free, writes 80 MiB
		// (Badger's own writes after the last accepted: the rest of the
		// log files, 32 MiB each, and a level-0 table).
		"store":  map[string]any{"memoryBytes": 64 << 20, "minFreeBytes": 160 << 20},
		"limits": map[string]any{"shutdownGrace": "2s", "maxRunning": 8},
	}
	h := startSandboxHostWith(t, top, pluginDir, nil, cfg)

	// The flood: turns of 40 thoughts of 70 KB until the store refuses
	// one.
	admitted, refusal := floodUntilRefused(t, h, 500)
	if refusal.Error == nil || refusal.Error.Code != -32000 || refusal.reason() != "STORAGE_FULL" {
		t.Fatalf("after %d turns: refusal %+v (reason %q), want -32000 STORAGE_FULL", len(admitted), refusal.Error, refusal.reason())
	}
	t.Logf("%d turns admitted, then: %s", len(admitted), refusal.Error.Message)
	if n := len(h.taskStates(t)); n != len(admitted) {
		t.Fatalf("%d tasks listed, %d admitted: a refused turn left a task", n, len(admitted))
	}

	// The host keeps serving: readiness, reads of every task.
	if !h.ready() {
		t.Fatal("the host is not ready with its disk full")
	}
	for _, id := range admitted[:3] {
		if st := h.taskState(t, "", id); st == "" {
			t.Fatalf("GetTask %s with the disk full: no state", id)
		}
	}
	full := h.taskStates(t)
	t.Logf("with the disk full: %v", count(full))
	// Still full: a new task is refused.
	if id, a := h.startTurn(t, "", "hello"); id != "" || a.reason() != "STORAGE_FULL" {
		t.Fatalf("a new task with the disk still full: task %q, error %+v", id, a.Error)
	}

	// Space returns: the acknowledged turns end (those whose end the
	// store refused are recovered: resumed, or failed saying why), and a
	// new task is taken and completes, no restart.
	resize(t, small, "768m")
	h.waitFor(t, "the admitted turns to end", 10*time.Minute, func() bool {
		for _, st := range h.taskStates(t) {
			if running(st) {
				return false
			}
		}
		return true
	})
	ended := h.taskStates(t)
	t.Logf("after space returned: %v", count(ended))
	for id, st := range ended {
		if st == "TASK_STATE_FAILED" {
			t.Logf("a failed task says: %s", h.statusText(t, id))
			break
		}
	}
	var fresh string
	h.waitFor(t, "a new task taken once space returned", time.Minute, func() bool {
		id, a := h.startTurn(t, "", "hello")
		if id == "" && a.reason() != "STORAGE_FULL" {
			t.Fatalf("after space returned: %+v", a.Error)
		}
		fresh = id
		return id != ""
	})
	h.waitFor(t, "the new task to complete", time.Minute, func() bool {
		st := h.taskState(t, "", fresh)
		if !running(st) && st != "TASK_STATE_COMPLETED" {
			t.Fatalf("the new task ended %s", st)
		}
		return st == "TASK_STATE_COMPLETED"
	})
	before := h.taskStates(t)

	// kill -9, then start again on the same folder: nothing acknowledged
	// is lost, and no state went back.
	if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-h.exited
	h2 := startSandboxHostWith(t, top, pluginDir, nil, cfg)
	after := h2.taskStates(t)
	for id, st := range before {
		if after[id] != st {
			t.Errorf("task %s was %s before kill -9, %q after", id, st, after[id])
		}
	}
}

// bigThoughtsScript: "bigflood N" thinks N thoughts of about 70 KB, then
// answers: each past Badger's value threshold, so written uncompressed to
// its value log (small repetitive thoughts shrink to nothing in its
// compressed tables, and would take thousands of turns to fill a disk).
var bigThoughtsScript = `{"rules":[{"name":"bigflood","match":"^bigflood (\\d+)$","steps":[` +
	`{"thought":"` + strings.Repeat("t", 70000) + `{{i}}","repeat":"$1"},{"text":"ok"}]}],` +
	`"default":{"steps":[{"text":"ok"}]}}`

// statusText is the text of task id's status message.
func (h *sandboxHost) statusText(t *testing.T, id string) string {
	t.Helper()
	a := h.rpc(t, "", "GetTask", map[string]any{"id": id, "historyLength": 0})
	var task struct {
		Status struct {
			Message struct {
				Parts []struct {
					Text string `json:"text"`
				} `json:"parts"`
			} `json:"message"`
		} `json:"status"`
	}
	_ = json.Unmarshal(a.Result, &task)
	text := ""
	for _, p := range task.Status.Message.Parts {
		text += p.Text
	}
	return text
}

func count(states map[string]string) map[string]int {
	n := map[string]int{}
	for _, st := range states {
		n[st]++
	}
	return n
}

// The operator's cap on the data folder (store.maxBytes, 48 MiB here):
// past it new tasks are refused with STORAGE_FULL naming the cap, before
// anything is stored, while the host goes on serving reads and the turns
// it took end.
func TestBlackBoxDataFolderCap(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": bigThoughtsScript})
	h := startSandboxHostWith(t, top, pluginDir, nil, map[string]any{
		"store":  map[string]any{"memoryBytes": 64 << 20, "maxBytes": 48 << 20},
		"limits": map[string]any{"shutdownGrace": "2s", "maxRunning": 8},
	})
	admitted, refusal := floodUntilRefused(t, h, 1000)
	if refusal.Error == nil || refusal.reason() != "STORAGE_FULL" || !strings.Contains(refusal.Error.Message, "store.maxBytes") {
		t.Fatalf("after %d turns: refusal %+v (reason %q), want STORAGE_FULL naming store.maxBytes", len(admitted), refusal.Error, refusal.reason())
	}
	t.Logf("%d turns admitted, then: %s", len(admitted), refusal.Error.Message)
	h.waitFor(t, "the admitted turns to end", 5*time.Minute, func() bool {
		for _, st := range h.taskStates(t) {
			if running(st) {
				return false
			}
		}
		return true
	})
	states := h.taskStates(t)
	if len(states) != len(admitted) {
		t.Fatalf("%d tasks listed, %d admitted: a refused turn left a task", len(states), len(admitted))
	}
	if id, a := h.startTurn(t, "", "hello"); id != "" || a.reason() != "STORAGE_FULL" {
		t.Fatalf("a new task at the cap: task %q, error %+v", id, a.Error)
	}
	if !h.ready() {
		t.Fatal("the host is not ready at its cap")
	}
}

// The data folder at its cap (store.maxBytes) because of a file that the
// operator then removes: the first new task after the removal is taken.
// Before, the folder's size was the one sampled every second (a walk of
// the folder), so a task sent right after the space came back was still
// refused STORAGE_FULL. Now a refusal is decided on a measure begun after
// the request.
func TestBlackBoxDataFolderCapLiftsAtOnce(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	h := startSandboxHostWith(t, top, pluginDir, nil, map[string]any{
		"store": map[string]any{"memoryBytes": 64 << 20, "maxBytes": 48 << 20},
	})
	if id, a := h.startTurn(t, "", "hello"); id == "" {
		t.Fatalf("a task under the cap: %+v", a.Error)
	}
	dir := filepath.Join(top, "data", "operator-files")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, bytes.Repeat([]byte("f"), 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the cap to refuse new tasks", time.Minute, func() bool {
		id, a := h.startTurn(t, "", "hello")
		if id == "" && a.reason() != "STORAGE_FULL" {
			t.Fatalf("a new task: %+v", a.Error)
		}
		return id == "" && strings.Contains(a.Error.Message, "store.maxBytes")
	})
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if id, a := h.startTurn(t, "", "hello"); id == "" {
		t.Fatalf("the first task once the space came back: %+v (reason %q), want taken", a.Error, a.reason())
	}
}

// floodUntilRefused starts flooding turns (40 thoughts of 70 KB each) until
// the host refuses one for another reason than being busy, or most have
// been admitted: it returns the tasks admitted and the refusal.
func floodUntilRefused(t *testing.T, h *sandboxHost, most int) ([]string, rpcAnswer) {
	t.Helper()
	var admitted []string
	for len(admitted) < most {
		id, a := h.startTurn(t, "", "bigflood 40")
		if id != "" {
			admitted = append(admitted, id)
			continue
		}
		if a.reason() == "HOST_BUSY" {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		return admitted, a
	}
	return admitted, rpcAnswer{}
}

// A tool plugin writing artifacts fills the data folder's filesystem (a
// real tmpfs of 224 MiB, the real binary, dataset-writer called over
// /mcp): artifact records share Badger's database, and their writes went
// straight to it without the store's check of its disk, so the flood
// ended in SIGBUS as a flood of turns did. Now each artifact write asks
// the store first: past the floor (half of store.minFreeBytes) the write
// is refused and the tool says "storage full"; the host stays up and
// serves the artifacts already written; once space returns the same call
// succeeds, without a restart.
func TestBlackBoxArtifactsFillTheDisk(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	small := filepath.Join(top, "small")
	mountSmall(t, small, "224m")
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "dataset-writer", "tool", readExample(t, "dataset-writer"),
		map[string]any{"callTimeout": "5m", "hostFunctions": []string{"artifact_write", "emit", "result_read"}}, nil)
	// The call's timeout (5m) is a hang guard: the host's cap (30 s by
	// default) is raised to it, a call of 100,000 rows taking 20-30 s on
	// a loaded machine.
	h := startSandboxHostWith(t, top, pluginDir, map[string]any{"maxCallTimeout": "5m"}, map[string]any{
		"dataDir": filepath.Join(small, "data"),
		"store":   map[string]any{"memoryBytes": 64 << 20, "minFreeBytes": 160 << 20},
		"limits":  map[string]any{"shutdownGrace": "2s"},
	})
	// Rows of about 120 bytes (a long name in each label): a batch of
	// 1,000 is past Badger's value threshold, written to its value log
	// as it comes (compressible small values would shrink in its tables).
	name := strings.Repeat("n", 60)
	call := func() string {
		return h.mcpCallAs(t, "", "make_dataset", `{"name":"`+name+`","rows":100000}`)
	}
	var written []string
	refused := ""
	for range 60 {
		got := call()
		if id := artID.FindString(got); id != "" && !strings.Contains(got, "storage full") {
			written = append(written, id)
			continue
		}
		refused = got
		break
	}
	if !strings.Contains(refused, "storage full") {
		t.Fatalf("after %d datasets of 12 MB the write was not refused for want of space: %q", len(written), refused)
	}
	if len(written) == 0 {
		t.Fatal("not one dataset was written before the disk filled")
	}
	t.Logf("%d datasets written, then: %.300s", len(written), refused)

	// The host is up and serves what was written.
	if !h.ready() {
		t.Fatal("the host is not ready with its disk full")
	}
	get := func(id string) int {
		resp, err := http.Get(h.base + "/artifacts/" + id)
		if err != nil {
			t.Fatalf("GET artifact %s with the disk full: %v", id, err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && n < 10<<20 {
			t.Fatalf("artifact %s: %d bytes served, want the whole dataset", id, n)
		}
		return resp.StatusCode
	}
	for _, id := range written {
		if code := get(id); code != http.StatusOK {
			t.Fatalf("GET artifact %s with the disk full: %d", id, code)
		}
	}
	// Still full: refused again, and the host is still up.
	if got := call(); !strings.Contains(got, "storage full") {
		t.Fatalf("a write with the disk still full: %q", got)
	}

	// Space returns: the same call succeeds, no restart.
	resize(t, small, "768m")
	got := call()
	id := artID.FindString(got)
	if id == "" || strings.Contains(got, "storage full") {
		t.Fatalf("after space returned: %q", got)
	}
	if code := get(id); code != http.StatusOK {
		t.Fatalf("GET the artifact written after space returned: %d", code)
	}
}
