package store

import (
	"context"
	"errors"

	badger "github.com/dgraph-io/badger/v4"
)

// Giving space back. Deleting a key in Badger writes a tombstone; the
// space of what it deleted returns only when a compaction drops the key's
// versions (its table space) and when the value log file that held its
// value is rewritten without it (value log GC, which picks a file by the
// discard statistics those compactions keep). On a store that takes no
// new work (its disk short of store.minFreeBytes) nothing else is
// written: the tombstones of the cleanup stay in a memtable that never
// fills, no compaction runs, and the disk never gets its space back. So
// when the disk is short and something was written since the last time,
// the sweeper reclaims: it flushes the memtables and compacts level 0
// (Badger's DropPrefix of a marker key does both, with Badger's writes
// held meanwhile), then runs the value log GC until it finds nothing to
// rewrite.
//
// The value log GC never rewrites the file being written, so value log
// files are kept small enough (a quarter of store.minFreeBytes, at most
// Badger's default of 1 GiB) that the space of a small disk is spread over
// several of them, and so that one file's rewrite (at most half of it
// live, with the discard ratio of 0.5) fits in the reserve below the floor.

// pfxReclaim is the marker whose drop flushes the memtables.
const pfxReclaim = "spacex/"

// reclaimGCRuns bounds the value log files one reclaim rewrites.
const reclaimGCRuns = 64

// vlogFileSize is the value log file size for a store keeping minFree
// bytes free (minFree <= 0: Badger's default).
func vlogFileSize(minFree int64, def int64) int64 {
	if minFree <= 0 {
		return def
	}
	return min(max(minFree/4, 1<<20), def)
}

// reclaimIfShort reclaims when the disk is short of MinFree (new work
// refused) and the database changed since the last reclaim. It returns
// whether it ran. It runs on the sweeper's goroutine.
func (b *Badger) reclaimIfShort() bool {
	if b.dir == "" || b.minFree <= 0 {
		return false
	}
	// Measured here, not through statFree (which tests replace while
	// the sweeper runs).
	floor := b.minFree/2 - deleteReserve(b.minFree)
	free, err := freeSpace(b.dir)
	if err != nil || free >= b.minFree {
		return false
	}
	if v := b.db.MaxVersion(); v == b.reclaimedAt {
		return false
	}
	if free < floor {
		return false // not even the reserve is left: nothing may be written
	}
	err = b.write(context.Background(), &writeOp{frees: true, run: func() error {
		// On the commit goroutine: none of the store's writes is
		// under way while Badger's are held.
		if err := b.db.Update(func(txn *badger.Txn) error {
			return txn.Set([]byte(pfxReclaim+"flush"), nil)
		}); err != nil {
			return err
		}
		return b.db.DropPrefix([]byte(pfxReclaim))
	}})
	if err != nil {
		if !errors.Is(err, ErrClosed) {
			b.log.Warn("store: reclaim of deleted data's space", "err", err)
		}
		return false
	}
	for range reclaimGCRuns {
		if now, err := freeSpace(b.dir); err != nil || now < floor || b.db.RunValueLogGC(b.gcRatio) != nil {
			break
		}
		select {
		case <-b.quit:
			return true
		default:
		}
	}
	b.reclaimedAt = b.db.MaxVersion()
	if after, err := freeSpace(b.dir); err == nil {
		b.free.Store(after)
		b.log.Info("store: space reclaimed after the cleanup", "free_mib_before", free>>20, "free_mib_after", after>>20)
	}
	return true
}
