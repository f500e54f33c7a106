package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// RunLeases runs the suite of loop.LeaseStore.
func RunLeases(t *testing.T, open func(t *testing.T) loop.LeaseStore) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, l loop.LeaseStore)
	}{
		{"AcquireHeld", testLeaseHeld},
		{"TakeOverAfterLapse", testLeaseLapse},
		{"RenewRelease", testLeaseRenew},
		{"OneWinner", testLeaseRace},
		{"BadInput", testLeaseBadInput},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func testLeaseHeld(t *testing.T, ls loop.LeaseStore) {
	ctx := context.Background()
	a, err := ls.AcquireLease(ctx, "task-1", "host-a", "ctx-1", time.Minute)
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	if a.Key != "task-1" || a.Owner != "host-a" || a.Data != "ctx-1" || a.Token == 0 || !a.Expires.After(time.Now()) {
		t.Fatalf("AcquireLease = %+v", a)
	}
	if _, err := ls.AcquireLease(ctx, "task-1", "host-b", "", time.Minute); !errors.Is(err, loop.ErrLeaseHeld) {
		t.Fatalf("AcquireLease of a held lease by another owner: err = %v, want ErrLeaseHeld", err)
	}
	// The holder acquiring again (a restarted host with the same id, the
	// next turn of a task whose last turn still lets go of it) keeps it,
	// with a new token: the earlier acquisition can no longer release or
	// renew it.
	again, err := ls.AcquireLease(ctx, "task-1", "host-a", "ctx-1", time.Minute)
	if err != nil || again.Token <= a.Token {
		t.Fatalf("AcquireLease by its holder = %+v, %v; want a token above %d", again, err, a.Token)
	}
	if err := ls.ReleaseLease(ctx, a); err != nil {
		t.Fatalf("ReleaseLease of the earlier acquisition: %v", err)
	}
	if _, err := ls.RenewLease(ctx, a, time.Minute); !errors.Is(err, loop.ErrLeaseLost) {
		t.Fatalf("RenewLease of the earlier acquisition: err = %v, want ErrLeaseLost", err)
	}
	list, err := ls.ListLeases(ctx)
	if err != nil || len(list) != 1 || list[0].Key != "task-1" || list[0].Owner != "host-a" || list[0].Data != "ctx-1" {
		t.Fatalf("ListLeases = %+v, %v", list, err)
	}
}

func testLeaseLapse(t *testing.T, ls loop.LeaseStore) {
	ctx := context.Background()
	a, err := ls.AcquireLease(ctx, "k", "host-a", "", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(guard)
	var b loop.Lease
	for {
		b, err = ls.AcquireLease(ctx, "k", "host-b", "", time.Minute)
		if err == nil {
			break
		}
		if !errors.Is(err, loop.ErrLeaseHeld) || time.Now().After(deadline) {
			t.Fatalf("AcquireLease after the lease lapsed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b.Owner != "host-b" || b.Token <= a.Token {
		t.Fatalf("lease taken over = %+v, want owner host-b and a token above %d", b, a.Token)
	}
	// The old holder has lost it: renewing fails, releasing does nothing.
	if _, err := ls.RenewLease(ctx, a, time.Minute); !errors.Is(err, loop.ErrLeaseLost) {
		t.Fatalf("RenewLease by the old holder: err = %v, want ErrLeaseLost", err)
	}
	if err := ls.ReleaseLease(ctx, a); err != nil {
		t.Fatalf("ReleaseLease of a lost lease: %v", err)
	}
	list, _ := ls.ListLeases(ctx)
	if len(list) != 1 || list[0].Owner != "host-b" {
		t.Fatalf("the old holder's release removed the new holder's lease: %+v", list)
	}
}

func testLeaseRenew(t *testing.T, ls loop.LeaseStore) {
	ctx := context.Background()
	a, err := ls.AcquireLease(ctx, "r", "host-a", "d", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ls.RenewLease(ctx, a, time.Hour)
	if err != nil || r.Token != a.Token || !r.Expires.After(a.Expires) || r.Data != "d" {
		t.Fatalf("RenewLease = %+v, %v; want the same token, a later expiry", r, err)
	}
	if _, err := ls.AcquireLease(ctx, "r", "host-b", "", time.Minute); !errors.Is(err, loop.ErrLeaseHeld) {
		t.Fatalf("AcquireLease of a renewed lease: err = %v, want ErrLeaseHeld", err)
	}
	if err := ls.ReleaseLease(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.RenewLease(ctx, r, time.Minute); !errors.Is(err, loop.ErrLeaseLost) {
		t.Fatalf("RenewLease after release: err = %v, want ErrLeaseLost", err)
	}
	if list, err := ls.ListLeases(ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListLeases after release = %+v, %v", list, err)
	}
	b, err := ls.AcquireLease(ctx, "r", "host-b", "", time.Minute)
	if err != nil || b.Owner != "host-b" {
		t.Fatalf("AcquireLease after release = %+v, %v", b, err)
	}
}

// testLeaseRace: of many owners asking for one free lease, one gets it.
func testLeaseRace(t *testing.T, ls loop.LeaseStore) {
	ctx := context.Background()
	const owners = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := ls.AcquireLease(ctx, "contested", string(rune('a'+i)), "", time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, loop.ErrLeaseHeld):
				t.Errorf("AcquireLease: %v", err)
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d owners raced for one lease: %d got it, want 1", owners, won)
	}
}

func testLeaseBadInput(t *testing.T, ls loop.LeaseStore) {
	ctx := context.Background()
	for name, err := range map[string]error{
		"empty key":   func() error { _, err := ls.AcquireLease(ctx, "", "o", "", time.Minute); return err }(),
		"empty owner": func() error { _, err := ls.AcquireLease(ctx, "k", "", "", time.Minute); return err }(),
		"zero ttl":    func() error { _, err := ls.AcquireLease(ctx, "k", "o", "", 0); return err }(),
	} {
		if !errors.Is(err, loop.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}
