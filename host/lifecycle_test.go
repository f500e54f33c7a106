package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

func TestCancelEndsStreamAsCanceled(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	ctx := context.Background()
	var taskID a2a.TaskID
	var last a2a.Event
	chunks := 0
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("slow 400")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		last = ev
		switch e := ev.(type) {
		case *a2a.Task:
			taskID = e.ID
		case *a2a.TaskArtifactUpdateEvent:
			chunks++
			if chunks == 2 {
				got, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: taskID})
				if err != nil {
					t.Fatalf("cancel: %v", err)
				}
				if got.Status.State != a2a.TaskStateCanceled {
					t.Fatalf("cancel returned state %s", got.Status.State)
				}
			}
		}
	}
	su, ok := last.(*a2a.TaskStatusUpdateEvent)
	if !ok || su.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("stream ended with %#v, want a canceled status", last)
	}
	if chunks >= 400 {
		t.Fatalf("the turn ran to its end (%d chunks) despite the cancel", chunks)
	}
	_, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: taskID})
	if !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel of a canceled task: %v, want TaskNotCancelable", err)
	}
	_, err = c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: "no-such-task"})
	if !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("cancel of an unknown task: %v, want TaskNotFound", err)
	}
}

func TestDisconnectDoesNotStopTurnAndResubscribeCatchesUp(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	ctx, cancel := context.WithCancel(context.Background())
	var taskID a2a.TaskID
	chunks := 0
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("slow 3")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if tk, ok := ev.(*a2a.Task); ok {
			taskID = tk.ID
		}
		if _, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok {
			chunks++
			if chunks == 2 {
				break // the client goes away
			}
		}
	}
	cancel()
	if chunks != 2 {
		t.Fatalf("read %d chunks before leaving", chunks)
	}
	var events []a2a.Event
	for ev, err := range c.SubscribeToTask(context.Background(), &a2a.SubscribeToTaskRequest{ID: taskID}) {
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		events = append(events, ev)
	}
	if len(events) == 0 {
		t.Fatal("resubscribe yielded nothing")
	}
	if _, ok := events[0].(*a2a.Task); !ok {
		t.Fatalf("resubscribe opened with %T, want the task", events[0])
	}
	var text strings.Builder
	for _, ev := range events {
		if au, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok && !au.LastChunk {
			text.WriteString(au.Artifact.Parts[0].Text())
		}
	}
	want := "Streaming one token per second for 3 seconds: tick1 tick2 tick3\nDone."
	if text.String() != want {
		t.Fatalf("resubscribed text %q, want every chunk from the start %q", text.String(), want)
	}
	su, ok := events[len(events)-1].(*a2a.TaskStatusUpdateEvent)
	if !ok || su.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("resubscribe ended with %#v, want completed", events[len(events)-1])
	}
	// A finished task has nothing more to stream.
	for _, err := range c.SubscribeToTask(context.Background(), &a2a.SubscribeToTaskRequest{ID: taskID}) {
		if !errors.Is(err, a2a.ErrUnsupportedOperation) {
			t.Fatalf("subscribe to a finished task: %v, want UnsupportedOperation", err)
		}
	}
}

