package plugins

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/pdk"
)

// One principal holds every instance of a plugin and queues more calls;
// another principal's call, queued after them, is served as soon as an
// instance frees: the instances go to the waiting principals in turn, not
// first come first served across everyone.
func TestPoolSharesInstancesFairlyBetweenPrincipals(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Write([]byte("done"))
	}))
	defer srv.Close()
	eg := NewEgress(EgressConfig{})
	defer eg.Close()
	r := kitchen(t, Config{Egress: eg, Policy: Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true, MaxCallTimeout: 0}}, func(m map[string]any) {
		caps(m)["allowedHosts"] = []string{"127.0.0.1"}
		caps(m)["allowPrivateNetwork"] = true
		caps(m)["instances"] = 2
		caps(m)["callTimeout"] = "30s"
	})
	p, _ := r.Plugin("kitchen")

	// alice: two calls hold both instances, three more wait.
	alice := WithPrincipal(context.Background(), "alice")
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release) // whatever happens, let alice's calls end
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = r.Call(alice, call("fetch", `{"url":"`+srv.URL+`/slow"}`), &loop.ToolEnv{})
		}()
	}
	waitFor(t, "alice's three calls to queue", func() bool { return p.pool.waiting() == 3 })

	// bob: one quick call, queued last (his principal through the tool
	// environment).
	bob := make(chan loop.ToolResult, 1)
	go func() {
		res, err := r.Call(context.Background(), call("settings", `{}`), &loop.ToolEnv{Auth: &loop.AuthContext{Principal: "bob"}})
		if err != nil {
			res = loop.ToolResult{IsError: true, Content: err.Error()}
		}
		bob <- res
	}()
	waitFor(t, "bob's call to queue", func() bool { return p.pool.waiting() == 4 })

	// Two of alice's calls end: the first freed instance goes to alice
	// (her turn came first), the second to bob, who is served before
	// alice's remaining queued calls.
	release <- struct{}{}
	release <- struct{}{}
	res := hangGuard(t, bob, "bob's call behind alice's queue")
	if res.IsError {
		t.Fatalf("bob: %+v", res)
	}
	if w := p.pool.waiting(); w < 1 {
		t.Fatalf("alice's calls still queued = %d; bob was not served ahead of them", w)
	}
}

// The pool's queue: with one principal it is first come first served;
// with several, each gets an instance in turn.
func TestPoolRoundRobinOrder(t *testing.T) {
	made := 0
	p := newPool(1, func(context.Context) (instance, error) { made++; return &fakeInstance{}, nil })
	first, err := p.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	enqueue := func(who, label string) {
		wg.Add(1)
		n := p.waiting()
		go func() {
			defer wg.Done()
			in, err := p.get(WithPrincipal(context.Background(), who))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, label)
			mu.Unlock()
			p.put(in, true)
		}()
		waitFor(t, label+" to queue", func() bool { return p.waiting() == n+1 })
	}
	for _, c := range [][2]string{{"a", "a1"}, {"a", "a2"}, {"a", "a3"}, {"b", "b1"}, {"c", "c1"}, {"b", "b2"}} {
		enqueue(c[0], c[1])
	}
	p.put(first, true)
	wg.Wait()
	want := []string{"a1", "b1", "c1", "a2", "b2", "a3"}
	if len(order) != len(want) {
		t.Fatalf("order %v", order)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("served %v, want %v", order, want)
		}
	}
	if made != 1 {
		t.Fatalf("%d instances made, want 1", made)
	}
}

// fakeInstance stands for an instance in tests of the pool's bookkeeping
// alone (no guest runs).
type fakeInstance struct{}

func (*fakeInstance) call(context.Context, pdk.Op, []byte) ([]byte, error) { return nil, nil }
func (*fakeInstance) state() *callState                                    { return &callState{} }
func (*fakeInstance) stderrTail() string                                   { return "" }
func (*fakeInstance) close()                                               {}
