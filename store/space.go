package store

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// ErrNoSpace: the store refuses a write, or new work, because the data
// folder's filesystem is nearly full or the folder has reached its cap.
// Nothing of a refused write is stored. It is loop.ErrStorageFull, which
// suspends a turn whose write it refuses.
var ErrNoSpace = loop.ErrStorageFull

// Space is what the store knows of its disk: the free space on the data
// folder's filesystem (available to the process), the folder's size
// (allocated blocks, sampled every second), and the thresholds.
type Space struct {
	Free, Used int64
	// MinFree: below it new work is refused (Admit); below half of it
	// every write is.
	MinFree int64
	// MaxBytes caps Used (0: no cap); at it new work is refused.
	MaxBytes int64
}

// spaceEvery is how often the data folder's size is measured.
const spaceEvery = time.Second

// defaultMinFree is Options.MinFreeBytes's default for a memtable of mt
// bytes: 32 memtables. Below half of it (16 memtables) Badger still has
// room for what it writes on its own after the last write it accepted:
// the rest of the write-ahead log of the memtables it holds (each file
// reserves twice a memtable; 3 memtables), a level-0 table of each of them
// flushed before its log is removed, and compactions' output written
// before their input is removed (level 0 stalls at 8 tables).
func defaultMinFree(mt int64) int64 { return 32 * mt }

// leastMinFree is the smallest Options.MinFreeBytes Open accepts for a
// memtable of mt bytes: 8 memtables, so that the floor where writes stop
// (half of it, 4 memtables) still holds the tables of the 3 memtables
// Badger may hold unflushed, and one more for the table it is building.
// Below that a kill -9 near the floor leaves a folder whose next open
// flushes more than the disk has, through a memory map: a SIGBUS at every
// start.
func leastMinFree(mt int64) int64 { return 8 * mt }

// openNeeds is the free space Badger needs to open the data folder dir: it
// flushes the memtables its write-ahead logs (the .mem files) hold into
// level-0 tables, written through memory maps, before it takes a write;
// each table is at most the log's data. One memtable more is kept for
// the log and tables the open starts.
func openNeeds(dir string, mt int64) int64 {
	need := mt
	entries, err := os.ReadDir(dir)
	if err != nil {
		return need // a new folder: nothing to flush
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".mem") {
			continue
		}
		if fi, err := e.Info(); err == nil {
			need += allocated(fi)
		}
	}
	return need
}

// openStatFree measures the free space Open checks (tests replace it).
var openStatFree = freeSpace

// checkOpenSpace refuses to open the data folder when its filesystem has
// less free space than the open writes (openNeeds): Badger would fail at
// it with a SIGBUS, at every start, until space is made. statFree measures
// the filesystem of dir, or of its nearest existing parent.
func checkOpenSpace(dir string, mt int64, statFree func(string) (int64, error)) error {
	at := dir
	for {
		if _, err := os.Stat(at); err == nil {
			break
		}
		parent := filepath.Dir(at)
		if parent == at {
			return nil
		}
		at = parent
	}
	free, err := statFree(at)
	if err != nil {
		return nil // not measurable here: Badger's own errors stand
	}
	if need := openNeeds(dir, mt); free < need {
		return fmt.Errorf("%w: %d MiB free on the data folder's filesystem; opening the store flushes its write-ahead log and needs %d MiB: make space, then start again (nothing stored is lost)",
			ErrNoSpace, free>>20, (need+1<<20-1)>>20)
	}
	return nil
}

// checkSpace refuses a write when the filesystem has less than half of
// MinFree left. Badger maps its log and table files and writes them
// through memory: a write into a file whose filesystem is full is a
// SIGBUS, which kills the process, so the store stops writing before.
func (b *Badger) checkSpace() error {
	if b.dir == "" || b.minFree <= 0 {
		return nil
	}
	free, err := b.statFree(b.dir)
	if err != nil {
		return nil // not measurable here: Badger's own errors stand
	}
	b.free.Store(free)
	if floor := b.minFree / 2; free < floor {
		return fmt.Errorf("%w: %d MiB free on the data folder's filesystem, writes stop below %d MiB (store.minFreeBytes / 2)",
			ErrNoSpace, free>>20, floor>>20)
	}
	return nil
}

// deleteReserve is the part of MinFree below the floor where writes stop
// (MinFree/2) that the store's cleanup may still write into: its writes
// that only remove data or set up a removal (writeOp.frees: the sweeps of
// expired event streams and of idle conversations, with the small head
// and index records a crash-safe removal writes; the deletion of a
// checkpoint or a journal; a finished stream's expiry) and the reclaim that gives their
// space back (reclaim.go). A delete writes a tombstone of its key
// (measured: 52 bytes of write-ahead log a key, 108 KiB for a sweep of
// 2,120 keys, TestFullDiskCleanupGivesSpaceBack); the reclaim writes
// a level-0 table of the tombstones, the compaction's output (smaller
// than its input once the deleted keys are dropped) and the live part of
// one value log file at a time (at most MinFree/8). A cleanup writes only
// what it finds to delete, once: nothing a client or plugin can multiply.
func deleteReserve(minFree int64) int64 { return minFree / 8 }