func TestRPCErrors(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Limits.MaxBodyBytes = 4096
	h := startHost(t, cfg)
	c := client10(t, h.URL(), "")
	done := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("hi")})

	cases := []struct {
		name, body string
		code       int
	}{
		{"malformed JSON", `{"jsonrpc":"2.0","method":`, -32700},
		{"not an object", `[1,2]`, -32600},
		{"wrong version", `{"jsonrpc":"1.0","id":1,"method":"GetTask","params":{"id":"x"}}`, -32600},
		{"no method", `{"jsonrpc":"2.0","id":1}`, -32600},
		{"bad id", `{"jsonrpc":"2.0","id":{"a":1},"method":"GetTask"}`, -32600},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"DoSomething","params":{}}`, -32601},
		{"params not an object", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}`, -32602},
		{"params of the wrong type", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":5}}`, -32602},
		{"missing params", `{"jsonrpc":"2.0","id":1,"method":"GetTask"}`, -32602},
		{"message without parts", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[]}}}`, -32602},
		{"negative historyLength", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"` + string(done.ID) + `","historyLength":-1}}`, -32602},
		{"unknown task", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"nope"}}`, -32001},
		{"not cancelable", `{"jsonrpc":"2.0","id":1,"method":"CancelTask","params":{"id":"` + string(done.ID) + `"}}`, -32002},
		{"body too large", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"` + strings.Repeat("x", 5000) + `"}}`, -32600},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/", "/a2a/v0.3"} {
				body := tc.body
				if path == "/a2a/v0.3" {
					body = strings.NewReplacer(`"GetTask"`, `"tasks/get"`, `"CancelTask"`, `"tasks/cancel"`,
						`"SendMessage"`, `"message/send"`, `"ROLE_USER"`, `"user"`).Replace(body)
				}
				status, r := rpc(t, h.URL()+path, "", body)
				if r.Error == nil {
					t.Fatalf("%s: no error: %s", path, r.raw)
				}
				if r.Error.Code != tc.code {
					t.Fatalf("%s: code %d (%s), want %d", path, r.Error.Code, r.Error.Message, tc.code)
				}
				if r.JSONRPC != "2.0" {
					t.Fatalf("%s: jsonrpc %q", path, r.JSONRPC)
				}
				if tc.name == "body too large" {
					if status != 413 {
						t.Fatalf("%s: status %d, want 413", path, status)
					}
				} else if status != 200 {
					t.Fatalf("%s: status %d, want 200", path, status)
				}
				checkErrorData(t, path, r)
			}
		})
	}
}

// checkErrorData checks each version's error shape: 1.0 an array of typed
// details with an ErrorInfo; 0.3 an object or nothing.
func checkErrorData(t *testing.T, path string, r rpcReply) {
	t.Helper()
	data := strings.TrimSpace(string(r.Error.Data))
	if path == "/a2a/v0.3" {
		if data != "" && data[0] != '{' {
			t.Fatalf("0.3 error data %s, want an object or nothing", data)
		}
		return
	}
	var typed []map[string]any
	if err := json.Unmarshal(r.Error.Data, &typed); err != nil {
		t.Fatalf("1.0 error data %s is not an array: %v", data, err)
	}
	found := false
	for _, d := range typed {
		if ty, _ := d["@type"].(string); strings.HasSuffix(ty, "google.rpc.ErrorInfo") && d["reason"] != "" {
			found = true
		}
	}
	if !found {
		t.Fatalf("1.0 error data %s has no ErrorInfo", data)
	}
}

