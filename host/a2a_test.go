package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/host/remote"
)

func TestSendMessageCompletes(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	task := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("hello there")})
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("state %s, want completed", task.Status.State)
	}
	if got := artifactText(task); got != "You said: hello there" {
		t.Fatalf("artifact text %q", got)
	}
	if task.ContextID == "" || task.ID == "" {
		t.Fatalf("task without ids: %+v", task)
	}
	if len(task.History) != 2 || task.History[0].Role != a2a.MessageRoleUser || task.History[1].Role != a2a.MessageRoleAgent {
		t.Fatalf("history %+v", task.History)
	}
}

func TestStreamDeliversDeltasBeforeTheEnd(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	var events []a2a.Event
	for ev, err := range c.SendStreamingMessage(context.Background(), &a2a.SendMessageRequest{Message: userMsg("help")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		events = append(events, ev)
	}
	if len(events) < 4 {
		t.Fatalf("only %d events", len(events))
	}
	if _, ok := events[0].(*a2a.Task); !ok {
		t.Fatalf("first event %T, want the task", events[0])
	}
	last, ok := events[len(events)-1].(*a2a.TaskStatusUpdateEvent)
	if !ok || last.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("last event %#v, want completed status", events[len(events)-1])
	}
	// Several artifact chunks, appended, before the final status.
	var chunks []string
	for _, ev := range events {
		if au, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok && !au.LastChunk {
			chunks = append(chunks, au.Artifact.Parts[0].Text())
		}
	}
	if len(chunks) < 3 {
		t.Fatalf("%d delta chunks, want several: %q", len(chunks), chunks)
	}
	task, err := c.GetTask(context.Background(), &a2a.GetTaskRequest{ID: last.TaskID})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got, want := strings.Join(chunks, ""), artifactText(task); got != want || !strings.HasPrefix(got, "I am the scripted demo model") {
		t.Fatalf("deltas join to %q, the task's text is %q", got, want)
	}
}

func TestMultiTurnSameContext(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	ctx := context.Background()
	first := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("apples")})
	m := userMsg("pears")
	m.ContextID = first.ContextID
	second := send(t, c, ctx, &a2a.SendMessageRequest{Message: m})
	if second.ContextID != first.ContextID || second.ID == first.ID {
		t.Fatalf("second task %s/%s, first %s/%s", second.ContextID, second.ID, first.ContextID, first.ID)
	}
	if got := artifactText(second); got != "You said: apples | pears" {
		t.Fatalf("second answer %q does not remember the first turn", got)
	}
}

func TestGetTaskHistoryLength(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	ctx := context.Background()
	task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("remember me")})
	for _, tc := range []struct {
		n    *int
		want int
	}{{nil, 2}, {ptr(0), 0}, {ptr(1), 1}, {ptr(5), 2}} {
		got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID, HistoryLength: tc.n})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if len(got.History) != tc.want {
			t.Fatalf("historyLength %v: %d messages, want %d", tc.n, len(got.History), tc.want)
		}
		if tc.want == 1 && got.History[0].Role != a2a.MessageRoleAgent {
			t.Fatalf("historyLength 1 kept %s, want the last (agent) message", got.History[0].Role)
		}
		if got.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("state %s", got.Status.State)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestListTasks(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	ctx := context.Background()
	a := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("a")})
	m := userMsg("b")
	m.ContextID = a.ContextID
	send(t, c, ctx, &a2a.SendMessageRequest{Message: m})
	send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("c")})

	all, err := c.ListTasks(ctx, &a2a.ListTasksRequest{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if all.TotalSize != 3 || len(all.Tasks) != 3 {
		t.Fatalf("list all: total %d, %d tasks", all.TotalSize, len(all.Tasks))
	}
	byCtx, err := c.ListTasks(ctx, &a2a.ListTasksRequest{ContextID: a.ContextID})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(byCtx.Tasks) != 2 {
		t.Fatalf("list by context: %d tasks, want 2", len(byCtx.Tasks))
	}
	page1, err := c.ListTasks(ctx, &a2a.ListTasksRequest{PageSize: 2})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(page1.Tasks) != 2 || page1.NextPageToken == "" {
		t.Fatalf("page 1: %d tasks, token %q", len(page1.Tasks), page1.NextPageToken)
	}
	page2, err := c.ListTasks(ctx, &a2a.ListTasksRequest{PageSize: 2, PageToken: page1.NextPageToken})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(page2.Tasks) != 1 || page2.NextPageToken != "" {
		t.Fatalf("page 2: %d tasks, token %q", len(page2.Tasks), page2.NextPageToken)
	}
	seen := map[a2a.TaskID]bool{}
	for _, tk := range append(page1.Tasks, page2.Tasks...) {
		seen[tk.ID] = true
	}
	if len(seen) != 3 {
		t.Fatalf("pages overlap: %v", seen)
	}
	done, err := c.ListTasks(ctx, &a2a.ListTasksRequest{Status: a2a.TaskStateCanceled})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(done.Tasks) != 0 {
		t.Fatalf("status filter: %d canceled tasks, want 0", len(done.Tasks))
	}
}

func TestConversationSurvivesRestartAndEviction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := baseConfig(dir)
	cfg.Limits.MaxAgents = 1 // every new context evicts the other
	h := startHost(t, cfg)
	ctx := context.Background()
	c := client10(t, h.URL(), "")
	first := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("apples")})
	other := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("plums")})
	m := userMsg("pears")
	m.ContextID = first.ContextID
	if got := artifactText(send(t, c, ctx, &a2a.SendMessageRequest{Message: m})); got != "You said: apples | pears" {
		t.Fatalf("after eviction: %q", got)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	h2 := startHost(t, cfg)
	c2 := client10(t, h2.URL(), "")
	m = userMsg("figs")
	m.ContextID = first.ContextID
	if got := artifactText(send(t, c2, ctx, &a2a.SendMessageRequest{Message: m})); got != "You said: apples | pears | figs" {
		t.Fatalf("after a restart: %q", got)
	}
	m = userMsg("kiwis")
	m.ContextID = other.ContextID
	if got := artifactText(send(t, c2, ctx, &a2a.SendMessageRequest{Message: m})); got != "You said: plums | kiwis" {
		t.Fatalf("other context after a restart: %q", got)
	}
	got, err := c2.GetTask(ctx, &a2a.GetTaskRequest{ID: first.ID})
	if err != nil || got.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("first task after a restart: %v %v", got, err)
	}
}

