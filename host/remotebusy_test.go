package host_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/looopy-go/looopy/host"
)

// busyPair is a child host that runs one turn at a time (limits.maxRunning
// 1) and a parent whose remote agent "researcher" is the child, reached
// over A2A 1.0 or, through a proxy whose card offers only the child's 0.3
// interface, over 0.3.
type busyPair struct {
	child, parent *testHost
	logs          *syncBuffer
	other         *a2aclient.Client // another principal of the child
	asParent      *a2aclient.Client // the parent's principal on the child
	alice         *a2aclient.Client // the parent's client
}

func newBusyPair(t *testing.T, over03 bool, set func(*host.RemoteAgentConfig)) *busyPair {
	t.Helper()
	ccfg := baseConfig(t.TempDir())
	ccfg.Plugins.Only = []string{"scripted-model", "researcher", "echo"}
	ccfg.Auth.Enabled = true
	ccfg.Auth.Keys = []host.APIKey{{Key: "parent-key", Principal: "parent-host"}, {Key: "other-key", Principal: "other"}}
	ccfg.Limits.MaxRunning, ccfg.Limits.MaxRunningPerPrincipal = 1, 1
	child := startHost(t, ccfg)
	target := child.URL()
	if over03 {
		target = only03Proxy(t, child.URL())
	}
	pcfg := baseConfig(t.TempDir())
	pcfg.Plugins.Only = []string{"scripted-model", "echo"}
	pcfg.Auth.Enabled = true
	pcfg.Auth.Keys = []host.APIKey{{Key: "alice-key", Principal: "alice"}}
	ra := host.RemoteAgentConfig{Name: "researcher", URL: target,
		Headers: map[string]string{"Authorization": "Bearer parent-key"}, AllowPrivateNetwork: true}
	set(&ra)
	pcfg.RemoteAgents = []host.RemoteAgentConfig{ra}
	logs := &syncBuffer{}
	parent, _ := tracedHost(t, pcfg, logs)
	return &busyPair{child: child, parent: parent, logs: logs, other: client10(t, child.URL(), "other-key"),
		asParent: client10(t, child.URL(), "parent-key"), alice: client10(t, parent.URL(), "alice-key")}
}

// only03Proxy serves base behind a card that offers its A2A 0.3 interface
// alone (as a host speaking only 0.3 would): every other request goes to
// base as it is.
func only03Proxy(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	var self string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/agent-card.json" {
			rp.ServeHTTP(w, r)
			return
		}
		res, err := http.Get(base + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var card map[string]any
		if err := json.Unmarshal(b, &card); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		delete(card, "supportedInterfaces")
		delete(card, "additionalInterfaces")
		card["url"], card["preferredTransport"], card["protocolVersion"] = self+"/a2a/v0.3", "JSONRPC", "0.3.0"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(card)
	}))
	t.Cleanup(srv.Close)
	self = srv.URL
	return srv.URL
}

// occupy starts a turn of another principal that holds the child's only
// turn slot until canceled.
func (p *busyPair) occupy(t *testing.T, ctx context.Context) a2a.TaskID {
	t.Helper()
	r, err := p.other.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("SLOW 600"),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatalf("occupy the child: %v", err)
	}
	return r.(*a2a.Task).ID
}

// ask sends alice's message to the parent and returns its task at once.
func (p *busyPair) ask(t *testing.T, ctx context.Context, text string) a2a.TaskID {
	t.Helper()
	r, err := p.alice.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMsg(text),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatalf("ask the parent: %v", err)
	}
	return r.(*a2a.Task).ID
}