func TestAuthIsolatesPrincipals(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Auth.Enabled = true
	cfg.Auth.Keys = []host.APIKey{{Key: "alice-key", Principal: "alice"}, {Key: "bob-key", Principal: "bob"}}
	h := startHost(t, cfg)
	ctx := context.Background()
	alice, bob := client10(t, h.URL(), "alice-key"), client10(t, h.URL(), "bob-key")
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("secret")})

	if _, err := bob.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("bob gets alice's task: %v, want TaskNotFound", err)
	}
	if _, err := bob.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("bob cancels alice's task: %v, want TaskNotFound", err)
	}
	list, err := bob.ListTasks(ctx, &a2a.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 0 {
		t.Fatalf("bob lists %v tasks (err %v), want none", list, err)
	}
	// Bob naming alice's context id gets a conversation of his own
	// (context ids are scoped per principal): alice's is untouched.
	m := userMsg("let me in")
	m.ContextID = task.ContextID
	bobs := send(t, bob, ctx, &a2a.SendMessageRequest{Message: m})
	if strings.Contains(artifactText(bobs), "secret") {
		t.Fatalf("bob's turn in alice's context id sees her conversation: %q", artifactText(bobs))
	}
	if got, err := alice.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID}); err != nil || got.ID != task.ID {
		t.Fatalf("alice gets her task: %v", err)
	}
	list, err = alice.ListTasks(ctx, &a2a.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 1 {
		t.Fatalf("alice lists %v (err %v), want her one task", list, err)
	}
	_, r := rpc(t, h.URL(), "", `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`)
	if r.Error == nil || r.Error.Code != -31401 {
		t.Fatalf("no credential: %s, want -31401", r.raw)
	}
	_, r = rpc(t, h.URL(), "mallory-key", `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`)
	if r.Error == nil || r.Error.Code != -31401 {
		t.Fatalf("unknown credential: %s, want -31401", r.raw)
	}
	// The id names bob's own conversation for bob: its events, not alice's.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp := openSSE(t, sctx, h.URL()+"/events/"+task.ContextID, "bob-key", "")
	if resp.StatusCode != 200 {
		t.Fatalf("bob reads his events: status %d", resp.StatusCode)
	}
	for _, f := range readFrames(t, resp.Body, func(f frame) bool { return f.Event == "task-complete" }) {
		if strings.Contains(f.Data, string(task.ID)) || !strings.Contains(f.Data, string(bobs.ID)) {
			t.Fatalf("bob's stream shows %s", f.Data)
		}
	}
}

func TestReconnectWithLastEventIDAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := startHost(t, baseConfig(dir))
	ctx := context.Background()
	body := `{"jsonrpc":"2.0","id":"s1","method":"SendStreamingMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"help"}]}}}`
	resp := openSSE(t, ctx, h.URL(), "", body)
	all := readFrames(t, resp.Body, nil)
	if len(all) < 6 {
		t.Fatalf("only %d frames", len(all))
	}
	var task struct {
		Result struct {
			Task struct {
				ID string `json:"id"`
			} `json:"task"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(all[0].Data), &task); err != nil || task.Result.Task.ID == "" {
		t.Fatalf("first frame %q is not the task: %v", all[0].Data, err)
	}
	// Ids are the log's: they increase, with gaps where the log holds
	// events this stream does not carry (thoughts it did not ask for).
	prev := 0
	for i, f := range all {
		id, err := strconv.Atoi(f.ID)
		if err != nil || id <= prev {
			t.Fatalf("frame %d has id %q after %d", i, f.ID, prev)
		}
		prev = id
	}
	if err := h.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	h2 := startHost(t, baseConfig(dir))
	sub := `{"jsonrpc":"2.0","id":"s2","method":"SubscribeToTask","params":{"id":"` + task.Result.Task.ID + `"}}`
	resp = openSSE(t, ctx, h2.URL(), "", sub, "Last-Event-ID", all[2].ID)
	rest := readFrames(t, resp.Body, nil)
	if len(rest) != len(all)-3 {
		t.Fatalf("after a restart, Last-Event-ID %s replayed %d frames, want %d", all[2].ID, len(rest), len(all)-3)
	}
	for i, f := range rest {
		want := all[i+3]
		if f.ID != want.ID || strings.Replace(f.Data, `"s2"`, `"s1"`, 1) != want.Data {
			t.Fatalf("replayed frame %d = %+v, want %+v", i, f, want)
		}
	}
}

func TestEventsStreamFilters(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	c := client10(t, h.URL(), "")
	bg := context.Background()
	first := send(t, c, bg, &a2a.SendMessageRequest{Message: userMsg("one")})
	m := userMsg("two")
	m.ContextID = first.ContextID
	second := send(t, c, bg, &a2a.SendMessageRequest{Message: m})

	read := func(query string, stop func(frame) bool, hdr ...string) []frame {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		resp := openSSE(t, ctx, h.URL()+"/events/"+first.ContextID+query, "", "", hdr...)
		if resp.StatusCode != 200 {
			t.Fatalf("events%s: status %d", query, resp.StatusCode)
		}
		return readFrames(t, resp.Body, stop)
	}
	// Everything, until the second task completes.
	all := read("", func(f frame) bool {
		return f.Event == "task-complete" && strings.Contains(f.Data, string(second.ID))
	})
	for _, f := range all {
		if strings.HasPrefix(f.Event, "internal:") {
			t.Fatalf("internal event left the host: %+v", f)
		}
	}
	kinds := map[string]int{}
	for _, f := range all {
		kinds[f.Event]++
	}
	if kinds["task-created"] != 2 || kinds["task-complete"] != 2 || kinds["content-delta"] < 2 {
		t.Fatalf("kinds seen %v", kinds)
	}
	// Filtered by kind and task: only the second task's completion.
	got := read("?kinds=task-complete&taskId="+string(second.ID), func(frame) bool { return true })
	if len(got) != 1 || got[0].Event != "task-complete" || !strings.Contains(got[0].Data, string(second.ID)) {
		t.Fatalf("filtered stream %+v", got)
	}
	// Resumed after an id: the first frame is the one after it.
	got = read("", func(frame) bool { return true }, "Last-Event-ID", all[3].ID)
	if len(got) != 1 || got[0].ID != all[4].ID {
		t.Fatalf("resumed after %s: %+v, want %s", all[3].ID, got, all[4].ID)
	}
	// Bad filters are refused, naming the problem.
	ctx, cancel := context.WithTimeout(bg, time.Minute) // a hang guard
	defer cancel()
	resp := openSSE(t, ctx, h.URL()+"/events/"+first.ContextID+"?kinds=internal:llm-call", "", "")
	if resp.StatusCode != 400 {
		t.Fatalf("internal kind filter: status %d, want 400", resp.StatusCode)
	}
	resp = openSSE(t, ctx, h.URL()+"/events/"+first.ContextID, "", "", "Last-Event-ID", "abc")
	if resp.StatusCode != 400 {
		t.Fatalf("bad Last-Event-ID: status %d, want 400", resp.StatusCode)
	}
	resp = openSSE(t, ctx, h.URL()+"/events/unknown-context", "", "")
	if resp.StatusCode != 404 {
		t.Fatalf("unknown context: status %d, want 404", resp.StatusCode)
	}
}

// TestStreamingErrorsAreEvents: a streaming method's error reaches the
// client as a JSON-RPC error inside the event stream, where its reader looks.
func TestStreamingErrorsAreEvents(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	ctx := context.Background()
	for _, tc := range []struct {
		path, body string
		code       int
	}{
		{"/", `{"jsonrpc":"2.0","id":3,"method":"SendStreamingMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[]}}}`, -32602},
		{"/", `{"jsonrpc":"2.0","id":3,"method":"SubscribeToTask","params":{"id":"nope"}}`, -32001},
		{"/a2a/v0.3", `{"jsonrpc":"2.0","id":3,"method":"tasks/resubscribe","params":{"id":"nope"}}`, -32001},
		{"/a2a/v0.3", `{"jsonrpc":"2.0","id":3,"method":"message/stream","params":{"message":"x"}}`, -32602},
	} {
		resp := openSSE(t, ctx, h.URL()+tc.path, "", tc.body)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Fatalf("%s: content type %q", tc.body, ct)
		}
		frames := readFrames(t, resp.Body, nil)
		if len(frames) != 1 {
			t.Fatalf("%s: %d frames, want one error", tc.body, len(frames))
		}
		var r rpcReply
		if err := json.Unmarshal([]byte(frames[0].Data), &r); err != nil || r.Error == nil || r.Error.Code != tc.code || string(r.ID) != "3" {
			t.Fatalf("%s: frame %s, want error %d for id 3", tc.body, frames[0].Data, tc.code)
		}
	}
}
