package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

// One client's live streams are bounded, per event stream (a
// conversation's /events, a task's A2A stream) and per principal, on every
// surface: past either bound a new stream is refused with a clear error
// (HTTP 429, or the A2A stream's error frame), other streams go
// on, and a closed stream gives its place back.
func TestLiveStreamsBoundedPerStreamAndPrincipal(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Limits.MaxStreamsPerStream = 2
	cfg.Limits.MaxStreamsPerPrincipal = 3
	m := host.NewMain()
	m.Config, m.Stdout = cfg, io.Discard
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	c := client10(t, m.URL(), "")
	ctx1 := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("hello")}).ContextID
	ctx2 := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("hello")}).ContextID

	var cancels []context.CancelFunc
	t.Cleanup(func() {
		for _, f := range cancels {
			f()
		}
	})
	open := func(contextID string) *http.Response {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		return openSSE(t, ctx, m.URL()+"/events/"+contextID, "", "")
	}
	refused := func(resp *http.Response, bound string) {
		t.Helper()
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), "too many live event streams") ||
			!strings.Contains(string(b), bound) {
			t.Fatalf("stream past %s: status %d, body %s; want 429 naming the bound", bound, resp.StatusCode, b)
		}
	}

	first := open(ctx1)
	for i, r := range []*http.Response{first, open(ctx1)} {
		if r.StatusCode != http.StatusOK {
			t.Fatalf("stream %d of a conversation: status %d", i+1, r.StatusCode)
		}
	}
	refused(open(ctx1), "maxStreamsPerStream")
	if r := open(ctx2); r.StatusCode != http.StatusOK {
		t.Fatalf("another conversation's stream: status %d", r.StatusCode)
	}
	refused(open(ctx2), "maxStreamsPerPrincipal")

	// The A2A streams count too: SendStreamingMessage is answered with the
	// stream's error frame, before it starts a turn.
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hello"}],"contextId":%q}}}`, ctx2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp := openSSE(t, ctx, m.URL()+"/", "", body, "A2A-Version", "1.0")
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(b), "too many live event streams") || !strings.Contains(string(b), "maxStreamsPerPrincipal") {
		t.Fatalf("an A2A stream past the principal's bound: %s", b)
	}
	tasks, err := c.ListTasks(context.Background(), &a2a.ListTasksRequest{ContextID: ctx2})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks.Tasks) != 1 {
		t.Fatalf("a refused SendStreamingMessage left %d tasks in its conversation; want only the first", len(tasks.Tasks))
	}

	// A closed stream gives its place back once the host has seen it go
	// (its next heartbeat write fails); the guard only ends a hung wait.
	cancels[0]()
	_ = first.Body.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := open(ctx1)
		if r.StatusCode == http.StatusOK {
			break
		}
		_ = r.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream never gave its place back: status %d", r.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
