package store

import badger "github.com/dgraph-io/badger/v4"

// Sizing Badger's memory from a budget (Options.Memory).
//
// Badger's memory is all Go heap (no jemalloc): the memtables (an arena of
// MemTableSize each, NumMemtables of them: the one being written and those
// waiting for their flush), the table builders (a flush builds a whole
// level-0 table in memory, about twice the memtable; each compaction
// builds its output tables beside it, and the builders' allocators are
// pooled between uses), the block cache and the index cache. With Badger's
// defaults (64 MiB memtables, 5 of them, 4 compactors, a 256 MiB block
// cache, every table's index held in memory) a flood of events through the
// write path took the host to 2.6 GiB resident (100 turns of 10,000
// thoughts, docs/PERFORMANCE.md "The store's memory under a flood"): none
// of it was bounded by anything the host derives from its memory.
//
// Past the memtables' count Badger blocks its writers until a flush
// frees one, and past NumLevelZeroTablesStall level-0 tables it blocks
// flushes until compactions catch up: a flood then waits for the disk,
// which is the back-pressure that keeps the write path inside the budget.

const (
	// MinMemory is the smallest memory budget Open accepts; a smaller one
	// is raised to it.
	MinMemory = 32 << 20
	// MinMemTable is the smallest memtable whatever the budget: Badger
	// bounds one transaction at 15 % of a memtable (the store at half of
	// that), and a batch of events appended at once (a model's burst of
	// 2 KB thoughts) must fit: 2 MiB memtables refused a batch of 74 such
	// thoughts.
	MinMemTable = 16 << 20
	// MaxMemTable caps the memtable size whatever the budget (Badger's
	// default).
	MaxMemTable = 64 << 20
)

// sizeForMemory sizes bo's memory from budget bytes: a memtable of a
// thirty-second of it (16-64 MiB; the builders' pool keeps up to 8
// allocators of about two tables each between flushes), three memtables, two compactors, level 0
// stalling at 8 tables, tables of at most a quarter of a memtable (1-2 MiB)
// below level 0, a block cache of a quarter of the budget and an index
// cache of an eighth (so that the indexes of a large database are a cache,
// not all held in memory).
func sizeForMemory(bo badger.Options, budget int64) badger.Options {
	budget = max(budget, MinMemory)
	mt := min(max(budget/32, MinMemTable), MaxMemTable)
	return bo.
		WithMemTableSize(mt).
		WithNumMemtables(3).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(min(max(mt/4, 1<<20), 2<<20)).
		WithNumCompactors(2).
		WithBlockCacheSize(budget / 4).
		WithIndexCacheSize(budget / 8)
}
