package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// DurableTaskIDs returns, sorted, the ids of the tasks that have a
// checkpoint or a journal, so that a cleanup can remove those of tasks
// that are finished or gone (journals have no expiry of their own).
func (b *Badger) DurableTaskIDs(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	err := b.view(ctx, func(txn *badger.Txn) error {
		for _, pfx := range []string{pfxCkpt, pfxJournal} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfx)})
			for it.Rewind(); it.Valid(); it.Next() {
				rest := strings.TrimPrefix(string(it.Item().Key()), pfx)
				if pfx == pfxJournal {
					rest, _, _ = strings.Cut(rest, "/")
				}
				id, err := unescape(rest)
				if err != nil {
					it.Close()
					return fmt.Errorf("key %q: %w", it.Item().Key(), err)
				}
				seen[id] = true
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list durable tasks: %w", err)
	}
	return sortedKeys(seen), nil
}

// DurableTaskIDs returns, sorted, the ids of the tasks that have a
// checkpoint or a journal.
func (m *Memory) DurableTaskIDs(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	m.durMu.RLock()
	for id := range m.ckpts {
		seen[id] = true
	}
	for id, calls := range m.journal {
		if len(calls) > 0 {
			seen[id] = true
		}
	}
	m.durMu.RUnlock()
	return sortedKeys(seen), nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
