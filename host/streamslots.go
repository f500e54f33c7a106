package host

import (
	"errors"
	"fmt"
	"sync"
)

// ErrTooManyStreams refuses a live event stream past limits.maxStreams,
// limits.maxStreamsPerPrincipal or limits.maxStreamsPerStream.
var ErrTooManyStreams = errors.New("too many live event streams")

// streamSlots counts the live event streams of each principal and of each
// event stream, so that one client's streams cannot take the host's work
// from everyone else's: each stream costs the host a reader, its
// encodings and its writes for every event.
type streamSlots struct {
	total        int // the host's bound, all principals; <= 0: no bound
	perPrincipal int // <= 0: no bound
	perStream    int // <= 0: no bound

	mu          sync.Mutex
	live        int // streams open now, host-wide
	byPrincipal map[string]int
	byStream    map[string]int
}

func newStreamSlots(total, perPrincipal, perStream int) *streamSlots {
	return &streamSlots{total: total, perPrincipal: perPrincipal, perStream: perStream,
		byPrincipal: map[string]int{}, byStream: map[string]int{}}
}

// room refuses, as take would, a principal that has its bound of streams
// open, or any principal when the host has its own bound open (a check
// before a streaming call starts anything; take decides).
func (t *streamSlots) room(principal string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.total > 0 && t.live >= t.total {
		return t.hostFull()
	}
	if t.perPrincipal > 0 && t.byPrincipal[principal] >= t.perPrincipal {
		return t.principalFull()
	}
	return nil
}

func (t *streamSlots) hostFull() error {
	return fmt.Errorf("%w: the host has %d open, limits.maxStreams; try again once one ends", ErrTooManyStreams, t.total)
}

func (t *streamSlots) principalFull() error {
	return fmt.Errorf("%w: this client has %d open, limits.maxStreamsPerPrincipal; close one first", ErrTooManyStreams, t.perPrincipal)
}

// take counts one more stream of principal on stream, or refuses it with
// ErrTooManyStreams. The returned release must be called once it ends.
func (t *streamSlots) take(principal, stream string) (release func(), err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.total > 0 && t.live >= t.total {
		return nil, t.hostFull()
	}
	if t.perPrincipal > 0 && t.byPrincipal[principal] >= t.perPrincipal {
		return nil, t.principalFull()
	}
	if t.perStream > 0 && t.byStream[stream] >= t.perStream {
		return nil, fmt.Errorf("%w: this conversation or task has %d open, limits.maxStreamsPerStream; close one first", ErrTooManyStreams, t.perStream)
	}
	t.live++
	t.byPrincipal[principal]++
	t.byStream[stream]++
	var once sync.Once
	return func() { once.Do(func() { t.give(principal, stream) }) }, nil
}

func (t *streamSlots) give(principal, stream string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live--
	if t.byPrincipal[principal]--; t.byPrincipal[principal] <= 0 {
		delete(t.byPrincipal, principal)
	}
	if t.byStream[stream]--; t.byStream[stream] <= 0 {
		delete(t.byStream, stream)
	}
}
