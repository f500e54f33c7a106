package store

import (
	"context"
	"errors"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// The sweep of expired event streams. Expire writes a stream's deadline
// into its head and an entry evtx/<deadline>/<stream> into the expiry index;
// from the deadline on the stream's records are gone for readers (its head
// says so: head.live), and they are garbage. The head stays, with the
// stream's last seq: the next append continues after it. The sweeper deletes them: it takes the due
// entries in deadline order, many streams at a time, and deletes their
// records in writes of at most sweepChunk keys that share the commit
// goroutine's batches like any other write. An entry is deleted in the
// write that deletes the last of its stream's records, so a crash between
// two writes leaves the entry for the next sweep (the index is in the
// database: a restart resumes it), and nothing of an expired stream is ever
// visible again.
//
// A stream appended to after its deadline keeps its entry: its records up to
// the floor are garbage, those after it live. The sweeper deletes the
// records up to the floor. A stream of a store written before the head
// outlived its records was started again at seq 1 when its head expired,
// over the old records; the old ones above its last seq are never read,
// and the sweeper deletes them too.

// sweepChunk bounds the keys one sweep write deletes (tests lower it).
var sweepChunk = 1024

// sweepStreamsPerWrite bounds the index entries one sweep write looks at.
const sweepStreamsPerWrite = 256

// defaultSweepInterval is how often the sweeper looks for due streams.
const defaultSweepInterval = 30 * time.Second

// sweepWrote, when set (tests), is called after each sweep write.
var sweepWrote func()

// SweepStreams deletes the records of the event streams whose deadline has
// passed and returns how many keys it deleted. The store's sweeper calls it
// every Options.SweepInterval; it is safe to call at any time.
func (b *Badger) SweepStreams(ctx context.Context) (int, error) {
	total := 0
	for {
		due, err := b.dueSweeps(ctx, uint64(time.Now().Unix()))
		if err != nil || len(due) == 0 {
			return total, err
		}
		var deleted, finished int
		err = b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
			var ms []mutation
			ms, deleted, finished = sweepApply(txn, due, uint64(time.Now().Unix()))
			return ms, nil
		}, frees: true})
		if err != nil {
			return total, err
		}
		total += deleted
		if sweepWrote != nil {
			sweepWrote()
		}
		if finished == 0 && deleted == 0 {
			return total, nil // nothing moved: not worth a loop
		}
		select {
		case <-b.quit:
			return total, nil
		default:
		}
	}
}

// dueSweeps returns the keys of the expiry index entries due at now (at
// most sweepStreamsPerWrite), oldest deadline first.
func (b *Badger) dueSweeps(ctx context.Context, now uint64) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.RLock() // not view: the sweeper's reads are not the store's reads served
	defer b.mu.RUnlock()
	if b.closed {
		return nil, ErrClosed
	}
	var due [][]byte
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfxEvtSweep)})
		defer it.Close()
		for it.Rewind(); it.Valid() && len(due) < sweepStreamsPerWrite; it.Next() {
			k := it.Item().KeyCopy(nil)
			if deadline, _, err := parseSweepKey(k); err == nil && deadline > now {
				break
			}
			due = append(due, k) // a key that does not parse goes too
		}
		return nil
	})
	return due, err
}

// sweepApply returns the deletions of one sweep write: for each due entry
// (in order, while the chunk lasts) its stream's dead records, and the
// entry itself once none are left. It reads through txn, so it sees the
// appends queued before it in the batch.
func sweepApply(txn *badger.Txn, due [][]byte, now uint64) (ms []mutation, deleted, finished int) {
	budget := sweepChunk
	for _, ek := range due {
		if budget <= 0 {
			break
		}
		_, stream, err := parseSweepKey(ek)
		if err != nil {
			ms = append(ms, del(ek))
			finished++
			continue
		}
		prefix, hk := evtPrefix(stream), evtHeadKey(stream)
		h, ok, err := readHead(txn, hk)
		if err != nil {
			// A damaged head: its records stay for a reader to report.
			ms = append(ms, del(ek))
			finished++
			continue
		}
		if !ok {
			// No head (a store of an earlier version: its head expired
			// with a Badger TTL): every record is garbage.
			n, more := deadRecords(txn, prefix, 1, 0, budget, &ms)
			budget -= n
			deleted += n
			if more {
				break
			}
			ms = append(ms, del(ek))
			finished++
			continue
		}
		lv := h.live(now)
		if lv != h {
			// Past its deadline: the head says so for good (the entry
			// may take more than one write), and keeps the last seq.
			lv.b = 0
			ms = append(ms, set(hk, lv.encode()))
		}
		// The records up to the floor, then any above the last seq (left
		// by a stream started again at 1 in an earlier version).
		var n int
		var more bool
		if lv.c > 0 {
			n, more = deadRecords(txn, prefix, 1, lv.c, budget, &ms)
		}
		if !more {
			var m int
			m, more = deadRecords(txn, prefix, lv.a+1, 0, budget-n, &ms)
			n += m
		}
		budget -= n
		deleted += n
		if more {
			break
		}
		ms = append(ms, del(ek))
		finished++
	}
	return ms, deleted, finished
}

// deadRecords appends the deletions of the records under prefix from seq
// from on, up to seq to (0: all), at most max of them; more says some are
// left.
func deadRecords(txn *badger.Txn, prefix []byte, from, to uint64, max int, ms *[]mutation) (n int, more bool) {
	if to != 0 && from > to {
		return 0, false
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(msgKey(prefix, from)); it.Valid(); it.Next() {
		if to != 0 {
			if seq, err := parseSeqKey(it.Item().Key(), string(prefix)); err == nil && seq > to {
				return n, false
			}
		}
		if n == max {
			return n, true
		}
		*ms = append(*ms, del(it.Item().KeyCopy(nil)))
		n++
	}
	return n, false
}

// sweepLoop runs SweepStreams when the store opens and every interval,
// and reclaims the space of what the cleanup deleted when the disk is short
// (reclaim.go).
func (b *Badger) sweepLoop(every time.Duration) {
	defer b.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	ctx := context.Background()
	for {
		select {
		case <-b.quit:
			return
		case <-t.C:
		}
		if _, err := b.SweepStreams(ctx); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNoSpace) {
			b.log.Warn("store: sweep of expired event streams", "err", err)
		}
		b.reclaimIfShort()
		t.Reset(every)
	}
}
