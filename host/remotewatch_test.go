package host_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

// readCounter is a proxy in front of a remote host that counts the reads
// of tasks (GetTask) in flight, holding each a moment (hold) so that
// reads made at once overlap, and the reads of each task.
type readCounter struct {
	mu      sync.Mutex
	now     int
	most    int
	perTask map[string]int
}

func (c *readCounter) counts() (most int, per map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	per = make(map[string]int, len(c.perTask))
	for k, v := range c.perTask {
		per[k] = v
	}
	return c.most, per
}

// reset forgets what was counted (reads in flight stay counted).
func (c *readCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.most, c.perTask = c.now, map[string]int{}
}

func readCountingProxy(t *testing.T, base string, hold time.Duration) (string, *readCounter) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c := &readCounter{perTask: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	var self string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/agent-card.json" {
			// The card, with its interfaces here.
			res, err := http.Get(base + r.URL.Path)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(bytes.ReplaceAll(b, []byte(base), []byte(self)))
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"method":"GetTask"`)) {
			id := ""
			if i := bytes.Index(body, []byte(`"id":"`)); i >= 0 {
				rest := body[i+6:]
				if j := bytes.IndexByte(rest, '"'); j >= 0 {
					id = string(rest[:j])
				}
			}
			c.mu.Lock()
			c.now++
			c.most = max(c.most, c.now)
			c.perTask[id]++
			c.mu.Unlock()
			time.Sleep(hold)
			defer func() {
				c.mu.Lock()
				c.now--
				c.mu.Unlock()
			}()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	self = srv.URL
	return srv.URL, c
}

// TestRemoteWatchesBounded: five tasks paused on a remote child's
// requests, read every 20ms, with limits.maxRemoteWatches 2: never more
// than two reads of the child's tasks run at once, every paused task's
// remote task is read again and again (round robin: none starves), and
// once the five remote tasks are canceled on the child, all five paused
// tasks leave input-required with the calls' outcome. Before, each paused
// request had its own watch, all reading at once.
func TestRemoteWatchesBounded(t *testing.T) {
	t.Parallel()
	const paused, limit = 5, 2
	var counter *readCounter
	_, parent, ah := routedPairWith(t, false, func(c *host.Config) {
		var u string
		u, counter = readCountingProxy(t, c.RemoteAgents[0].URL, 30*time.Millisecond)
		c.RemoteAgents[0].URL = u
		c.RemoteAgents[0].WatchEvery = host.Duration(20 * time.Millisecond)
		c.Limits.MaxRemoteWatches = limit
	})
	alice := client10(t, parent.URL(), "alice-key")
	asParent := client10(t, ah.url, "parent-key")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var ids []a2a.TaskID
	var remotes []string
	for i := range paused {
		task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("delegate ledger pay " + string(rune('a'+i)))})
		r := pausedForChild(t, task)
		ids = append(ids, task.ID)
		remotes = append(remotes, r["route"].(map[string]any)["remoteTaskId"].(string))
	}
	// Every remote task read at least three times while all wait (only
	// the watches read the child's tasks now: the calls have paused).
	counter.reset()
	for {
		_, per := counter.counts()
		least := -1
		for _, id := range remotes {
			if least < 0 || per[id] < least {
				least = per[id]
			}
		}
		if least >= 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the watched remote tasks' reads: %v; want every one read again and again", per)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if most, per := counter.counts(); most > limit {
		t.Fatalf("%d reads of the child's tasks ran at once, want at most %d (reads: %v)", most, limit, per)
	}
	for _, id := range remotes {
		if _, err := asParent.CancelTask(ctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(id)}); err != nil {
			t.Fatalf("cancel the remote task %s on the child: %v", id, err)
		}
	}
	for _, id := range ids {
		for {
			tk, err := alice.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
			if err == nil && tk.Status.State.Terminal() {
				if tk.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(tk), "canceled") {
					t.Fatalf("the paused task %s: %s %q; want completed with the call's outcome (canceled)", id, tk.Status.State, artifactText(tk))
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the paused task %s never took its remote task's outcome (%v %v)", id, tk, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if n := len(ah.lines(t)); n != 0 {
		t.Fatalf("the child's tool ran %d times", n)
	}
}
