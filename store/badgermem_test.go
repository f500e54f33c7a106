package store

import (
	"testing"

	badger "github.com/dgraph-io/badger/v4"
)

// The memory budget sizes Badger: a store opened with one has memtables,
// caches and compactors sized from it, not Badger's defaults (64 MiB
// memtables, 5 of them, a 256 MiB block cache, every index in memory),
// which let a flood of events take the host to 2.6 GiB.
func TestMemoryBudgetSizesBadger(t *testing.T) {
	def := badger.DefaultOptions("")
	for _, c := range []struct {
		budget           int64
		memtable, block  int64
		index            int64
		memtables, stall int
		compactors       int
		maxHeldMemtables int64 // memtables held at once, in bytes
	}{
		{budget: 512 << 20, memtable: 16 << 20, block: 128 << 20, index: 64 << 20, memtables: 3, stall: 8, compactors: 2},
		{budget: 64 << 20, memtable: MinMemTable, block: 16 << 20, index: 8 << 20, memtables: 3, stall: 8, compactors: 2},
		// Below the floor: raised to MinMemory.
		{budget: 1, memtable: MinMemTable, block: MinMemory / 4, index: MinMemory / 8, memtables: 3, stall: 8, compactors: 2},
		// A large budget keeps Badger's memtable size as the ceiling.
		{budget: 8 << 30, memtable: MaxMemTable, block: 2 << 30, index: 1 << 30, memtables: 3, stall: 8, compactors: 2},
	} {
		b, err := Open(Options{Dir: t.TempDir(), Memory: c.budget})
		if err != nil {
			t.Fatal(err)
		}
		o := b.DB().Opts()
		if o.MemTableSize != c.memtable || o.BlockCacheSize != c.block || o.IndexCacheSize != c.index ||
			o.NumMemtables != c.memtables || o.NumLevelZeroTablesStall != c.stall || o.NumCompactors != c.compactors {
			t.Errorf("budget %d: memtable %d, block cache %d, index cache %d, %d memtables, stall at %d, %d compactors; want %d, %d, %d, %d, %d, %d",
				c.budget, o.MemTableSize, o.BlockCacheSize, o.IndexCacheSize, o.NumMemtables, o.NumLevelZeroTablesStall, o.NumCompactors,
				c.memtable, c.block, c.index, c.memtables, c.stall, c.compactors)
		}
		if c.budget >= 512<<20 && c.budget < 8<<30 && int64(o.NumMemtables)*o.MemTableSize >= int64(def.NumMemtables)*def.MemTableSize {
			t.Errorf("budget %d: memtables hold %d bytes, as much as Badger's defaults", c.budget, int64(o.NumMemtables)*o.MemTableSize)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// No budget: Badger's defaults.
	b, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if o := b.DB().Opts(); o.MemTableSize != def.MemTableSize || o.NumMemtables != def.NumMemtables {
		t.Errorf("no budget: memtable %d x %d, want Badger's %d x %d", o.MemTableSize, o.NumMemtables, def.MemTableSize, def.NumMemtables)
	}
}