func (p *busyPair) waitLog(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	for !strings.Contains(p.logs.String(), what) {
		if ctx.Err() != nil {
			t.Fatalf("the parent never logged %q; its log:\n%s", what, p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// endOf waits until the parent's task id leaves working.
func (p *busyPair) endOf(t *testing.T, ctx context.Context, id a2a.TaskID) *a2a.Task {
	t.Helper()
	for {
		tk, err := p.alice.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
		if err != nil {
			t.Fatalf("the parent's task: %v", err)
		}
		if tk.Status.State.Terminal() {
			return tk
		}
		if ctx.Err() != nil {
			t.Fatalf("the parent's task is still %s", tk.Status.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRemoteHostBusyIsRetried: a remote host at its turn limit refuses the
// call's message with HOST_BUSY (and Retry-After: 1). The call tries again
// after the pause the refusal asks and is served once the slot is free:
// the parent's task completes with the child's answer, over A2A 1.0 and
// over 0.3 (where the reason leads the message and Retry-After is only the
// header). Before, the refusal ended the call at once as "the remote agent
// died".
func TestRemoteHostBusyIsRetried(t *testing.T) {
	t.Parallel()
	for _, over03 := range []bool{false, true} {
		name := "a2a-1.0"
		if over03 {
			name = "a2a-0.3"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newBusyPair(t, over03, func(ra *host.RemoteAgentConfig) {
				ra.BusyRetry, ra.BusyPause = host.Budget(2*time.Minute), host.Duration(10*time.Millisecond)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			slow := p.occupy(t, ctx)
			id := p.ask(t, ctx, "research owls")
			p.waitLog(t, ctx, "remote host busy: trying again")
			if _, err := p.other.CancelTask(ctx, &a2a.CancelTaskRequest{ID: slow}); err != nil {
				t.Fatalf("free the child's slot: %v", err)
			}
			task := p.endOf(t, ctx, id)
			text := artifactText(task)
			if task.Status.State != a2a.TaskStateCompleted || strings.Contains(text, "failed") || !strings.Contains(text, "The researcher says:") {
				t.Fatalf("the parent's task: %s %.500q; want completed with the child's answer", task.Status.State, text)
			}
			remote := childTasks(t, p.asParent)
			if len(remote) != 1 || remote[0].Status.State != a2a.TaskStateCompleted {
				t.Fatalf("the parent's tasks on the child: %+v; want one, completed", remote)
			}
		})
	}
}

// TestRemoteHostBusyBudget: a call whose busyRetry is shorter than the
// Retry-After the busy host asks (1s) gives up at its first refusal, never
// trying again sooner than asked, and the parent's model reads a clear
// error naming the refusal; the child ran nothing of the parent's. With
// the pause alone (10ms) it would have sent the message again and again.
func TestRemoteHostBusyBudget(t *testing.T) {
	t.Parallel()
	for _, over03 := range []bool{false, true} {
		name := "a2a-1.0"
		if over03 {
			name = "a2a-0.3"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newBusyPair(t, over03, func(ra *host.RemoteAgentConfig) {
				ra.BusyRetry, ra.BusyPause = host.Budget(300*time.Millisecond), host.Duration(10*time.Millisecond)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			p.occupy(t, ctx)
			task := p.endOf(t, ctx, p.ask(t, ctx, "research owls"))
			text := artifactText(task)
			for _, want := range []string{`agent "researcher" failed`, "the remote host stayed busy (HOST_BUSY)", "1 refusal(s)", "it asks to wait 1s"} {
				if !strings.Contains(text, want) {
					t.Fatalf("the parent's task: %s %.600q; want it to say %q", task.Status.State, text, want)
				}
			}
			if task.Status.State != a2a.TaskStateCompleted {
				t.Fatalf("the parent's task is %s; want its model to have read the error and completed", task.Status.State)
			}
			if n := len(childTasks(t, p.asParent)); n != 0 {
				t.Fatalf("the child ran %d tasks of the parent's", n)
			}
		})
	}
}

// TestRemoteHostBusyCancelStopsTheWait: the parent's task canceled while
// its call waits out a busy remote host (a pause of 10 minutes here) ends
// at once, canceled; the child never runs the message.
func TestRemoteHostBusyCancelStopsTheWait(t *testing.T) {
	t.Parallel()
	p := newBusyPair(t, false, func(ra *host.RemoteAgentConfig) {
		ra.BusyRetry, ra.BusyPause = host.Budget(time.Hour), host.Duration(10*time.Minute)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p.occupy(t, ctx)
	id := p.ask(t, ctx, "research owls")
	p.waitLog(t, ctx, "remote host busy: trying again")
	if _, err := p.alice.CancelTask(ctx, &a2a.CancelTaskRequest{ID: id}); err != nil {
		t.Fatalf("cancel the parent's task: %v", err)
	}
	if task := p.endOf(t, ctx, id); task.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("the parent's task: %s; want canceled", task.Status.State)
	}
	if n := len(childTasks(t, p.asParent)); n != 0 {
		t.Fatalf("the child ran %d tasks of the parent's", n)
	}
}

// TestRemoteHostBusyRetryOff: remoteAgents[].busyRetry "off" (or "0")
// turns the retries off: the call gives up at the busy host's first
// refusal with an error result saying so, and never sends the message
// again. Before, "off" was refused by the config and "0" meant the
// default, 30 s of retries.
func TestRemoteHostBusyRetryOff(t *testing.T) {
	t.Parallel()
	for _, v := range []string{`"off"`, `"0"`, `"0s"`} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			p := newBusyPair(t, false, func(ra *host.RemoteAgentConfig) {
				if err := json.Unmarshal([]byte(`{"name":"researcher","busyRetry":`+v+`,"busyPause":"10ms"}`), ra); err != nil {
					t.Fatalf("busyRetry %s: %v", v, err)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			p.occupy(t, ctx)
			task := p.endOf(t, ctx, p.ask(t, ctx, "research owls"))
			text := artifactText(task)
			for _, want := range []string{`agent "researcher" failed`, "the remote host stayed busy (HOST_BUSY)", "1 refusal(s), not sent again (busyRetry off)"} {
				if !strings.Contains(text, want) {
					t.Fatalf("the parent's task: %s %.600q; want it to say %q", task.Status.State, text, want)
				}
			}
			if strings.Contains(p.logs.String(), "remote host busy: trying again") {
				t.Fatalf("the call sent its message again with busyRetry %s", v)
			}
			if n := len(childTasks(t, p.asParent)); n != 0 {
				t.Fatalf("the child ran %d tasks of the parent's", n)
			}
		})
	}
}

// TestBusyRetryConfig: busyRetry reads "off", "0" and zero durations as
// off, a duration as itself, and writes "off" back; absent is the default.
func TestBusyRetryConfig(t *testing.T) {
	for in, want := range map[string]time.Duration{`"off"`: -1, `"0"`: -1, `"0ms"`: -1, `"45s"`: 45 * time.Second} {
		var b host.Budget
		if err := json.Unmarshal([]byte(in), &b); err != nil || time.Duration(b) != want {
			t.Errorf("%s: %v %v, want %v", in, time.Duration(b), err, want)
		}
	}
	for _, in := range []string{`"never"`, `"-1s"`, `30`} {
		var b host.Budget
		if err := json.Unmarshal([]byte(in), &b); err == nil || !strings.Contains(err.Error(), `"off"`) {
			t.Errorf("%s: error %v, want one naming \"off\"", in, err)
		}
	}
	if out, _ := json.Marshal(host.Budget(-1)); string(out) != `"off"` {
		t.Errorf("off written as %s", out)
	}
	c, err := host.ParseConfig([]byte(`{"remoteAgents":[{"name":"a","url":"http://127.0.0.1:1","busyRetry":"off"},{"name":"b","url":"http://127.0.0.1:1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.RemoteAgents[0].BusyRetry.Off() || c.RemoteAgents[1].BusyRetry != 0 {
		t.Errorf("busyRetry: %v and %v; want off and unset (the default)", c.RemoteAgents[0].BusyRetry, c.RemoteAgents[1].BusyRetry)
	}
}
