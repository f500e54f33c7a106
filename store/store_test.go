package store_test

import (
	"context"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
	"github.com/looopy-go/looopy/store/storetest"
)

func memoryStores(m *store.Memory) storetest.Stores {
	return storetest.Stores{Messages: m, Agents: m, Tasks: m, Events: m.Events(), KV: m}
}

func badgerStores(b *store.Badger) storetest.Stores {
	return storetest.Stores{Messages: b, Agents: b, Tasks: b, Events: b.Events(), KV: b}
}

func TestMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Stores {
		m := store.NewMemory(store.MemoryOptions{SweepInterval: 100 * 1e6})
		t.Cleanup(func() { m.Close() })
		return memoryStores(m)
	})
}

// openBadger opens a store on dir and returns it with a Reopen that closes
// it and opens the same directory again.
func openBadger(t *testing.T, opts store.Options) storetest.Stores {
	t.Helper()
	b, err := store.Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	s := badgerStores(b)
	s.Sweep = func(t *testing.T) {
		t.Helper()
		if _, err := b.SweepStreams(context.Background()); err != nil {
			t.Fatalf("SweepStreams: %v", err)
		}
	}
	s.Damage = func(t *testing.T, id string) {
		t.Helper()
		if err := b.DB().Update(func(txn *badger.Txn) error {
			return txn.Set(store.TaskKey(id), []byte(`{"id":`))
		}); err != nil {
			t.Fatalf("damage task %q: %v", id, err)
		}
	}
	if !opts.InMemory {
		s.Reopen = func(t *testing.T) storetest.Stores {
			closed = true
			if err := b.Close(); err != nil {
				t.Fatalf("Close before reopening: %v", err)
			}
			return openBadger(t, opts)
		}
	}
	return s
}

func TestBadgerOnDisk(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Stores {
		return openBadger(t, store.Options{Dir: t.TempDir()})
	})
}

func TestBadgerInMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Stores {
		return openBadger(t, store.Options{InMemory: true})
	})
}

// The suites that Stores does not cover, each against every backend.
func TestDurableSuites(t *testing.T) {
	backends := map[string]func(t *testing.T) any{
		"Memory": func(t *testing.T) any {
			m := store.NewMemory(store.MemoryOptions{})
			t.Cleanup(func() { m.Close() })
			return m
		},
		"BadgerOnDisk": func(t *testing.T) any {
			b, err := store.Open(store.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		"BadgerInMemory": func(t *testing.T) any {
			b, err := store.Open(store.Options{InMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Run("Checkpoints", func(t *testing.T) {
				storetest.RunCheckpoints(t, func(t *testing.T) loop.CheckpointStore { return checkpointsOf(open(t)) })
			})
			t.Run("Journal", func(t *testing.T) {
				storetest.RunJournal(t, func(t *testing.T) storetest.Durable { return durableOf(open(t)) })
			})
			t.Run("Leases", func(t *testing.T) {
				storetest.RunLeases(t, func(t *testing.T) loop.LeaseStore { return open(t).(loop.LeaseStore) })
			})
			t.Run("TurnCommit", func(t *testing.T) {
				storetest.RunTurnCommit(t, func(t *testing.T) storetest.CommitStores { return commitStoresOf(open(t)) })
			})
		})
	}
}

func durableOf(s any) storetest.Durable        { return s.(storetest.Durable) }
func checkpointsOf(s any) loop.CheckpointStore { return durableOf(s) }

// commitStoresOf: each backend is one store that commits what it keeps.
func commitStoresOf(s any) storetest.CommitStores {
	all := s.(interface {
		loop.TurnCommitter
		loop.MessageStore
		loop.AgentStore
		loop.TaskStore
		loop.CheckpointStore
		loop.LeaseStore
	})
	return storetest.CommitStores{Commit: all, Messages: all, Agents: all, Tasks: all, Checkpoints: all, Leases: all}
}
