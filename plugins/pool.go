package plugins

import (
	"context"
	"errors"
	"sync"
)

// errPoolClosed is returned by get once the pool is closed (its version was
// unloaded while a caller waited).
var errPoolClosed = errors.New("plugin unloaded")

type principalKey struct{}

// WithPrincipal returns a context whose plugin calls count as principal's
// when a plugin's instances are shared out: while callers wait for an
// instance, each principal waiting gets the next free one in turn, so one
// principal's many slow calls cannot starve another's. The host derives
// each turn's context with it.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalOf returns the principal WithPrincipal put in ctx ("" when none).
func PrincipalOf(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// pool is a bounded set of instances of one plugin version. An instance
// serves one call at a time: get takes it out of the pool, put gives it back
// (or discards it when its call failed badly).
//
// When every instance is busy, callers wait in one queue per principal, and
// a freed instance goes to the principals in turn (round robin), first come
// first served within one principal.
//
// Instances are held for a whole call, and a call cannot be taken back: a
// principal holding every instance with slow calls (a model upstream that
// hangs until the call timeout) would make everyone else wait that long,
// round robin or not. So reserve instances are kept for principals holding
// none: a principal that already holds one takes another only while more
// than reserve are free. A principal holding none takes any free one.
type pool struct {
	newInstance func(ctx context.Context) (instance, error)
	size        int
	reserve     int

	mu     sync.Mutex
	idle   []instance
	live   int // instances that exist or are being made
	closed bool
	done   chan struct{}
	queues map[string][]*waiter
	ring   []string       // principals with waiters, in turn order
	next   int            // index in ring of the principal served next
	held   map[string]int // instances each principal holds
}

// waiter is a caller waiting for an instance; it receives one, or the right
// to make one (a freed slot).
type waiter struct {
	principal string
	ch        chan handoff
}

type handoff struct {
	in     instance
	create bool
}

// newPool makes a pool of at most size instances, reserve of which are kept
// for principals holding none (reserve is capped at size-1).
func newPool(size, reserve int, newInstance func(ctx context.Context) (instance, error)) *pool {
	reserve = max(0, min(reserve, size-1))
	return &pool{newInstance: newInstance, size: size, reserve: reserve, done: make(chan struct{}),
		queues: map[string][]*waiter{}, held: map[string]int{}}
}

// freeLocked is how many instances no call holds: idle ones and room to
// make more.
func (p *pool) freeLocked() int { return p.size - p.live + len(p.idle) }

// mayTakeLocked reports whether principal may take a free instance now.
func (p *pool) mayTakeLocked(principal string) bool {
	free := p.freeLocked()
	return free > 0 && (p.held[principal] == 0 || free > p.reserve)
}

// takeLocked gives principal a free instance (mayTakeLocked holds): an idle
// one, or the right to make one (nil).
func (p *pool) takeLocked(principal string) (instance, bool) {
	p.held[principal]++
	if n := len(p.idle); n > 0 {
		in := p.idle[n-1]
		p.idle = p.idle[:n-1]
		return in, true
	}
	p.live++
	return nil, false
}

// get returns an idle instance, a new one while the pool is below its size,
// or waits for one to come back.
func (p *pool) get(ctx context.Context) (instance, error) {
	in, err := p.acquire(ctx, nil)
	if err != nil || in != nil {
		return in, err
	}
	return p.create(ctx, PrincipalOf(ctx))
}

// errStopped is returned by acquire when its stop channel closed while the
// caller waited.
var errStopped = errors.New("stopped while waiting for an instance")

// acquire is get without making the instance: it returns an idle instance,
// or nil when the caller holds a slot to make one in (with create, under
// whatever deadline the call runs with). It waits while every instance is
// busy, until ctx ends or stop closes (errStopped): the wait is not the
// call's run, and no call timeout bounds it.
func (p *pool) acquire(ctx context.Context, stop <-chan struct{}) (instance, error) {
	principal := PrincipalOf(ctx)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errPoolClosed
	}
	if len(p.ring) == 0 && p.mayTakeLocked(principal) {
		in, _ := p.takeLocked(principal)
		p.mu.Unlock()
		return in, nil
	}
	w := &waiter{principal: principal, ch: make(chan handoff, 1)}
	p.enqueueLocked(w)
	// Waiters of principals over their share may leave an instance free
	// that this caller may take.
	p.dispatchLocked()
	p.mu.Unlock()

	select {
	case h := <-w.ch:
		return h.in, nil
	case <-ctx.Done():
		p.abandon(w)
		return nil, ctx.Err()
	case <-stop:
		p.abandon(w)
		return nil, errStopped
	case <-p.done:
		p.abandon(w)
		return nil, errPoolClosed
	}
}

