package taskrt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store/redisstore"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// clusterHost is one process of a cluster: its own handle on the shared
// Redis and its own runtime.
type clusterHost struct {
	st *redisstore.Store
	ev *logEvents
	rt *Runtime
}

// newCluster starts a redis-server and n runtimes sharing it, named
// host-0, host-1, ...; set adjusts each one's config.
func newCluster(t *testing.T, n int, model loop.Model, set func(*Config)) []*clusterHost {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	var hosts []*clusterHost
	for i := range n {
		st, err := redisstore.Open(context.Background(), redisstore.Options{Addr: srv.Addr, Password: srv.Password,
			Prefix: "cluster:", SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		l, err := loop.New(loop.Config{Model: model, Checkpoints: st, Journal: st})
		if err != nil {
			t.Fatal(err)
		}
		h := &clusterHost{st: st, ev: &logEvents{log: st.Events()}}
		cfg := Config{Loop: l, Events: h.ev, Owner: "host-" + string(rune('0'+i)), Shared: true,
			Stores: Stores{Messages: st, Agents: st, Tasks: st, Commit: st, Checkpoints: st, Journal: st,
				Durable: st, Leases: st, Cancels: st}}
		if set != nil {
			set(&cfg)
		}
		if h.rt, err = New(cfg); err != nil {
			t.Fatal(err)
		}
		h.rt.StartBackground()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			defer cancel()
			h.rt.Shutdown(ctx)
			_ = st.Close()
		})
		hosts = append(hosts, h)
	}
	return hosts
}

// Two hosts sharing the stores never run two turns of one context at
// once: while host A runs a turn of a context, host B answers busy for a
// new turn of it, exactly as A does; once A's turn has ended, B takes
// the next one.
func TestOneTurnPerContextAcrossHosts(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	hs := newCluster(t, 2, m, nil)
	a, b := hs[0], hs[1]
	ctx := context.Background()
	first, err := a.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "shared", Message: user("one")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "shared", Message: user("two")}); !errors.Is(err, loop.ErrBusy) {
		t.Fatalf("second turn on the same host: err = %v, want ErrBusy", err)
	}
	_, err = b.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "shared", Message: user("two")})
	if !errors.Is(err, loop.ErrBusy) || !strings.Contains(err.Error(), "another host") {
		t.Fatalf("second turn on another host while the first runs: err = %v, want ErrBusy naming another host", err)
	}
	// The refused start left nothing behind: no task, no lease of its own.
	if recs, _ := b.st.ListTasks(ctx, loop.TaskFilter{ContextID: "shared"}); len(recs) != 1 {
		t.Fatalf("tasks of the context after a refused start: %d, want 1", len(recs))
	}
	close(m.gate)
	if err := a.rt.Wait(ctx, first.Run); err != nil {
		t.Fatal(err)
	}
	next, err := b.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "shared", Message: user("two")})
	if err != nil {
		t.Fatalf("next turn on host B after A's ended: %v", err)
	}
	if err := b.rt.Wait(ctx, next.Run); err != nil {
		t.Fatal(err)
	}
	rec, err := b.st.LoadTask(ctx, next.Run.TaskID)
	if err != nil || rec.Status != loop.TaskCompleted {
		t.Fatalf("B's turn: %s, %v; want completed", rec.Status, err)
	}
	// Both turns are in the conversation, in order.
	msgs, err := b.st.Recent(ctx, "shared", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, msg := range msgs {
		got = append(got, msg.Content)
	}
	if want := "one|done: one|two|done: two"; strings.Join(got, "|") != want {
		t.Fatalf("conversation = %q, want %q", strings.Join(got, "|"), want)
	}
	// A turn's lease goes last, after Wait returns (its end is out
	// first): it is released soon after, not left.
	waitFor(t, "the leases released after both turns", func() bool {
		ls, _ := a.st.ListLeases(ctx)
		return len(ls) == 0
	})
}

