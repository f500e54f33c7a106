package plugins

import (
	"container/list"
	"math"
	"sync"
)

// moduleFacts is what loading learns of a module's bytes alone, whatever
// its manifest, grants or limits: its measure for admission and the code
// to compile (the module with interrupt.go's checks added, or as it is and
// why). Working it out walks the whole module twice, about a second of
// CPU for a 4 MB Go guest; a module loaded again (a host restarted in the
// same process, a plugin folder touched, the same module in two folders,
// a replaced version rolled back) is not walked again.
type moduleFacts struct {
	stats moduleStats
	code  []byte
	intr  *interruptible
	why   error
}

// moduleFactsMemo keeps the facts of the modules loaded last, by sha256,
// up to max bytes of code held (the least recently used go first; see
// SetModuleFactsBytes). The facts are never changed once made: plugins
// share them.
var moduleFactsMemo = factsMemo{byHash: map[[32]byte]*list.Element{}, max: DefaultModuleFactsBytes}

type factsMemo struct {
	sync.Mutex
	byHash map[[32]byte]*list.Element
	lru    list.List // of *factsEntry, most recent first
	bytes  int
	max    int // negative: nothing is kept
}

// DefaultModuleFactsBytes is the memory the facts of loaded modules may
// hold by default: 128 MiB of code.
const DefaultModuleFactsBytes = 128 << 20

// SetModuleFactsBytes bounds the memory the process keeps for what loading
// learned of the modules loaded last (their code with the interrupt checks
// added), shared by every registry of the process: n bytes (0: the
// default, DefaultModuleFactsBytes; negative: nothing is kept, each load
// works them out again). A module whose code takes more than a quarter of
// the bound is never kept. What no longer fits is dropped at once.
func SetModuleFactsBytes(n int64) {
	m := &moduleFactsMemo
	m.Lock()
	defer m.Unlock()
	switch {
	case n == 0:
		m.max = DefaultModuleFactsBytes
	case n < 0:
		m.max = -1
	default:
		m.max = int(min(n, int64(math.MaxInt)))
	}
	m.evictLocked()
}

// ModuleFactsBytes reports the memory the facts kept hold now, and their
// bound (negative: nothing is kept).
func ModuleFactsBytes() (held, bound int64) {
	m := &moduleFactsMemo
	m.Lock()
	defer m.Unlock()
	return int64(m.bytes), int64(m.max)
}

type factsEntry struct {
	sum   [32]byte
	facts *moduleFacts
	size  int
}

// moduleFactsOf returns the facts of bin, whose sha256 is sum, or why the
// limits refuse it: a module is measured and admitted before anything else
// is done with it (its rewrite included), and admitted again under each
// load's limits when its facts are known.
func moduleFactsOf(sum [32]byte, bin []byte, lim ModuleLimits) (*moduleFacts, error) {
	m := &moduleFactsMemo
	m.Lock()
	if e, ok := m.byHash[sum]; ok {
		m.lru.MoveToFront(e)
		f := e.Value.(*factsEntry).facts
		m.Unlock()
		return f, admitStats(f.stats, lim)
	}
	m.Unlock()

	f := &moduleFacts{stats: measure(bin)}
	if err := admitStats(f.stats, lim); err != nil {
		return nil, err
	}
	f.code, f.intr, f.why = interruptibleCode(bin)
	// What keeping the facts holds: the code's whole array (it may be the
	// caller's read buffer, larger than the module).
	size := cap(f.code)
	m.Lock()
	defer m.Unlock()
	if m.max < 0 || size > m.max/4 {
		return f, nil // nothing is kept, or too large to keep
	}
	if e, ok := m.byHash[sum]; ok { // made meanwhile by another load
		return e.Value.(*factsEntry).facts, nil
	}
	m.byHash[sum] = m.lru.PushFront(&factsEntry{sum: sum, facts: f, size: size})
	m.bytes += size
	m.evictLocked()
	return f, nil
}

// evictLocked drops the least recently used facts until they fit the
// bound. m is locked.
func (m *factsMemo) evictLocked() {
	for m.lru.Len() > 0 && m.bytes > max(m.max, 0) {
		old := m.lru.Back()
		ent := old.Value.(*factsEntry)
		m.lru.Remove(old)
		delete(m.byHash, ent.sum)
		m.bytes -= ent.size
	}
}
