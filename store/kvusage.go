package store

import (
	"context"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// KVUsage reports how many keys a key-value namespace holds and the bytes
// of their values: the starting point of a plugin's key-value quota.
func (b *Badger) KVUsage(ctx context.Context, namespace string) (keys, bytes int64, err error) {
	prefix := kvKey(namespace, "")
	err = b.view(ctx, func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefix
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys++
			bytes += it.Item().ValueSize()
		}
		return ctx.Err()
	})
	if err != nil {
		return 0, 0, fmt.Errorf("kv usage: %w", err)
	}
	return keys, bytes, nil
}
