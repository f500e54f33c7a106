package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The host is killed (-9) while a tool writes a dataset artifact of a turn
// (the real binary, dataset-writer called by the scripted model). Before,
// the artifact stayed building for ever after the restart, holding the
// rows written before the kill. Now the task resumes and ends (the
// interrupted call is not run again), and its end ends the artifact its
// turn left building: failed, with the reason, and nothing of its partial
// rows is served or kept.
func TestBlackBoxArtifactKilledMidWriteEndsFailed(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	args := `{\"name\":\"killed\",\"rows\":100000}`
	script := `{"rules":[{"name":"dataset","match":"^dataset$","steps":[` +
		`{"toolCall":{"name":"make_dataset","arguments":"` + args + `"}},{"text":"ok"}]}],` +
		`"default":{"steps":[{"text":"ok"}]}}`
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": script})
	installPlugin(t, pluginDir, "dataset-writer", "tool", readExample(t, "dataset-writer"),
		map[string]any{"callTimeout": "5m", "hostFunctions": []string{"artifact_write", "emit", "result_read"}}, nil)
	pcfg := map[string]any{"maxCallTimeout": "5m"}
	cfg := map[string]any{"limits": map[string]any{"shutdownGrace": "2s"}}
	h := startSandboxHostWith(t, top, pluginDir, pcfg, cfg)

	// Kill the host as soon as the stream shows the artifact, and again
	// with a new turn should the write have finished first (a fast disk).
	var id, task string
	for attempt := 1; ; attempt++ {
		if attempt > 5 {
			t.Fatal("the dataset was complete before the kill in 5 attempts")
		}
		ctxID := newConversation(t, h)
		req, _ := http.NewRequest(http.MethodGet, h.base+"/events/"+ctxID, nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/events/%s: %v %v", ctxID, resp, err)
		}
		a := h.rpc(t, "", "SendMessage", map[string]any{
			"message": map[string]any{"messageId": fmt.Sprintf("m-%d", time.Now().UnixNano()), "role": "ROLE_USER",
				"contextId": ctxID, "parts": []any{map[string]any{"text": "dataset"}}},
			"configuration": map[string]any{"returnImmediately": true},
		})
		if a.Error != nil {
			t.Fatalf("SendMessage: %+v", a.Error)
		}
		task = taskIDOf(t, a)
		id = ""
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		for sc.Scan() {
			if got := artID.FindString(sc.Text()); got != "" {
				id = got
				break
			}
		}
		if id == "" {
			t.Fatalf("the stream ended without an artifact: %v", sc.Err())
		}
		if err := syscall.Kill(h.pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-h.exited
		resp.Body.Close()
		h = startSandboxHostWith(t, top, pluginDir, pcfg, cfg)
		if st, _ := artifactStatus(t, h, id); st != "complete" {
			break
		}
		t.Logf("attempt %d: the dataset was complete before the kill", attempt)
	}

	h.waitFor(t, "the resumed task to end", 3*time.Minute, func() bool {
		return !running(h.taskState(t, "", task))
	})
	h.waitFor(t, "the artifact left building to end", time.Minute, func() bool {
		st, _ := artifactStatus(t, h, id)
		return st != "building"
	})
	st, n := artifactStatus(t, h, id)
	if st != "failed" || n != 0 {
		t.Fatalf("artifact %s after the kill and the task's end: %s, %d bytes served; want failed, nothing", id, st, n)
	}
}

// artifactStatus is what GET /artifacts/{id} says of the artifact's
// status, and how many bytes it serves.
func artifactStatus(t *testing.T, h *sandboxHost, id string) (string, int64) {
	t.Helper()
	resp, err := http.Get(h.base + "/artifacts/" + id)
	if err != nil {
		t.Fatalf("GET artifact %s: %v", id, err)
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET artifact %s: %d", id, resp.StatusCode)
	}
	return strings.TrimSpace(resp.Header.Get("Looopy-Artifact-Status")), n
}

// taskIDOf is the task id of a SendMessage answer.
func taskIDOf(t *testing.T, a rpcAnswer) string {
	t.Helper()
	var r struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	if err := json.Unmarshal(a.Result, &r); err != nil || r.Task.ID == "" {
		t.Fatalf("SendMessage answer %s: no task (%v)", a.Result, err)
	}
	return r.Task.ID
}