// Many starts of one context raced from two hosts while no turn of it
// can end: exactly one is accepted.
func TestContextRaceAcrossHosts(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	hs := newCluster(t, 2, m, nil)
	ctx := context.Background()
	type res struct {
		st  *Started
		err error
	}
	out := make(chan res, 16)
	for i := range 16 {
		go func() {
			st, err := hs[i%2].rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "raced", Message: user("go")})
			out <- res{st, err}
		}()
	}
	var started []*Started
	for range 16 {
		r := <-out
		switch {
		case r.err == nil:
			started = append(started, r.st)
		case !errors.Is(r.err, loop.ErrBusy):
			t.Fatalf("start: %v, want success or ErrBusy", r.err)
		}
	}
	close(m.gate)
	if len(started) != 1 {
		t.Fatalf("%d turns of one context started at once across two hosts, want 1", len(started))
	}
	waitCtx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	if err := started[0].Run.wait(waitCtx); err != nil {
		t.Fatal(err)
	}
}

func (r *Run) wait(ctx context.Context) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitSubscribed waits until n processes watch the cancel channel, so
// that a test exercises the wake-up rather than the renewal's check.
func waitSubscribed(t *testing.T, st *redisstore.Store, n int64) {
	t.Helper()
	ch := st.Prefix() + "cxc"
	waitFor(t, "cancel watchers subscribed", func() bool {
		m, err := st.Client().PubSubNumSub(context.Background(), ch).Result()
		return err == nil && m[ch] >= n
	})
}

// A cancel asked of host B reaches the turn running on host A: the task
// ends canceled, recorded and announced by A (its final events in the
// task's stream), and B answers with the canceled task. The leases are
// long, so only the cross-host signal can explain a prompt cancel.
func TestCancelFromAnotherHost(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	defer close(m.gate)
	hs := newCluster(t, 2, m, func(c *Config) { c.LeaseTTL = 10 * time.Minute })
	a, b := hs[0], hs[1]
	waitSubscribed(t, a.st, 2)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := a.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-cancel", Message: user("wait")})
	if err != nil {
		t.Fatal(err)
	}
	// Another principal cannot cancel it from B either.
	if _, err := b.rt.Cancel(ctx, "mallory", st.Run.TaskID); err == nil {
		t.Fatal("another principal canceled the task")
	}
	rec, err := b.rt.Cancel(ctx, "alice", st.Run.TaskID)
	if err != nil {
		t.Fatalf("cancel through host B: %v", err)
	}
	if rec.Status != loop.TaskCanceled {
		t.Fatalf("task after the cancel through B = %s, want canceled", rec.Status)
	}
	select {
	case <-st.Run.Done():
	case <-ctx.Done():
		t.Fatal("A's turn still running after the cancel through B")
	}
	evs, err := a.ev.events(ctx, st.Run.TaskID)
	if err != nil || len(evs) == 0 {
		t.Fatalf("events: %v, %v", evs, err)
	}
	tc, ok := evs[len(evs)-1].(*loop.TaskComplete)
	if !ok || tc.Status != loop.TaskCanceled {
		t.Fatalf("last event of the task = %#v, want task-complete, canceled", evs[len(evs)-1])
	}
	// A's lease is released and the context takes the next turn, on B.
	next, err := b.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-cancel", Message: user("again")})
	if err != nil {
		t.Fatalf("next turn after the cancel: %v", err)
	}
	b.rt.Running(next.Run.TaskID).cancel(context.Canceled)
	if err := b.rt.Wait(ctx, next.Run); err != nil {
		t.Fatal(err)
	}
}

