//go:build linux

package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/looopy-go/looopy/host/chat"
)

// ledgerTag makes the ledger entries of one run of a test its own: the
// chat tests share one host and its ledger file, and a test run again
// (-count) must not count the lines of its earlier runs.
var ledgerRuns atomic.Int64

func ledgerTag() string { return fmt.Sprintf("r%d", ledgerRuns.Add(1)) }

// screen is a chat's output, read while it runs.
type screen struct {
	mu   sync.Mutex
	b    strings.Builder
	read int
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// expect waits until the screen, after what earlier expects consumed,
// shows want, and returns what came before it (the guard only fails fast).
func (s *screen) expect(t *testing.T, want string) string {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		all := s.String()
		if i := strings.Index(all[s.read:], want); i >= 0 {
			before := all[s.read : s.read+i]
			s.read += i + len(want)
			return before
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chat never showed %q; after the last match it shows:\n%s", want, all[s.read:])
		}
	}
}

// runChat runs chat.Run in this process with the given transport; lines
// typed go to in, and done closes when the chat ends.
func runChat(t *testing.T, opts chat.Options) (in *io.PipeWriter, out *screen, done chan struct{}) {
	t.Helper()
	r, w := io.Pipe()
	out, done = &screen{}, make(chan struct{})
	go func() {
		defer close(done)
		if err := chat.Run(context.Background(), opts, r, out); err != nil {
			t.Errorf("chat.Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = w.Close()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Errorf("the chat did not end with its input")
		}
	})
	return w, out, done
}

// lagging holds back a Looopy event stream after the first task-complete
// it delivers, until the request ends: a stream that has delivered that
// much when the turn's A2A stream ends (one that lags, as on a loaded
// machine), for as long as the chat would wait.
type lagging struct{}

func (lagging) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !strings.HasPrefix(r.URL.Path, "/events/") {
		return resp, err
	}
	resp.Body = &holdAfterEnd{ctx: r.Context(), body: resp.Body, r: bufio.NewReader(resp.Body)}
	return resp, nil
}

type holdAfterEnd struct {
	ctx            context.Context
	body           io.ReadCloser
	r              *bufio.Reader
	inEnd, holding bool
}

// Read passes the stream on a line at a time until the blank line that
// ends a task-complete frame, then blocks until the request ends.
func (h *holdAfterEnd) Read(p []byte) (int, error) {
	if h.holding {
		<-h.ctx.Done()
		return 0, h.ctx.Err()
	}
	line, err := h.r.ReadString('\n')
	if strings.TrimSpace(strings.TrimPrefix(line, "event:")) == "task-complete" && strings.HasPrefix(line, "event:") {
		h.inEnd = true
	}
	if h.inEnd && strings.TrimSpace(line) == "" {
		h.holding = true
	}
	n := copy(p, line)
	if n < len(line) {
		return 0, fmt.Errorf("read buffer of %d bytes for a line of %d", len(p), len(line))
	}
	return n, err
}

func (h *holdAfterEnd) Close() error { return h.body.Close() }

// A chat resuming a conversation with a paused task shows the answer's
// turn to its end. Its event stream used to be read from the start of the
// conversation: the paused task's earlier legs were drawn again, and the
// task-complete of its pause ended the wait for the answer's own, so the
// prompt came back before the answer when that stream lagged behind the
// A2A one ("⚙ ledger_append", then the prompt, in a CI run). The stream
// here delivers nothing past the first task-complete it carries: read from
// the start, that is the pause's.
func TestChatResumedAnswerWaitsForItsOwnEnd(t *testing.T) {
	m, ledger := chatHost(t)
	entry := "lag " + ledgerTag()
	in, out, done := runChat(t, chat.Options{URL: m.URL(), APIKey: chatKey})
	out.expect(t, "you> ")
	fmt.Fprintf(in, "ledger %s\n", entry)
	out.expect(t, "approve? [")
	match := contextLine.FindStringSubmatch(out.String())
	if match == nil {
		t.Fatalf("no context id shown:\n%s", out.String())
	}
	fmt.Fprintln(in, "/quit")
	<-done

	in, out, _ = runChat(t, chat.Options{URL: m.URL(), APIKey: chatKey, ContextID: match[1], Transport: lagging{}})
	out.expect(t, "waits for an answer:")
	out.expect(t, "approve? [")
	fmt.Fprintln(in, "y")
	leg := out.expect(t, "you> ")
	if !strings.Contains(leg, "Ledger: recorded "+entry) {
		t.Fatalf("the prompt came back before the answer of the resumed task:\n%s", leg)
	}
	if strings.Contains(leg, "Holding 1 call until the client answers") {
		t.Fatalf("the paused task's earlier leg was drawn again:\n%s", leg)
	}
	b, err := os.ReadFile(filepath.Join(ledger, "ledger.log"))
	if err != nil || strings.Count(string(b), entry) != 1 {
		t.Fatalf("ledger = %q (%v), want %s once", b, err, entry)
	}
}
