package host_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
	"github.com/looopy-go/looopy/store"
)

// A finished task's stream and its context's stream get their expiry once
// the turn is over (after the blocking answer, before the lease goes):
// with a task TTL of one second, both streams' events are gone soon after
// the answer (their last ids stay).
func TestFinishedTaskStreamsExpire(t *testing.T) {
	t.Parallel()
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := host.NewServer(host.Config{Limits: host.LimitsConfig{TaskTTL: host.Duration(time.Second)}},
		host.Options{Model: toolThenAnswer{}, Toolsets: []loop.Toolset{noopTools{}},
			Stores: host.Stores{Messages: st, Agents: st, Tasks: st, Events: st.Events(), Commit: st,
				Checkpoints: st, Journal: st, Durable: st, KV: st, Leases: st}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown(context.Background()) }()
	ctx := context.Background()
	c, err := a2aclient.NewFromEndpoints(ctx,
		[]*a2a.AgentInterface{a2a.NewAgentInterface("http://"+ln.Addr().String(), a2a.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(httpClient("")))
	if err != nil {
		t.Fatal(err)
	}
	task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("go")})
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("task %s, want completed", task.Status.State)
	}
	streams := []string{sse.TaskStream(string(task.ID)), sse.ContextStream(task.ContextID)}
	for _, s := range streams {
		if n, err := st.Events().Last(ctx, s); err != nil || n == 0 {
			t.Fatalf("stream %s right after the answer: last %d, %v; want its events", s, n, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range streams {
		for {
			recs, err := st.Events().Read(ctx, s, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stream %s still holds %d events 30s after the answer (task TTL 1s)", s, len(recs))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
