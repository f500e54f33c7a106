package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
)

// lastEventID asks a task stream for a replay after an event id.
type lastEventID struct{ id string }

func (l lastEventID) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Last-Event-ID", l.id)
	return http.DefaultTransport.RoundTrip(r)
}

// replayHoldsWhatWasSeen subscribes to task id on the host at base from
// the first event (Last-Event-ID 0), requires the replay to end completed
// and to hold every event of seen, in order (what a client saw before the
// stream was cut, when), and returns the task and its answer's text.
func replayHoldsWhatWasSeen(t *testing.T, ctx context.Context, base string, id a2a.TaskID, seen []a2a.Event, when string) (*a2a.Task, string) {
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
	defer c.Destroy()
	var replay []a2a.Event
	final := a2a.TaskState("")
	for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: id}) {
		if err != nil {
			t.Fatalf("replay of task %s %s: %v", id, when, err)
		}
		replay = append(replay, ev)
		if st, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && st.Status.State.Terminal() {
			final = st.Status.State
		}
	}
	if final != a2a.TaskStateCompleted {
		t.Fatalf("the replay of task %s %s ends %q, want completed", id, when, final)
	}
	j := 0
	for i, ev := range seen {
		want, _ := json.Marshal(ev)
		for ; j < len(replay); j++ {
			if got, _ := json.Marshal(replay[j]); string(got) == string(want) {
				break
			}
		}
		if j == len(replay) {
			t.Fatalf("event %d the client saw is not in the replay %s: %s", i, when, want)
		}
		j++
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, a := range got.Artifacts {
		for _, p := range a.Parts {
			text.WriteString(p.Text())
		}
	}
	return got, text.String()
}

// TestBlackBoxGracefulStopLeavesTurnsResumable: a SIGTERM whose grace runs
// out while a turn runs is never worse than a kill -9 at that moment. The
// turn is not ended failed: the client's stream ends with SHUTTING_DOWN
// (subscribe again), never with a final status; the task stays working;
// the restarted host resumes it and it completes; and every event the
// client saw before the stop is replayed, in order, by a subscription from
// the start of the task's stream.
func TestBlackBoxGracefulStopLeavesTurnsResumable(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": `{"rules":[{"name":"slow","match":"^slow (\\d+)$","steps":[
			{"text":"start"},{"text":" tick{{i}}","delayMs":1000,"repeat":"$1"},{"text":" done"}]}],
			"default":{"steps":[{"text":"ok"}]}}`})
	limits := map[string]any{"limits": map[string]any{"shutdownGrace": "1s"}}
	h := startSandboxHostWith(t, top, pluginDir, nil, limits)
	c := a2aClient(t, h.base, "")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type seen struct {
		events []a2a.Event
		err    error
	}
	started, ended := make(chan a2a.TaskID, 1), make(chan seen, 1)
	go func() {
		var s seen
		var id a2a.TaskID
		for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("slow 4"))}) {
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

	// The grace (1s) runs out long before the turn (4s) would end.
	if err := syscall.Kill(h.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.exited:
		if err != nil {
			t.Fatalf("the host did not stop cleanly: %v\n%s", err, h.out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the host did not stop after SIGTERM")
	}
	first := <-ended
	for _, ev := range first.events {
		if st, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && st.Status.State.Terminal() {
			t.Fatalf("the stream cut by the shutdown carried a final status %s: %+v", st.Status.State, st.Status)
		}
	}
	if first.err == nil || !strings.Contains(first.err.Error(), "subscribe again") {
		t.Fatalf("the stream cut by the shutdown ended with %v, want an error telling the client to subscribe again", first.err)
	}
	if !strings.Contains(h.out.String(), "turn handed on") {
		t.Fatalf("the host did not say it handed the turn on:\n%s", h.out.String())
	}

	// The next start resumes the task; it completes.
	h2 := startSandboxHostWith(t, top, pluginDir, nil, limits)
	got, text := replayHoldsWhatWasSeen(t, ctx, h2.base, taskID, first.events, "after the restart")
	if got.Status.State != a2a.TaskStateCompleted || !strings.Contains(text, "tick4 done") {
		t.Fatalf("after the restart the task is %s with %q, want completed with the whole answer", got.Status.State, text)
	}
}
