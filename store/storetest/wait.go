package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// guard is how long a test waits for something that must happen before it
// fails; it only bounds a hang, it is never a measure.
const guard = 30 * time.Second

// testEventWait: Wait returns at once when the stream is past after, and
// otherwise when an append makes it so, whoever appended.
func testEventWait(t *testing.T, s Stores) {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	mustEvents(t, s.Events, "w", "e1", "e2")
	if last, err := s.Events.Wait(ctx, "w", 1); err != nil || last != 2 {
		t.Fatalf("Wait(after 1) on a stream at 2 = %d, %v; want 2 at once", last, err)
	}
	got := make(chan uint64, 1)
	errc := make(chan error, 1)
	go func() {
		last, err := s.Events.Wait(ctx, "w", 2)
		if err != nil {
			errc <- err
			return
		}
		got <- last
	}()
	// An append to another stream does not end the wait.
	mustEvents(t, s.Events, "other", "x")
	select {
	case last := <-got:
		t.Fatalf("Wait(after 2) returned %d after an append to another stream", last)
	case err := <-errc:
		t.Fatalf("Wait: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	mustEvents(t, s.Events, "w", "e3", "e4")
	select {
	case last := <-got:
		if last < 3 {
			t.Fatalf("Wait returned %d, want at least 3", last)
		}
	case err := <-errc:
		t.Fatalf("Wait: %v", err)
	case <-ctx.Done():
		t.Fatal("Wait did not return after an append")
	}
	// A stream that does not exist yet can be waited on.
	go func() {
		last, err := s.Events.Wait(ctx, "new", 0)
		if err != nil {
			errc <- err
			return
		}
		got <- last
	}()
	mustEvents(t, s.Events, "new", "n1")
	select {
	case last := <-got:
		if last != 1 {
			t.Fatalf("Wait on a new stream returned %d, want 1", last)
		}
	case err := <-errc:
		t.Fatalf("Wait: %v", err)
	case <-ctx.Done():
		t.Fatal("Wait on a new stream did not return after its first append")
	}
}

// testEventWaitCanceled: a wait ends with its context.
func testEventWaitCanceled(t *testing.T, s Stores) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Events.Wait(ctx, "idle", 0)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel: err = %v, want context.Canceled", err)
		}
	case <-time.After(guard):
		t.Fatal("Wait did not end with its context")
	}
}

// testEventWaitMany: every waiting reader is woken by one append, and no
// append made while readers come and go is missed.
func testEventWaitMany(t *testing.T, s Stores) {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	const readers, appends = 8, 50
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen uint64
			for seen < appends {
				last, err := s.Events.Wait(ctx, "many", seen)
				if err != nil {
					t.Errorf("Wait(after %d): %v", seen, err)
					return
				}
				if last <= seen {
					t.Errorf("Wait(after %d) returned %d", seen, last)
					return
				}
				seen = last
			}
		}()
	}
	for i := range appends {
		if _, err := s.Events.Append(ctx, "many", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}
