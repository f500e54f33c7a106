package artifacts

import (
	"errors"
	"fmt"

	"github.com/looopy-go/looopy/loop"
)

// KV is an ordered, transactional key-value space that the artifact
// records can live in instead of Badger: a space shared by several hosts
// (Redis) lets each of them serve every artifact. The store's keys all
// start with "art".
//
// Update runs fn in a read-write transaction that either applies all of
// fn's writes or none; it may run fn again when another writer got in the
// way, so fn must not have other effects. View runs fn in a read-only
// transaction that sees one consistent state.
type KV interface {
	View(fn func(KVTxn) error) error
	Update(fn func(KVTxn) error) error
}

// KVTxn is a transaction of a KV.
type KVTxn interface {
	// Get appends the value of key to dst; an absent key is an error
	// matching loop.ErrNotFound.
	Get(key, dst []byte) ([]byte, error)
	Set(key, val []byte) error
	Delete(key []byte) error
	// Keys calls fn with each key that starts with prefix, in byte order,
	// and stops at the first error fn returns, returning it. The key is
	// valid only during fn.
	Keys(prefix []byte, fn func(key []byte) error) error
}

// OpenKV returns a store whose records live in k and whose large parts
// (over cfg.InlineMax) go to blobs. blobs nil keeps every part in k (the
// inline limit is then the part limit).
func OpenKV(k KV, blobs BlobStore, cfg Config) (*DB, error) {
	if k == nil {
		return nil, fmt.Errorf("open artifact store: %w", invalid("no key-value space"))
	}
	if blobs == nil {
		if cfg.MaxPartSize <= 0 {
			cfg.MaxPartSize = defaultMaxPartSize
		}
		cfg.InlineMax = cfg.MaxPartSize
		blobs = NewMemoryBlobs() // never used: nothing is over the inline limit
	}
	return newDB(extKV{k}, blobs, cfg), nil
}

// extKV adapts a KV to the store's own key-value interface.
type extKV struct{ k KV }

type extTxn struct{ t KVTxn }

func (e extKV) view(fn func(kvTxn) error) error {
	return e.k.View(func(t KVTxn) error { return fn(extTxn{t}) })
}

func (e extKV) update(fn func(kvTxn) error) error {
	return e.k.Update(func(t KVTxn) error { return fn(extTxn{t}) })
}

func (t extTxn) get(key, dst []byte) ([]byte, error) {
	v, err := t.t.Get(key, dst)
	if errors.Is(err, loop.ErrNotFound) {
		return nil, errNoKey
	}
	return v, err
}

func (t extTxn) set(key, val []byte) error { return t.t.Set(key, val) }
func (t extTxn) del(key []byte) error      { return t.t.Delete(key) }

func (t extTxn) keys(prefix []byte, fn func([]byte) error) error {
	err := t.t.Keys(prefix, fn)
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}
