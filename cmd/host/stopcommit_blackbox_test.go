package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/looopy-go/looopy/loop"
)

// TestBlackBoxGracefulStopNeverCutsATurnsEnd: a SIGTERM whose grace runs
// out once a turn has decided its end (its record final, or paused on its
// client) and is about to write it with its final events (one write on
// Badger). The turn is not handed on: its end is written and its final
// status goes out before its lease is released, so that after the restart
// the task's stream ends with the status its record has. The stop comes
// from the host itself at that point (LOOOPY_CRASHPOINT=turn-ending:1:term),
// which holds the turn there until the shutdown has suspended the running
// turns: no timing involved.
// Without the control the task was completed (or input-required) with a
// stream that never said so, and nothing ever repaired it.
func TestBlackBoxGracefulStopNeverCutsATurnsEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, prompt string
		tools        []any
		want         a2a.TaskState
	}{
		{name: "completed", prompt: "hello", want: a2a.TaskStateCompleted},
		{name: "input-required", prompt: "where am I", want: a2a.TaskStateInputRequired, tools: []any{map[string]any{
			"name": "get_location", "description": "The user's current city.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"precision": map[string]any{"type": "string"}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			top := t.TempDir()
			pluginDir := filepath.Join(top, "plugins")
			installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
				map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
				map[string]any{"script": `{"rules":[{"name":"where","match":"^where","steps":[
					{"toolCall":{"name":"get_location","arguments":{"precision":"city"}}}]}],
					"default":{"steps":[{"text":"all done"}]}}`})
			limits := map[string]any{"limits": map[string]any{"shutdownGrace": "1s"}}
			h := startSandboxHostEnv(t, top, pluginDir, nil, limits, "LOOOPY_CRASHPOINT=turn-ending:1:term")
			c := a2aClient(t, h.base, "")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()

			msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(tc.prompt))
			if tc.tools != nil {
				msg.Metadata = map[string]any{loop.InteractionURI: map[string]any{"clientTools": tc.tools}}
			}
			ids := make(chan a2a.TaskID, 1)
			go func() {
				for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: msg}) {
					if err != nil {
						return // the host stops under the stream
					}
					if task, ok := ev.(*a2a.Task); ok {
						select {
						case ids <- task.ID:
						default:
						}
					}
				}
			}()
			var taskID a2a.TaskID
			select {
			case taskID = <-ids:
			case err := <-h.exited:
				t.Fatalf("the host exited before the task was acknowledged: %v\n%s", err, h.out.String())
			case <-ctx.Done():
				t.Fatal("the task was never acknowledged")
			}
			select {
			case err := <-h.exited:
				if err != nil {
					t.Fatalf("the host did not stop cleanly: %v\n%s", err, h.out.String())
				}
			case <-ctx.Done():
				t.Fatal("the host did not stop at the turn's end")
			}

			h2 := startSandboxHostWith(t, top, pluginDir, nil, limits)
			c2 := replayClient(ctx, t, h2.base)
			got, err := c2.GetTask(ctx, &a2a.GetTaskRequest{ID: taskID})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.State != tc.want {
				t.Fatalf("task %s is %s after the restart, want %s (the stop came once its end was decided)", taskID, got.Status.State, tc.want)
			}
			// The replay of its stream from the start carries that end.
			// An input-required task's stream stays open: it is read until
			// the status shows (or the guard).
			rctx, rcancel := context.WithTimeout(ctx, time.Minute)
			defer rcancel()
			if states, ok := replayUntil(rctx, c2, taskID, tc.want); !ok {
				t.Fatalf("task %s is %s, but its stream replayed after the restart never says so (statuses %v)", taskID, tc.want, states)
			}
		})
	}
}

// replayClient is an A2A client whose subscriptions replay a task's stream
// from its start.
func replayClient(ctx context.Context, t *testing.T, base string) *a2aclient.Client {
	t.Helper()
	hc := &http.Client{Transport: lastEventID{"0"}, Timeout: 2 * time.Minute}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

// replayUntil reads the task's stream until a status want shows (true),
// or the stream (or ctx) ends first: the statuses it saw.
func replayUntil(ctx context.Context, c *a2aclient.Client, id a2a.TaskID, want a2a.TaskState) ([]a2a.TaskState, bool) {
	var states []a2a.TaskState
	for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: id}) {
		if err != nil {
			return states, false
		}
		if st, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
			states = append(states, st.Status.State)
			if st.Status.State == want {
				return states, true
			}
		}
	}
	return states, false
}

// TestBlackBoxCrashWhileCancelingAPausedTaskIsRepaired: a kill -9 after a
// paused (input-required) task's cancel is written and before its final
// events are in the log (LOOOPY_CRASHPOINT=end-saved:1). No turn runs for
// such a task; its end is written under its lease all the same, so the
// restarted host finds the lease and announces the end: the task's stream
// ends canceled. Without the lease the task stayed canceled with a stream
// that never said so.
func TestBlackBoxCrashWhileCancelingAPausedTaskIsRepaired(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": `{"rules":[{"name":"where","match":"^where","steps":[
			{"toolCall":{"name":"get_location","arguments":{"precision":"city"}}}]}],
			"default":{"steps":[{"text":"ok"}]}}`})
	h := startSandboxHostEnv(t, top, pluginDir, nil, nil, "LOOOPY_CRASHPOINT=end-saved:1")
	c := a2aClient(t, h.base, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("where am I"))
	msg.Metadata = map[string]any{loop.InteractionURI: map[string]any{"clientTools": []any{map[string]any{
		"name": "get_location", "description": "The user's current city.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"precision": map[string]any{"type": "string"}}}}}}}
	res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("the turn answered %T %+v, want a task paused input-required", res, res)
	}
	if _, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err == nil {
		t.Fatal("the cancel was answered: the host did not die at the point after the cancel was written")
	}
	select {
	case <-h.exited:
	case <-ctx.Done():
		t.Fatal("the host did not die at end-saved")
	}

	h2 := startSandboxHostWith(t, top, pluginDir, nil, nil)
	c2 := replayClient(ctx, t, h2.base)
	got, err := c2.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("task %s is %s after the restart, want canceled (the kill came after its cancel was written)", task.ID, got.Status.State)
	}
	// Its pause ended the A2A replay (input-required); its end is read
	// from the conversation's event stream, from its start.
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	if ends, ok := taskCompleteUntil(rctx, t, h2.base, task.ContextID, string(task.ID), "canceled"); !ok {
		t.Fatalf("task %s is canceled, but its events replayed after the restart never say so (its task-complete statuses %v)", task.ID, ends)
	}
}

// taskCompleteUntil reads the task-complete events of a task on its
// conversation's stream (/events, from the start) until one with status
// want shows (true), or the stream (or ctx) ends first: the statuses seen.
func taskCompleteUntil(ctx context.Context, t *testing.T, base, contextID, taskID, want string) ([]string, bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events/"+url.PathEscape(contextID)+
		"?kinds=task-complete&taskId="+url.QueryEscape(taskID), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/events: %s %s", resp.Status, b)
	}
	var seen []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev struct {
			Status string `json:"status"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) != nil {
			continue
		}
		seen = append(seen, ev.Status)
		if ev.Status == want {
			return seen, true
		}
	}
	return seen, false
}