// create makes an instance in a slot already counted in live and in the
// principal's holding.
func (p *pool) create(ctx context.Context, principal string) (instance, error) {
	in, err := p.newInstance(ctx)
	if err != nil {
		p.mu.Lock()
		p.live--
		p.releaseLocked(principal)
		p.dispatchLocked()
		p.mu.Unlock()
		return nil, err
	}
	return in, nil
}

// releaseLocked counts one instance out of principal's holding.
func (p *pool) releaseLocked(principal string) {
	if p.held[principal]--; p.held[principal] <= 0 {
		delete(p.held, principal)
	}
}

// abandon takes a waiter out of its queue; when an instance was handed to
// it meanwhile, the instance goes back.
func (p *pool) abandon(w *waiter) {
	p.mu.Lock()
	q := p.queues[w.principal]
	for i, x := range q {
		if x == w {
			p.queues[w.principal] = append(q[:i:i], q[i+1:]...)
			if len(p.queues[w.principal]) == 0 {
				p.dropPrincipalLocked(w.principal)
			}
			p.mu.Unlock()
			return
		}
	}
	p.mu.Unlock()
	// Already handed something: give it back.
	h := <-w.ch
	if h.create {
		p.mu.Lock()
		p.live--
		p.releaseLocked(w.principal)
		p.dispatchLocked()
		p.mu.Unlock()
		return
	}
	p.put(w.principal, h.in, true)
}

func (p *pool) enqueueLocked(w *waiter) {
	if len(p.queues[w.principal]) == 0 {
		// A principal newly waiting joins the ring last in turn order
		// (just before the one served next): it waits at most one turn
		// of each principal already waiting.
		p.ring = append(p.ring, "")
		copy(p.ring[p.next+1:], p.ring[p.next:])
		p.ring[p.next] = w.principal
		if len(p.ring) > 1 {
			p.next++
		}
	}
	p.queues[w.principal] = append(p.queues[w.principal], w)
}

func (p *pool) dropPrincipalLocked(principal string) {
	delete(p.queues, principal)
	for i, x := range p.ring {
		if x == principal {
			p.ring = append(p.ring[:i], p.ring[i+1:]...)
			if i < p.next {
				p.next--
			}
			break
		}
	}
	if p.next >= len(p.ring) {
		p.next = 0
	}
}

// nextWaiterLocked pops the first waiter of the first principal, in turn
// order from the one whose turn it is, that may take a free instance now
// (nil: none may).
func (p *pool) nextWaiterLocked() *waiter {
	for i := range p.ring {
		idx := (p.next + i) % len(p.ring)
		principal := p.ring[idx]
		if !p.mayTakeLocked(principal) {
			continue
		}
		q := p.queues[principal]
		w := q[0]
		p.queues[principal] = q[1:]
		if len(q) == 1 {
			p.next = idx
			p.dropPrincipalLocked(principal)
		} else {
			p.next = (idx + 1) % len(p.ring)
		}
		return w
	}
	return nil
}

// dispatchLocked hands free instances (idle ones, or the right to make
// one) to the waiters that may take them, in turn.
func (p *pool) dispatchLocked() {
	if p.closed {
		return
	}
	for len(p.ring) > 0 {
		w := p.nextWaiterLocked()
		if w == nil {
			return
		}
		in, ok := p.takeLocked(w.principal)
		w.ch <- handoff{in: in, create: !ok}
	}
}

// put returns an instance principal held; a broken one is closed and its
// slot freed.
func (p *pool) put(principal string, in instance, healthy bool) {
	p.mu.Lock()
	p.releaseLocked(principal)
	if healthy && !p.closed {
		p.idle = append(p.idle, in)
		p.dispatchLocked()
		p.mu.Unlock()
		return
	}
	p.live--
	p.dispatchLocked()
	p.mu.Unlock()
	in.close()
}

// add puts a fresh instance into the pool, when there is room (prewarming).
func (p *pool) add(in instance) {
	p.mu.Lock()
	if p.closed || p.live >= p.size {
		p.mu.Unlock()
		in.close()
		return
	}
	p.live++
	p.idle = append(p.idle, in)
	p.dispatchLocked()
	p.mu.Unlock()
}

// stats returns the instances that exist, those idle, and the size.
func (p *pool) stats() (live, idle, size int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live, len(p.idle), p.size
}

// close closes the idle instances; those in use are closed when they come
// back, and waiters get errPoolClosed.
func (p *pool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	idle := p.idle
	p.idle = nil
	p.live -= len(idle)
	p.mu.Unlock()
	for _, in := range idle {
		in.close()
	}
}

// waiting is how many callers wait for an instance.
func (p *pool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, q := range p.queues {
		n += len(q)
	}
	return n
}
