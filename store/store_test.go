package store_test

import (
	"testing"

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
