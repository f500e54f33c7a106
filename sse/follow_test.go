package sse_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/sse"
	"github.com/looopy-go/looopy/store"
)

// Two Hubs over one log are two hosts sharing a backend: a subscriber of
// one gets, in order and once each, the events both publish to the stream,
// live, with the ids of the log.
func TestFollowOtherHosts(t *testing.T) {
	m := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = m.Close() })
	log := m.Events()
	a := newHub(t, sse.Config{Log: log, Follow: true})
	b := newHub(t, sse.Config{Log: log, Follow: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	sub, err := b.Subscribe(ctx, sse.TaskStream("t"), 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var wg sync.WaitGroup
	for i, h := range []*sse.Hub{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := i; k < n; k += 2 {
				if _, err := h.PublishTask(ctx, delta("t", k)); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		}()
	}
	for want := uint64(1); want <= n; want++ {
		it, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d events: %v", want-1, err)
		}
		if it.ID != want {
			t.Fatalf("event id %d, want %d (gap or repeat)", it.ID, want)
		}
	}
	wg.Wait()
	// Nothing more: no event was delivered twice.
	if it, ok, err := sub.TryNext(ctx); ok || err != nil {
		t.Fatalf("TryNext after every event = %+v, %v, %v", it, ok, err)
	}
}

// Without Follow a Hub sees only what it publishes itself (the single-host
// path pays for no follower): the test above fails without the follower.
func TestNoFollowSeesOnlyItsOwn(t *testing.T) {
	m := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = m.Close() })
	a := newHub(t, sse.Config{Log: m.Events()})
	b := newHub(t, sse.Config{Log: m.Events()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := b.Subscribe(ctx, sse.TaskStream("t"), 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := a.PublishTask(ctx, delta("t", 0)); err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if it, err := sub.Next(short); err == nil {
		t.Fatalf("a Hub without Follow saw another's event %d", it.ID)
	}
}