func TestReturnImmediately(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	ctx := context.Background()
	task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("slow 2"),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if task.Status.State.Terminal() {
		t.Fatalf("returned %s: the client asked not to wait", task.Status.State)
	}
	// The task is visible at once; its stream runs to the end, completed.
	if _, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID}); err != nil {
		t.Fatalf("get right after submitting: %v", err)
	}
	var last a2a.Event
	for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		last = ev
	}
	if su, ok := last.(*a2a.TaskStatusUpdateEvent); !ok || su.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("stream ended with %#v", last)
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil || got.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("after the stream: %v %v", got, err)
	}
	// A second message to a busy context is refused, not queued.
	slow := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("slow 2"),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	m := userMsg("me too")
	m.ContextID = slow.ContextID
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: m}); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("message to a busy context: %v, want a busy error", err)
	} else if !remote.IsBusy(err) {
		t.Fatalf("a busy refusal through the official client is not told apart by its details: %#v", err)
	}
	// The same through a stream (what a remote agent's caller sends), and
	// by the error's details alone: another Looopy host retries on it.
	var streamErr error
	for _, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: m}) {
		if err != nil {
			streamErr = err
			break
		}
	}
	if !remote.IsBusy(streamErr) {
		t.Fatalf("streamed message to a busy context: %#v, want a busy refusal", streamErr)
	}
	// Other refusals are not busy.
	_, err = c.GetTask(ctx, &a2a.GetTaskRequest{ID: "no-such-task"})
	if err == nil || remote.IsBusy(err) {
		t.Fatalf("a task not found: %v, busy %v", err, remote.IsBusy(err))
	}
}

// A streaming call refused for its credential is refused as a stream: the
// official client reading events gets the error, not an empty stream that
// looks like a turn without events. Other calls keep their JSON answer.
func TestRefusedStreamingCallIsAnErrorEvent(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Auth.Enabled = true
	cfg.Auth.Keys = []host.APIKey{{Key: "alice-key", Principal: "alice"}}
	h := startHost(t, cfg)
	ctx := context.Background()
	for _, token := range []string{"", "wrong-key"} {
		c := client10(t, h.URL(), token)
		n := 0
		var got error
		for _, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("hello")}) {
			n++
			if err != nil {
				got = err
				break
			}
		}
		if !errors.Is(got, a2a.ErrUnauthenticated) {
			t.Fatalf("key %q: stream of %d items ended with %v; want ErrUnauthenticated", token, n, got)
		}
	}
	for _, c := range []struct{ path, body string }{
		{"/a2a/v1", `{"jsonrpc":"2.0","id":7,"method":"SubscribeToTask","params":{"id":"t-1"}}`},
		{"/a2a/v0.3", `{"jsonrpc":"2.0","id":7,"method":"message/stream","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`},
		{"/a2a/v0.3", `{"jsonrpc":"2.0","id":7,"method":"tasks/resubscribe","params":{"id":"t-1"}}`},
	} {
		resp := openSSE(t, ctx, h.URL()+c.path, "", c.body)
		body, _ := io.ReadAll(resp.Body)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") ||
			!strings.HasPrefix(string(body), "data: ") || !strings.Contains(string(body), `"error"`) || !strings.Contains(string(body), `"id":7`) {
			t.Errorf("%s %s: %s %q", c.path, c.body, ct, body)
		}
	}
	status, got := rpc(t, h.URL()+"/a2a/v1", "", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t-1"}}`)
	if status != 200 || !strings.Contains(got.raw, `"error"`) || strings.HasPrefix(got.raw, "data:") {
		t.Errorf("GetTask without a key: %d %s", status, got.raw)
	}
}

// The blocking answer is the task the turn's commit saved, not read back:
// it must be exactly what GetTask returns after it, for a new
// conversation, a tool call, a later turn of the same conversation and a
// failed turn.
func TestBlockingAnswerIsTheStoredTask(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	ctx := context.Background()
	contextID := ""
	for _, text := range []string{"hello there", "calc 2+3", "echo again", "fail"} {
		m := userMsg(text)
		m.ContextID = contextID
		answer := send(t, c, ctx, &a2a.SendMessageRequest{Message: m})
		contextID = answer.ContextID
		got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: answer.ID})
		if err != nil {
			t.Fatalf("%s: get: %v", text, err)
		}
		if !answer.Status.State.Terminal() || len(answer.History) == 0 {
			t.Fatalf("%s: answered %s with %d messages", text, answer.Status.State, len(answer.History))
		}
		// A status message's id is made at each reading (its time).
		for _, task := range []*a2a.Task{answer, got} {
			if m := task.Status.Message; m != nil {
				if !strings.HasPrefix(m.ID, string(task.ID)+"-status-") {
					t.Fatalf("%s: status message id %q", text, m.ID)
				}
				m.ID = ""
			}
		}
		a, _ := json.Marshal(answer)
		g, _ := json.Marshal(got)
		if string(a) != string(g) {
			t.Fatalf("%s: the blocking answer differs from GetTask:\nanswer %s\nget    %s", text, a, g)
		}
	}
}