// A cancel request whose wake-up the owner missed (it was not watching)
// is found by the turn's lease renewal.
func TestCancelFoundByRenewal(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	defer close(m.gate)
	hs := newCluster(t, 2, m, func(c *Config) { c.LeaseTTL = 300 * time.Millisecond })
	a, b := hs[0], hs[1]
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	st, err := a.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-missed", Message: user("wait")})
	if err != nil {
		t.Fatal(err)
	}
	// The request is stored without a wake-up reaching A's runtime: as
	// if A's subscription had dropped when B published it.
	if err := b.st.RequestCancel(ctx, "unrelated", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.st.Client().Set(ctx, b.st.Prefix()+"cx:"+st.Run.TaskID, "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.Run.Done():
	case <-ctx.Done():
		t.Fatal("a stored cancel request never reached the running turn")
	}
	rec, err := a.st.LoadTask(ctx, st.Run.TaskID)
	if err != nil || rec.Status != loop.TaskCanceled {
		t.Fatalf("task = %s, %v; want canceled", rec.Status, err)
	}
}

// A cancel through host B of a task whose host died (its lease lapses,
// no one answers the request) ends the task on B once the lease lapsed.
func TestCancelOfATaskWhoseHostDied(t *testing.T) {
	t.Parallel()
	hs := newCluster(t, 1, &scriptModel{}, func(c *Config) { c.LeaseTTL = 300 * time.Millisecond })
	b := hs[0]
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	now := time.Now().UTC()
	if err := b.st.SaveTask(ctx, loop.TaskRecord{ID: "orphan", ContextID: "c-orphan", Owner: "alice", Status: loop.TaskWorking,
		History: []loop.Message{user("go")}, TurnInput: 1, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.AcquireLease(ctx, "orphan", "host-dead", "c-orphan", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rec, err := b.rt.Cancel(ctx, "alice", "orphan")
	if err != nil || rec.Status != loop.TaskCanceled {
		t.Fatalf("cancel of a dead host's task = %s, %v; want canceled", rec.Status, err)
	}
	evs, _ := b.ev.events(ctx, "orphan")
	if len(evs) == 0 || evs[len(evs)-1].Head().Kind != loop.KindTaskComplete {
		t.Fatalf("events of the canceled task: %v, want its end announced", evs)
	}
}

// A principal's usage limit holds for the service: two hosts counting on
// one Redis add to the same totals, so a principal cannot spend its limit
// once per host.
func TestUsageLimitAcrossHosts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	limits := map[string]UsageLimit{"alice": {ToolCalls: 3}}
	var us []*Usage
	for range 2 {
		st, err := redisstore.Open(context.Background(), redisstore.Options{Addr: srv.Addr, Password: srv.Password,
			Prefix: "usage:", SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		u, err := NewSharedUsage(st, limits, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		us = append(us, u)
	}
	ctx := context.Background()
	a, b := us[0], us[1]
	ta := &loop.Turn{TaskID: "ta", Auth: alice()}
	tb := &loop.Turn{TaskID: "tb", Auth: alice()}
	used := func(calls int, final bool) loop.TurnUsage {
		return loop.TurnUsage{Usage: loop.Usage{TotalTokens: 10 * calls}, ToolCalls: calls, Final: final}
	}
	if err := a.Budget(ctx, ta, used(2, false)); err != nil {
		t.Fatalf("host A, 2 calls: %v", err)
	}
	// Host B's turn has made one call: the principal has made three in
	// all, which is its limit.
	if err := b.Budget(ctx, tb, used(1, false)); err == nil || !strings.Contains(err.Error(), "3 tool calls") {
		t.Fatalf("host B at the service-wide limit: err = %v, want the limit of 3 tool calls", err)
	}
	// Host A sees it too, without counting anything new.
	if err := a.Budget(ctx, ta, used(2, false)); err == nil {
		t.Fatal("host A under the limit after host B's calls")
	}
	if err := a.Budget(ctx, ta, used(2, true)); err != nil {
		t.Fatal(err)
	}
	if err := b.Budget(ctx, tb, used(1, true)); err != nil {
		t.Fatal(err)
	}
	got := b.Usage(ctx, "alice")
	if want := (PrincipalUsage{TotalTokens: 30, ToolCalls: 3, Turns: 2}); got != want {
		t.Fatalf("usage seen by host B = %+v, want %+v", got, want)
	}
	// Another principal is not limited by alice's usage.
	if err := a.Budget(ctx, &loop.Turn{TaskID: "tc", Auth: &loop.AuthContext{Principal: "bob"}}, used(5, false)); err != nil {
		t.Fatalf("bob limited by alice's usage: %v", err)
	}
}
