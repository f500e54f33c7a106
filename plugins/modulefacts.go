package plugins

import (
	"container/list"
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
// up to maxModuleFactsBytes of code held (the least recently used go
// first). The facts are never changed once made: plugins share them.
var moduleFactsMemo = struct {
	sync.Mutex
	byHash map[[32]byte]*list.Element
	lru    list.List // of *factsEntry, most recent first
	bytes  int
}{byHash: map[[32]byte]*list.Element{}}

const maxModuleFactsBytes = 128 << 20

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
	size := len(f.code)
	if size > maxModuleFactsBytes/4 {
		return f, nil // too large to keep
	}
	m.Lock()
	defer m.Unlock()
	if e, ok := m.byHash[sum]; ok { // made meanwhile by another load
		return e.Value.(*factsEntry).facts, nil
	}
	m.byHash[sum] = m.lru.PushFront(&factsEntry{sum: sum, facts: f, size: size})
	m.bytes += size
	for m.bytes > maxModuleFactsBytes {
		old := m.lru.Back()
		ent := old.Value.(*factsEntry)
		m.lru.Remove(old)
		delete(m.byHash, ent.sum)
		m.bytes -= ent.size
	}
	return f, nil
}