// deletesFit says whether the store's cleanup may write (nil), or whether
// even the reserve for deletes is used up (ErrNoSpace).
func (b *Badger) deletesFit() error {
	if b.dir == "" || b.minFree <= 0 {
		return nil
	}
	free, err := b.statFree(b.dir)
	if err != nil {
		return nil
	}
	if floor := b.minFree/2 - deleteReserve(b.minFree); free < floor {
		return fmt.Errorf("%w: %d MiB free on the data folder's filesystem, even the cleanup's deletes stop below %d MiB (3/8 of store.minFreeBytes)",
			ErrNoSpace, free>>20, floor>>20)
	}
	return nil
}

// Deletable says whether a write that only removes data, made by a
// cleanup that deletes only what it finds expired, may be made now (nil):
// below the floor of Writable, while the reserve for deletes lasts. The
// artifact store's sweep asks it.
func (b *Badger) Deletable() error {
	if err := b.checkSpace(); err == nil {
		return nil
	}
	return b.deletesFit()
}

// Writable says whether the store takes writes now (nil), or refuses them
// for want of space (ErrNoSpace). Whatever else writes into the data
// folder's filesystem (the artifact store sharing the database, its blob
// files) asks it before each write.
func (b *Badger) Writable() error { return b.checkSpace() }

// update runs fn in a Badger transaction of its own, after the same check
// as a group commit: every write the store makes outside the commit
// goroutine's batches (the chunks of a long purge or expiry) goes through
// it, so none reaches Badger's mapped files on a nearly full disk.
func (b *Badger) update(fn func(txn *badger.Txn) error) error {
	if err := b.checkSpace(); err != nil {
		b.refused.Add(1)
		return err
	}
	return b.db.Update(fn)
}

// RefusedWrites counts the batches of writes refused for want of space.
func (b *Badger) RefusedWrites() int64 { return b.refused.Load() }

// Admit says whether the store takes new work (a new task): not when the
// data folder's filesystem has less than MinFree left, nor when the folder
// has reached MaxBytes. Work already accepted goes on until checkSpace
// stops the writes.
func (b *Badger) Admit() error {
	if b.dir == "" {
		return nil
	}
	if b.minFree > 0 {
		free, err := b.statFree(b.dir)
		if err == nil {
			b.free.Store(free)
			if free < b.minFree {
				return fmt.Errorf("%w: %d MiB free on the data folder's filesystem, new tasks need %d MiB (store.minFreeBytes)",
					ErrNoSpace, free>>20, b.minFree>>20)
			}
		}
	}
	if b.maxBytes > 0 {
		used := b.used.Load()
		if used >= b.maxBytes {
			// The size sampled every spaceEvery may be stale: the space
			// may have come back since (the cleanup or the operator
			// removed files). A refusal is decided on a measure begun
			// after this call, so new work is taken at once when it has.
			used = b.usedFresh()
		}
		if used >= b.maxBytes {
			return fmt.Errorf("%w: the data folder holds %d MiB, its cap is %d MiB (store.maxBytes)",
				ErrNoSpace, used>>20, b.maxBytes>>20)
		}
	}
	return nil
}

// measureUsedNow measures the data folder's size and keeps it.
func (b *Badger) measureUsedNow() int64 {
	b.measuring.Lock()
	defer b.measuring.Unlock()
	return b.measureLocked()
}

func (b *Badger) measureLocked() int64 {
	seq := b.measures.Add(1)
	n := measureUsed(b.dir)
	b.used.Store(n)
	b.usedSeq.Store(seq)
	return n
}

// usedFresh returns the data folder's size from a measure begun after the
// call: the one kept if one began since (measures begin one at a time,
// under b.measuring), else a new one. Callers that ask at once share one
// measure (one walk of the folder at a time, however many new tasks are
// refused meanwhile).
func (b *Badger) usedFresh() int64 {
	begun := b.measures.Load()
	b.measuring.Lock()
	defer b.measuring.Unlock()
	if b.usedSeq.Load() > begun {
		return b.used.Load()
	}
	return b.measureLocked()
}

// Space reports the store's disk figures (zero in memory).
func (b *Badger) Space() Space {
	if b.dir == "" {
		return Space{}
	}
	free, err := b.statFree(b.dir)
	if err != nil {
		free = b.free.Load()
	}
	return Space{Free: free, Used: b.used.Load(), MinFree: b.minFree, MaxBytes: b.maxBytes}
}

// measureUsed sums the blocks the data folder's files take.
func measureUsed(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += allocated(fi)
		}
		return nil
	})
	return n
}

// usedLoop measures the data folder's size every spaceEvery.
func (b *Badger) usedLoop() {
	defer b.wg.Done()
	t := time.NewTicker(spaceEvery)
	defer t.Stop()
	for {
		b.measureUsedNow()
		select {
		case <-b.quit:
			return
		case <-t.C:
		}
	}
}
