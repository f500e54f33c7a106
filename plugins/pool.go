package plugins

import (
	"context"
	"errors"
	"sync"
)

// errPoolClosed is returned by get once the pool is closed (its version was
// unloaded while a caller waited).
var errPoolClosed = errors.New("plugin unloaded")

// pool is a bounded set of instances of one plugin version. An instance
// serves one call at a time: get takes it out of the pool, put gives it back
// (or discards it when its call failed badly).
type pool struct {
	newInstance func(ctx context.Context) (instance, error)
	idle        chan instance
	slots       chan struct{} // one token per live instance

	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

func newPool(size int, newInstance func(ctx context.Context) (instance, error)) *pool {
	return &pool{
		newInstance: newInstance,
		idle:        make(chan instance, size),
		slots:       make(chan struct{}, size),
		done:        make(chan struct{}),
	}
}

// get returns an idle instance, a new one while the pool is below its size,
// or waits for one to come back.
func (p *pool) get(ctx context.Context) (instance, error) {
	select {
	case in := <-p.idle:
		return in, nil
	default:
	}
	select {
	case in := <-p.idle:
		return in, nil
	case p.slots <- struct{}{}:
		if p.isClosed() {
			<-p.slots
			return nil, errPoolClosed
		}
		in, err := p.newInstance(ctx)
		if err != nil {
			<-p.slots
			return nil, err
		}
		return in, nil
	case <-p.done:
		return nil, errPoolClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// put returns an instance; a broken one is closed and its slot freed.
func (p *pool) put(in instance, healthy bool) {
	p.mu.Lock()
	if healthy && !p.closed {
		select {
		case p.idle <- in:
			p.mu.Unlock()
			return
		default:
		}
	}
	p.mu.Unlock()
	in.close()
	<-p.slots
}

// add puts a fresh instance into the pool, when there is room (prewarming).
func (p *pool) add(in instance) {
	select {
	case p.slots <- struct{}{}:
		p.put(in, true)
	default:
		in.close()
	}
}

func (p *pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// close closes the idle instances; those in use are closed when they come back.
func (p *pool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	for {
		select {
		case in := <-p.idle:
			in.close()
			<-p.slots
		default:
			return
		}
	}
}
