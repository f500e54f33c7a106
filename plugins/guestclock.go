package plugins

import (
	"context"
	"sync/atomic"
	"time"
)

// GuestClock adds up the CPU time spent inside guest calls: for each call
// of a Looopy-ABI plugin made with a context from WithGuestClock, the CPU
// time of the calling thread from the entry into the guest (looopy_alloc,
// then looopy_call) to its return, host functions the guest calls
// included; the host's own work around it (encoding the input, contexts,
// the pool, decoding the answer) is not. It is for benchmarks that report
// the guest's share of a call apart from the host's. The figure is exact
// when the calling goroutine is locked to its thread (runtime.LockOSThread);
// otherwise a host function that blocks may move the call to another thread
// and the figure is off. Where the thread's CPU clock cannot be read (not
// Linux) it stays 0.
type GuestClock struct {
	ns    atomic.Int64
	calls atomic.Int64
}

type guestClockKey struct{}

// WithGuestClock returns a context whose plugin calls add their guest time
// to c.
func WithGuestClock(ctx context.Context, c *GuestClock) context.Context {
	return context.WithValue(ctx, guestClockKey{}, c)
}

// CPU is the guest CPU time added up so far.
func (c *GuestClock) CPU() time.Duration { return time.Duration(c.ns.Load()) }

// Calls is the number of guest calls timed so far.
func (c *GuestClock) Calls() int64 { return c.calls.Load() }

func guestClockOf(ctx context.Context) *GuestClock {
	c, _ := ctx.Value(guestClockKey{}).(*GuestClock)
	return c
}

// start begins timing a guest call; the returned function ends it.
func (c *GuestClock) start() func() {
	t0, ok := threadCPU()
	if !ok {
		return func() {}
	}
	return func() {
		if t1, ok := threadCPU(); ok {
			c.ns.Add(t1 - t0)
			c.calls.Add(1)
		}
	}
}
