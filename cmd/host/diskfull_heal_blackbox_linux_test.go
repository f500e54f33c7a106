package main

import (
	"encoding/json"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A disk the host filled itself heals without the operator (a real tmpfs
// of 224 MiB, the real binary): turns whose tool writes a dataset of 12 MB
// (in Badger's value log), twenty-four at once, take it past store.minFreeBytes (new tasks
// refused), then to the floor where every write stops (half of it:
// their writes below it are refused). What the finished turns wrote expires a few seconds later
// (limits.taskTTL and conversationTTL 2s: the tasks, their event streams,
// their conversations, their artifacts). Before, the cleanup's deletes
// were refused like any write below the floor, and deletes that passed
// gave nothing back (their tombstones stayed in a memtable that never
// filled, over one value log file of 1 GiB that the value log GC never
// rewrites): the host refused new tasks for ever. Now the cleanup's
// deletes pass below the floor (while a reserve lasts), the store gives
// their space back (memtables flushed, level 0 compacted, value log files
// rewritten), and a new task is taken and completes, with no restart and
// nothing done to the disk.
func TestBlackBoxFullDiskHealsItself(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	small := filepath.Join(top, "small")
	mountSmall(t, small, "224m")
	pluginDir := filepath.Join(top, "plugins")
	args := `{\"name\":\"` + strings.Repeat("n", 60) + `\",\"rows\":100000}`
	script := `{"rules":[{"name":"dataset","match":"^dataset$","steps":[` +
		`{"toolCall":{"name":"make_dataset","arguments":"` + args + `"}},{"text":"ok"}]}],` +
		`"default":{"steps":[{"text":"ok"}]}}`
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": script})
	installPlugin(t, pluginDir, "dataset-writer", "tool", readExample(t, "dataset-writer"),
		map[string]any{"callTimeout": "5m", "hostFunctions": []string{"artifact_write", "emit", "result_read"}}, nil)
	const minFree = 160 << 20
	h := startSandboxHostWith(t, top, pluginDir, map[string]any{"maxCallTimeout": "5m"}, map[string]any{
		"dataDir":     filepath.Join(small, "data"),
		"store":       map[string]any{"memoryBytes": 64 << 20, "minFreeBytes": minFree},
		"limits":      map[string]any{"shutdownGrace": "2s", "maxRunning": 24, "taskTTL": "2s", "conversationTTL": "2s"},
		"interaction": map[string]any{"approval": map[string]any{"tools": []string{"make_dataset"}}},
	})
	free := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(small, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * int64(st.Bsize)
	}

	// Twenty-four dataset turns, each paused on the approval of its call
	// (taken while the disk is roomy), then approved at once: an answer is
	// not a new task, so all twenty-four write, 240 MB, past the floor (a turn
	// whose write the floor refuses is suspended until space returns).
	c := a2aClient(t, h.base, "")
	type paused struct {
		task    a2a.TaskID
		inputID string
	}
	var batch []paused
	for range 24 {
		task, err := apSend(t, c, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("dataset"))})
		if err != nil {
			t.Fatalf("a dataset turn with %d MiB free: %v", free()>>20, err)
		}
		inputID := ""
		if task.Status.State == a2a.TaskStateInputRequired && task.Status.Message != nil {
			for _, p := range task.Status.Message.Parts {
				if d, ok := p.Content.(a2a.Data); ok {
					m, _ := d.Value.(map[string]any)
					if rs, _ := m["requests"].([]any); len(rs) == 1 {
						r, _ := rs[0].(map[string]any)
						inputID, _ = r["inputId"].(string)
					}
				}
			}
		}
		if inputID == "" {
			t.Fatalf("the dataset turn is %s, want paused on the approval of its call", task.Status.State)
		}
		batch = append(batch, paused{task.ID, inputID})
	}
	for _, p := range batch {
		go func() {
			_, _ = apSend(t, c, apAnswer(p.task, map[string]any{"inputId": p.inputID, "decision": "approve"}))
		}()
	}
	turns := len(batch)
	h.waitFor(t, "the disk to pass the floor", 5*time.Minute, func() bool {
		if free() < minFree/2 {
			return true
		}
		for _, p := range batch {
			a := h.rpc(t, "", "GetTask", map[string]any{"id": string(p.task), "historyLength": 0})
			if a.Error != nil && a.Error.Code == -32001 {
				continue // ended and expired already
			}
			if a.Error != nil {
				t.Fatalf("GetTask %s: %d %s", p.task, a.Error.Code, a.Error.Message)
			}
			var task struct {
				Status struct {
					State string `json:"state"`
				} `json:"status"`
			}
			_ = json.Unmarshal(a.Result, &task)
			if st := task.Status.State; st != "TASK_STATE_COMPLETED" && st != "TASK_STATE_FAILED" {
				return false
			}
		}
		return true // all ended: the writes past the floor were refused
	})
	// At the floor: the datasets' writes below it were refused (and what
	// they held removed), so the disk stays about there.
	if f := free(); f >= minFree/2+8<<20 {
		t.Fatalf("%d dataset turns ended with %d MiB free: the disk is not at the floor", turns, f>>20)
	}
	t.Logf("%d dataset turns, the disk at the floor: %d MiB free", turns, free()>>20)
	// The disk is asked before the bound on running turns: a client is
	// told STORAGE_FULL even while the turns the floor stops still hold
	// their places (before, HOST_BUSY).
	if id, a := h.startTurn(t, "", "hello"); id != "" || a.reason() != "STORAGE_FULL" {
		t.Fatalf("a new task with the disk full: task %q, error %+v (reason %q), want STORAGE_FULL", id, a.Error, a.reason())
	}
	h.waitFor(t, "the turns the floor stopped to give their places back", 2*time.Minute, func() bool {
		return metricValue(h.base, "looopy_turns_running") == 0
	})

	// Nothing is done to the disk or the host: the cleanup (every second
	// for tasks and conversations, every 30 s for event streams and the
	// reclaim, every minute for artifacts) must free the space.
	var fresh string
	h.waitFor(t, "a new task taken once what filled the disk expired", 5*time.Minute, func() bool {
		id, a := h.startTurn(t, "", "hello")
		if id == "" && a.reason() != "STORAGE_FULL" && a.reason() != "HOST_BUSY" {
			t.Fatalf("a new task: %+v", a.Error)
		}
		fresh = id
		if id == "" {
			time.Sleep(time.Second)
		}
		return id != ""
	})
	h.waitFor(t, "the new task to complete", time.Minute, func() bool {
		st := h.taskState(t, "", fresh)
		if !running(st) && st != "TASK_STATE_COMPLETED" {
			t.Fatalf("the new task ended %s", st)
		}
		return st == "TASK_STATE_COMPLETED"
	})
	if !strings.Contains(h.out.String(), "space reclaimed") {
		t.Errorf("no reclaim logged:\n%s", tail(h.out.String(), 4000))
	}
	// The host served reads all along.
	resp, err := http.Get(h.base + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz after healing: %v %v", resp, err)
	}
	resp.Body.Close()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
