package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// fillUntilFree writes a new file into dir's filesystem until about left
// bytes remain free, and returns its path.
func fillUntilFree(t *testing.T, dir string, left int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail)*int64(st.Bsize) - left
	f, err := os.CreateTemp(dir, "filler-")
	if err != nil {
		t.Fatal(err)
	}
	p := f.Name()
	defer f.Close()
	chunk := []byte(strings.Repeat("f", 1<<20))
	for ; n > 0; n -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), n)]); err != nil {
			t.Fatalf("filling the disk: %v", err)
		}
	}
	return p
}

// The disk fills under a running turn (another process takes the space:
// a real tmpfs, the real binary). The turn is not run on with events
// that are neither stored nor sent: at its first refused write it is
// suspended, as by a graceful stop (nothing more written, its task left
// working with its leases released); the client's stream ends with
// STORAGE_FULL telling it to subscribe again, never with a final status;
// reads are served; once space returns the host resumes the task on its
// own (no restart) and it completes, and a new subscription replays every
// event the client saw, then the end.
//
// With one turn allowed (limits.maxRunning 1) and that turn running, a new
// task on a disk below store.minFreeBytes is refused STORAGE_FULL, which
// says what is wrong, not HOST_BUSY (before, the bound on running turns
// was asked first); once the full disk has stopped the turn, its place is
// free (looopy_turns_running 0) while the disk is still full, and a new
// task is still told STORAGE_FULL.
func TestBlackBoxDiskFullSuspendsTheTurn(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	small := filepath.Join(top, "small")
	mountSmall(t, small, "224m")
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": `{"rules":[{"name":"slow","match":"^slow (\\d+)$","steps":[
			{"text":"start"},{"text":" tick{{i}}","delayMs":500,"repeat":"$1"},{"text":" done"}]}],
			"default":{"steps":[{"text":"ok"}]}}`})
	h := startSandboxHostWith(t, top, pluginDir, nil, map[string]any{
		"dataDir": filepath.Join(small, "data"),
		"store":   map[string]any{"memoryBytes": 64 << 20, "minFreeBytes": 160 << 20},
		"limits":  map[string]any{"shutdownGrace": "2s", "heartbeat": "1s", "maxRunning": 1},
	})
	c := a2aClient(t, h.base, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type seen struct {
		events []a2a.Event
		err    error
	}
	started, ended := make(chan a2a.TaskID, 1), make(chan seen, 1)
	go func() {
		var s seen
		var id a2a.TaskID
		for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("slow 40"))}) {
			if err != nil {
				s.err = err
				break
			}
			s.events = append(s.events, ev)
			switch e := ev.(type) {
			case *a2a.Task:
				id = e.ID
			case *a2a.TaskArtifactUpdateEvent:
				select {
				case started <- id:
				default:
				}
			}
		}
		ended <- s
	}()
	var taskID a2a.TaskID
	select {
	case taskID = <-started:
	case <-ctx.Done():
		t.Fatal("the turn never streamed its first text")
	}

	// 120 MiB left: below store.minFreeBytes (160 MiB), above the floor
	// where writes stop (80 MiB): the turn writes on, in the only place.
	fillers := []string{fillUntilFree(t, small, 120<<20)}
	if id, a := h.startTurn(t, "", "hello"); id != "" || a.reason() != "STORAGE_FULL" {
		t.Fatalf("a new task with the disk below store.minFreeBytes and the only place taken: task %q, error %+v (reason %q), want STORAGE_FULL",
			id, a.Error, a.reason())
	}
	// 40 MiB left: below the write floor (80 MiB), room for Badger's own.
	fillers = append(fillers, fillUntilFree(t, small, 40<<20))
	var first seen
	select {
	case first = <-ended:
	case <-ctx.Done():
		t.Fatal("the stream of the turn did not end once the disk filled")
	}
	for _, ev := range first.events {
		if st, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && st.Status.State.Terminal() {
			t.Fatalf("the stream of the suspended turn carried a final status %s: %+v", st.Status.State, st.Status)
		}
	}
	if first.err == nil || !strings.Contains(first.err.Error(), "storage full") || !strings.Contains(first.err.Error(), "subscribe again") {
		t.Fatalf("the stream of the suspended turn ended with %v, want STORAGE_FULL telling the client to subscribe again", first.err)
	}
	if !strings.Contains(h.out.String(), "turn suspended") {
		t.Fatalf("the host did not say it suspended the turn:\n%s", h.out.String())
	}
	// The task is left working, and reads are served.
	if st := h.taskState(t, "", string(taskID)); st != "TASK_STATE_WORKING" {
		t.Fatalf("the suspended task is %s, want working", st)
	}
	if !h.ready() {
		t.Fatal("the host is not ready with its disk full")
	}
	// The stopped turn holds no place; a new task is told why it is
	// refused.
	h.waitFor(t, "the suspended turn to give its place back", time.Minute, func() bool {
		return metricValue(h.base, "looopy_turns_running") == 0
	})
	if id, a := h.startTurn(t, "", "hello"); id != "" || a.reason() != "STORAGE_FULL" {
		t.Fatalf("a new task with the disk full: task %q, error %+v (reason %q), want STORAGE_FULL", id, a.Error, a.reason())
	}

	// Space returns: the host resumes the task by itself.
	for _, f := range fillers {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	h.waitFor(t, "the suspended task to complete once space returned", 2*time.Minute, func() bool {
		st := h.taskState(t, "", string(taskID))
		if !running(st) && st != "TASK_STATE_COMPLETED" {
			t.Fatalf("the suspended task ended %s: %s", st, h.statusText(t, string(taskID)))
		}
		return st == "TASK_STATE_COMPLETED"
	})
	_, text := replayHoldsWhatWasSeen(t, ctx, h.base, taskID, first.events, "once space returned")
	if !strings.Contains(text, "tick40 done") {
		t.Fatalf("the resumed task's answer: %q, want the whole answer", text)
	}
}
