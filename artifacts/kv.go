package artifacts

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// The store keeps its records in a small ordered key-value space: Badger
// for the durable store, a sorted map for the in-memory one. Both run the
// same code above this line.

var errNoKey = errors.New("no such key")

type kvTxn interface {
	// get appends the value of key to dst; errNoKey if absent.
	get(key, dst []byte) ([]byte, error)
	set(key, val []byte) error
	del(key []byte) error
	// keys calls fn with each key that starts with prefix, in order. The
	// key is valid only during fn. fn returning errStop ends the walk.
	keys(prefix []byte, fn func(key []byte) error) error
}

var errStop = errors.New("stop")

type kv interface {
	view(fn func(kvTxn) error) error
	update(fn func(kvTxn) error) error
}

// --- Badger ---

type badgerKV struct{ db *badger.DB }

type badgerTxn struct{ txn *badger.Txn }

func (b badgerKV) view(fn func(kvTxn) error) error {
	return b.db.View(func(txn *badger.Txn) error { return fn(badgerTxn{txn}) })
}

// blockedFor bounds how long update waits while Badger holds its writes.
const blockedFor = time.Minute

// update retries a transaction that lost a conflict with another writer,
// and one that Badger refused while it held its writes (ErrBlockedWrites:
// the store's reclaim of space flushes its memtables then, for a moment).
func (b badgerKV) update(fn func(kvTxn) error) error {
	var err error
	var waited time.Duration
	for n := 0; n < 16; n++ {
		var fnErr error
		err = b.db.Update(func(txn *badger.Txn) error {
			fnErr = fn(badgerTxn{txn})
			return fnErr
		})
		if errors.Is(err, badger.ErrBlockedWrites) && fnErr == nil && waited < blockedFor {
			time.Sleep(10 * time.Millisecond)
			waited += 10 * time.Millisecond
			n--
			continue
		}
		if err != nil && fnErr == nil && !errors.Is(err, badger.ErrConflict) {
			return &storageError{err} // the commit failed, not the request
		}
		if !errors.Is(err, badger.ErrConflict) {
			return err
		}
	}
	return err
}

func (t badgerTxn) get(key, dst []byte) ([]byte, error) {
	it, err := t.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, errNoKey
	}
	if err != nil {
		return nil, err
	}
	return it.ValueCopy(dst[:0])
}

func (t badgerTxn) set(key, val []byte) error { return t.txn.Set(key, val) }
func (t badgerTxn) del(key []byte) error      { return t.txn.Delete(key) }

func (t badgerTxn) keys(prefix []byte, fn func([]byte) error) error {
	opt := badger.DefaultIteratorOptions
	opt.PrefetchValues = false
	opt.Prefix = prefix
	it := t.txn.NewIterator(opt)
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		if err := fn(it.Item().Key()); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

// --- memory ---

// memKV is a sorted map under one lock. An update buffers its writes and
// applies them only when fn succeeds, so a failed update changes nothing.
type memKV struct {
	mu   sync.RWMutex
	vals map[string][]byte
	keys []string // sorted
}

func newMemKV() *memKV { return &memKV{vals: map[string][]byte{}} }

type memTxn struct {
	m       *memKV
	pending map[string][]byte // nil value: deleted
	write   bool
}

func (m *memKV) view(fn func(kvTxn) error) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return fn(&memTxn{m: m})
}

func (m *memKV) update(fn func(kvTxn) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &memTxn{m: m, pending: map[string][]byte{}, write: true}
	if err := fn(t); err != nil {
		return err
	}
	for k, v := range t.pending {
		i, found := slices.BinarySearch(m.keys, k)
		if v == nil {
			if found {
				m.keys = slices.Delete(m.keys, i, i+1)
				delete(m.vals, k)
			}
			continue
		}
		if !found {
			m.keys = slices.Insert(m.keys, i, k)
		}
		m.vals[k] = v
	}
	return nil
}

func (t *memTxn) get(key, dst []byte) ([]byte, error) {
	if v, ok := t.pending[string(key)]; ok {
		if v == nil {
			return nil, errNoKey
		}
		return append(dst[:0], v...), nil
	}
	v, ok := t.m.vals[string(key)]
	if !ok {
		return nil, errNoKey
	}
	return append(dst[:0], v...), nil
}

func (t *memTxn) set(key, val []byte) error {
	if !t.write {
		return fmt.Errorf("set in a read-only transaction")
	}
	if val == nil {
		val = []byte{} // nil marks a deletion
	}
	// The value is the caller's to give away: every caller passes a slice
	// it made for this write and never touches again.
	t.pending[string(key)] = val
	return nil
}

func (t *memTxn) del(key []byte) error {
	if !t.write {
		return fmt.Errorf("delete in a read-only transaction")
	}
	t.pending[string(key)] = nil
	return nil
}

func (t *memTxn) keys(prefix []byte, fn func([]byte) error) error {
	var all []string
	i, _ := slices.BinarySearch(t.m.keys, string(prefix))
	for ; i < len(t.m.keys) && bytes.HasPrefix([]byte(t.m.keys[i]), prefix); i++ {
		if v, ok := t.pending[t.m.keys[i]]; ok && v == nil {
			continue
		}
		all = append(all, t.m.keys[i])
	}
	for k, v := range t.pending {
		if v != nil && bytes.HasPrefix([]byte(k), prefix) {
			if _, ok := t.m.vals[k]; !ok {
				all = append(all, k)
			}
		}
	}
	slices.Sort(all)
	for _, k := range all {
		if err := fn([]byte(k)); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
	}
	return nil
}
