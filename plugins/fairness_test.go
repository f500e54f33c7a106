package plugins

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

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
	r := kitchen(t, Config{Egress: eg, Policy: Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true, ReservedInstances: -1}}, func(m map[string]any) {
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
	p := newPool(1, 0, func(context.Context) (instance, error) { made++; return &fakeInstance{}, nil })
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
			p.put(who, in, true)
		}()
		waitFor(t, label+" to queue", func() bool { return p.waiting() == n+1 })
	}
	for _, c := range [][2]string{{"a", "a1"}, {"a", "a2"}, {"a", "a3"}, {"b", "b1"}, {"c", "c1"}, {"b", "b2"}} {
		enqueue(c[0], c[1])
	}
	p.put("", first, true)
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

// One principal's calls that never end (an upstream that hangs until the
// call timeout) cannot hold every instance: one is kept for principals
// holding none, so another principal's call is served at once, without
// waiting for any of the first principal's calls to end. Without the
// reserve, bob waited for alice's whole call timeout.
func TestPoolKeepsAnInstanceForAnotherPrincipal(t *testing.T) {
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
	r := kitchen(t, Config{Egress: eg, Policy: Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true}}, func(m map[string]any) {
		caps(m)["allowedHosts"] = []string{"127.0.0.1"}
		caps(m)["allowPrivateNetwork"] = true
		caps(m)["instances"] = 4
		caps(m)["callTimeout"] = "30s"
	})
	p, _ := r.Plugin("kitchen")

	// alice: four calls that hang; three hold instances, the fourth waits.
	alice := WithPrincipal(context.Background(), "alice")
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = r.Call(alice, call("fetch", `{"url":"`+srv.URL+`/hang"}`), &loop.ToolEnv{})
		}()
	}
	waitFor(t, "alice's fourth call to wait", func() bool { return p.pool.waiting() == 1 })
	if live, idle, _ := p.pool.stats(); live-idle != 3 {
		t.Fatalf("alice holds %d instances, want 3 (one kept)", live-idle)
	}

	// bob's call is served while all of alice's calls still hang.
	bob := make(chan loop.ToolResult, 1)
	go func() {
		res, err := r.Call(WithPrincipal(context.Background(), "bob"), call("settings", `{}`), &loop.ToolEnv{})
		if err != nil {
			res = loop.ToolResult{IsError: true, Content: err.Error()}
		}
		bob <- res
	}()
	if res := hangGuard(t, bob, "bob's call while alice holds three instances"); res.IsError {
		t.Fatalf("bob: %+v", res)
	}
	if w := p.pool.waiting(); w != 1 {
		t.Fatalf("alice's fourth call: waiting = %d; it took the kept instance", w)
	}
}

// The reserve's bookkeeping: a principal holding none takes a free
// instance; one holding some takes another only while more than the
// reserve are free; a freed instance goes to a waiting principal holding
// none before those over their share; with no reserve (auth off: a single
// principal) one principal takes them all.
func TestPoolReserve(t *testing.T) {
	newFake := func(context.Context) (instance, error) { return &fakeInstance{}, nil }
	ctxOf := func(who string) context.Context { return WithPrincipal(context.Background(), who) }
	mustGet := func(p *pool, who string) instance {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctxOf(who), 10*time.Second)
		defer cancel()
		in, err := p.get(ctx)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		return in
	}
	blocked := func(p *pool, who string) bool {
		ctx, cancel := context.WithTimeout(ctxOf(who), 50*time.Millisecond)
		defer cancel()
		in, err := p.get(ctx)
		if err == nil {
			p.put(who, in, true)
			return false
		}
		return true
	}

	p := newPool(4, 1, newFake)
	var alice []instance
	for range 3 {
		alice = append(alice, mustGet(p, "alice"))
	}
	if !blocked(p, "alice") {
		t.Fatal("alice took the fourth instance: none kept for others")
	}
	b1 := mustGet(p, "bob") // holds none: takes the kept one
	if !blocked(p, "bob") || !blocked(p, "carol") {
		t.Fatal("an instance was taken from a full pool")
	}
	// alice and carol wait; alice frees one: carol (holding none) gets
	// it, though alice queued first.
	got := make(chan string, 2)
	for _, who := range []string{"alice", "carol"} {
		n := p.waiting()
		go func() {
			in := mustGet(p, who)
			got <- who
			p.put(who, in, true)
		}()
		waitFor(t, who+" to queue", func() bool { return p.waiting() == n+1 })
	}
	p.put("alice", alice[0], true)
	if first := <-got; first != "carol" {
		t.Fatalf("the freed instance went to %s, want carol (holding none)", first)
	}
	// carol gave hers back: now one is free, and alice (holding two) may
	// not take it while it is the only one... until bob frees his.
	select {
	case who := <-got:
		t.Fatalf("%s took the last free instance", who)
	case <-time.After(50 * time.Millisecond):
	}
	p.put("bob", b1, true)
	if who := <-got; who != "alice" {
		t.Fatalf("got %s", who)
	}

	// No reserve: one principal takes them all.
	q := newPool(4, -1, newFake)
	for range 4 {
		mustGet(q, "solo")
	}
	// A reserve is capped at size-1: a pool of one still serves.
	one := newPool(1, 1, newFake)
	in := mustGet(one, "solo")
	one.put("solo", in, true)
	mustGet(one, "solo")
}
