package taskrt

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// A graceful stop whose grace runs out after a turn's commit and before
// its final events, on stores two hosts share: host A's turn is held at
// that point (PointTurnCommitted) until A's shutdown suspends its turns.
// The turn is not handed on: A writes its final events, then releases its
// lease, so the task is completed with a stream that says so, and host B,
// which takes over whatever A leaves, has nothing to repair. Before, A
// dropped the end and released the lease: the task stayed completed with
// a stream that never ended, and B (which repairs an unannounced end only
// under a lease) never came to it.
func TestGracefulStopAtATurnsEndOnSharedStores(t *testing.T) {
	t.Parallel()
	reached, suspended := make(chan struct{}), make(chan struct{})
	var once, stopped sync.Once
	hs := newCluster(t, 2, &scriptModel{}, func(c *Config) {
		if c.Owner != "host-0" {
			return
		}
		c.Crashpoint = func(p string) {
			if p != PointTurnCommitted {
				return
			}
			once.Do(func() {
				close(reached)
				select {
				case <-suspended:
				case <-time.After(guard):
				}
			})
		}
		c.OnSuspend = func() { stopped.Do(func() { close(suspended) }) }
	})
	a, b := hs[0], hs[1]
	ctx := context.Background()
	st, err := a.rt.Start(ctx, StartRequest{Auth: alice(), ContextID: "c-stop", Message: user("hello")})
	if err != nil {
		t.Fatal(err)
	}
	id := st.Run.TaskID
	select {
	case <-reached:
	case <-time.After(guard):
		t.Fatal("the turn never reached its commit")
	}
	// No grace at all: the shutdown suspends the running turns at once,
	// while the turn is held between its commit and its final events.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	a.rt.Shutdown(gone)
	select {
	case <-suspended:
	default:
		t.Fatal("the shutdown did not suspend the turns")
	}

	rec, err := a.st.LoadTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != loop.TaskCompleted {
		t.Fatalf("task is %s, want completed (the stop came after its commit)", rec.Status)
	}
	ended := func() bool {
		last, err := a.ev.LastEvent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		tc, ok := last.(*loop.TaskComplete)
		return ok && tc.Status == loop.TaskCompleted
	}
	if !ended() {
		evs, _ := a.ev.events(ctx, id)
		var kinds []loop.EventKind
		for _, e := range evs {
			kinds = append(kinds, e.Head().Kind)
		}
		t.Fatalf("the stopping host left task %s completed with a stream without its end: %v", id, kinds)
	}
	leases, err := a.st.ListLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.Key == id {
			t.Fatalf("the lease of the ended task is still held after the stop: %+v", l)
		}
	}
	// The other host's pass finds nothing of it to do, and writes nothing.
	before, _ := a.ev.events(ctx, id)
	if err := b.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if after, _ := b.ev.events(ctx, id); len(after) != len(before) {
		t.Fatalf("host B wrote %d more events for a task whose end was out", len(after)-len(before))
	}
}
