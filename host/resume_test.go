package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// streamTask runs one streamed turn ("help") to its end and returns the
// task id, the context id and every frame.
func streamTask(t *testing.T, url string) (taskID, contextID string, all []frame) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":"s1","method":"SendStreamingMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"help"}]}}}`
	resp := openSSE(t, context.Background(), url, "", body)
	all = readFrames(t, resp.Body, nil)
	var first struct {
		Result struct {
			Task struct {
				ID        string `json:"id"`
				ContextID string `json:"contextId"`
			} `json:"task"`
		} `json:"result"`
	}
	if len(all) == 0 || json.Unmarshal([]byte(all[0].Data), &first) != nil || first.Result.Task.ID == "" {
		t.Fatalf("stream did not open with the task: %+v", all)
	}
	return first.Result.Task.ID, first.Result.Task.ContextID, all
}

// readAllWithin reads a whole stream; a stream that does not end within
// the guard fails the test instead of hanging it.
func readAllWithin(t *testing.T, url, body string, hdr ...string) (int, []frame, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := openSSE(t, ctx, url, "", body, hdr...)
	b, err := io.ReadAll(resp.Body)
	if ctx.Err() != nil {
		t.Fatalf("stream %s did not end (it hangs): %v", url, err)
	}
	return resp.StatusCode, readFrames(t, strings.NewReader(string(b)), nil), string(b)
}

// SubscribeToTask on a finished task, resumed from any id a client can
// hold (the first, the one before the end, the final status itself), on
// both protocols and after a restart (which forgets which streams are
// finished): the rest is replayed, then the stream ends. It never hangs.
func TestResumeFinishedTaskNeverHangs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := startHost(t, baseConfig(dir))
	taskID, _, all := streamTask(t, h.URL())
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h = startHost(t, baseConfig(dir))
	n := len(all)
	// The ids a client holds: none yet (0), the first frame's, the one before the end,
	// the final status's (ids are the log's; the stream skips the events
	// it does not carry, so they need not be consecutive).
	// -1: Last-Event-ID 0, before the first id: the whole stream again.
	for _, i := range []int{-1, 0, n - 2, n - 1} {
		after := "0"
		if i >= 0 {
			after = all[i].ID
		}
		for _, proto := range []struct{ path, body string }{
			{"/", `{"jsonrpc":"2.0","id":"s2","method":"SubscribeToTask","params":{"id":"` + taskID + `"}}`},
			{"/a2a/v0.3", `{"jsonrpc":"2.0","id":"s2","method":"tasks/resubscribe","params":{"id":"` + taskID + `"}}`},
		} {
			_, got, raw := readAllWithin(t, h.URL()+proto.path, proto.body, "Last-Event-ID", after)
			if len(got) != n-1-i {
				t.Fatalf("%s after id %s (frame %d of %d): %d frames, want %d\n%s", proto.path, after, i+1, n, len(got), n-1-i, raw)
			}
			if i == -1 {
				for j := range got {
					// the same frames; only the JSON-RPC id is this request's
					// (the first stream was 1.0: a 0.3 replay has the same ids)
					same := proto.path != "/" || strings.Replace(got[j].Data, `"id":"s2"`, `"id":"s1"`, 1) == all[j].Data
					if got[j].ID != all[j].ID || !same {
						t.Fatalf("%s from 0: frame %d is %s %s, the first stream had %s %s", proto.path, j, got[j].ID, got[j].Data, all[j].ID, all[j].Data)
					}
				}
			}
			if strings.Contains(raw, `"error"`) {
				t.Fatalf("%s after %s: an error frame: %s", proto.path, after, raw)
			}
		}
	}
}

// A Last-Event-ID beyond the end of a stream is a clear client error, on
// A2A 1.0, A2A 0.3 and /events, never an internal error or an empty 200.
func TestLastEventIDAheadIsAClientError(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	taskID, contextID, all := streamTask(t, h.URL())
	// Beyond the log's end: past the last frame's id and every event the
	// stream did not carry after it.
	last, err := strconv.Atoi(all[len(all)-1].ID)
	if err != nil {
		t.Fatal(err)
	}
	ahead := fmt.Sprint(last + 1000)
	for _, proto := range []struct{ path, body string }{
		{"/", `{"jsonrpc":"2.0","id":"s2","method":"SubscribeToTask","params":{"id":"` + taskID + `"}}`},
		{"/a2a/v0.3", `{"jsonrpc":"2.0","id":"s2","method":"tasks/resubscribe","params":{"id":"` + taskID + `"}}`},
	} {
		_, got, raw := readAllWithin(t, h.URL()+proto.path, proto.body, "Last-Event-ID", ahead)
		if len(got) != 1 {
			t.Fatalf("%s: %d frames, want one error frame: %s", proto.path, len(got), raw)
		}
		var r rpcReply
		if err := json.Unmarshal([]byte(got[0].Data), &r); err != nil || r.Error == nil {
			t.Fatalf("%s: frame %q is not a JSON-RPC error", proto.path, got[0].Data)
		}
		if r.Error.Code != -32602 || !strings.Contains(r.Error.Message, "beyond the end of the stream") {
			t.Fatalf("%s: error %d %q, want -32602 saying the id is beyond the end", proto.path, r.Error.Code, r.Error.Message)
		}
	}
	status, _, raw := readAllWithin(t, h.URL()+"/events/"+contextID, "", "Last-Event-ID", "100000")
	if status != 400 || !strings.Contains(raw, "beyond the end of the stream") {
		t.Fatalf("/events ahead: status %d %s, want 400 saying the id is beyond the end", status, raw)
	}
}

// A client that sends its next message the moment it reads the final
// status of the previous turn is never refused as busy: seeing the end of
// a turn means the context takes the next one.
func TestNextTurnAcceptedWhenTheFinalStatusIsSeen(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	ctx := context.Background()
	for i := range 30 {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"SendStreamingMessage","params":{"message":{"messageId":"m%d","contextId":"back-to-back","role":"ROLE_USER","parts":[{"text":"hello %d"}]}}}`, i, i, i)
		resp := openSSE(t, ctx, h.URL(), "", body)
		frames := readFrames(t, resp.Body, func(f frame) bool {
			return strings.Contains(f.Data, `"statusUpdate"`) && strings.Contains(f.Data, "TASK_STATE_COMPLETED")
		})
		resp.Body.Close()
		if len(frames) == 0 || strings.Contains(frames[0].Data, `"error"`) {
			t.Fatalf("turn %d right after the previous one's final status: %+v", i, frames)
		}
		last := frames[len(frames)-1].Data
		if !strings.Contains(last, "TASK_STATE_COMPLETED") {
			t.Fatalf("turn %d did not complete: %s", i, last)
		}
	}
}
