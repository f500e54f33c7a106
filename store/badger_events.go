package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// BadgerEvents is the event log of a Badger store: evt/<stream>/<seq>
// records under a head evth/<stream> holding the last seq, the stream's
// expiry (the head alone carries it: see Expire) and the floor below which
// its records are gone. The head outlives the records: a stream's seqs
// never go back. Appends from many goroutines, to one stream or many, share synced
// commits (see Badger).
type BadgerEvents struct {
	b       *Badger
	waiters waiters
}

var _ loop.EventLog = (*BadgerEvents)(nil)

// Append implements loop.EventLog. The records get consecutive seqs; they
// are durable when Append returns.
func (e *BadgerEvents) Append(ctx context.Context, stream string, data ...[]byte) (uint64, error) {
	if err := e.b.limits.checkID("stream", stream); err != nil {
		return 0, fmt.Errorf("append events: %w", err)
	}
	if len(data) == 0 {
		return 0, fmt.Errorf("append events to %q: %w: no records", stream, loop.ErrInvalid)
	}
	prefix, hk := evtPrefix(stream), evtHeadKey(stream)
	var first uint64
	err := e.b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		h, _, err := readHead(txn, hk) // absent: a new stream
		if err != nil {
			return nil, err
		}
		first = h.a + 1
		ms := make([]mutation, 0, len(data)+1)
		for i, d := range data {
			ms = append(ms, set(msgKey(prefix, first+uint64(i)), d))
		}
		hm, err := h.grow(txn, stream, uint64(len(data)), nowSeconds())
		return append(ms, hm...), err
	}})
	if err != nil {
		return 0, fmt.Errorf("append events to %q: %w", stream, err)
	}
	e.waiters.wake(stream)
	return first, nil
}

var _ loop.MultiStreamAppender = (*BadgerEvents)(nil)

// AppendStreams implements loop.MultiStreamAppender: the records of every
// stream in one transaction, one sync.
func (e *BadgerEvents) AppendStreams(ctx context.Context, appends []loop.StreamAppend) ([]uint64, error) {
	if len(appends) == 0 {
		return nil, fmt.Errorf("append events: %w: no streams", loop.ErrInvalid)
	}
	seen := make(map[string]bool, len(appends))
	for _, a := range appends {
		if err := e.b.limits.checkID("stream", a.Stream); err != nil {
			return nil, fmt.Errorf("append events: %w", err)
		}
		if len(a.Data) == 0 {
			return nil, fmt.Errorf("append events to %q: %w: no records", a.Stream, loop.ErrInvalid)
		}
		if seen[a.Stream] {
			return nil, fmt.Errorf("append events to %q: %w: stream named twice", a.Stream, loop.ErrInvalid)
		}
		seen[a.Stream] = true
	}
	first := make([]uint64, len(appends))
	err := e.b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		var ms []mutation
		for i, a := range appends {
			prefix, hk := evtPrefix(a.Stream), evtHeadKey(a.Stream)
			h, _, err := readHead(txn, hk) // absent: a new stream
			if err != nil {
				return nil, err
			}
			first[i] = h.a + 1
			for j, d := range a.Data {
				ms = append(ms, set(msgKey(prefix, first[i]+uint64(j)), d))
			}
			hm, err := h.grow(txn, a.Stream, uint64(len(a.Data)), nowSeconds())
			if err != nil {
				return nil, err
			}
			ms = append(ms, hm...)
		}
		return ms, nil
	}})
	if err != nil {
		names := make([]string, len(appends))
		for i, a := range appends {
			names[i] = a.Stream
		}
		return nil, fmt.Errorf("append events to %q: %w", names, err)
	}
	for _, a := range appends {
		e.waiters.wake(a.Stream)
	}
	return first, nil
}

// Wait implements loop.EventLog. Appends through this store wake it; the
// database is opened by one process at a time, so no append is missed.
func (e *BadgerEvents) Wait(ctx context.Context, stream string, after uint64) (uint64, error) {
	if err := e.b.limits.checkID("stream", stream); err != nil {
		return 0, fmt.Errorf("wait for events: %w", err)
	}
	return e.waiters.wait(ctx, stream, after, e.Last)
}

// Read implements loop.EventLog: a seek to the first wanted record. The
// records up to the stream's floor (expired) are skipped: a read from
// before it returns those after it.
func (e *BadgerEvents) Read(ctx context.Context, stream string, after uint64, limit int) ([]loop.LogRecord, error) {
	if err := e.b.limits.checkID("stream", stream); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	prefix, hk := evtPrefix(stream), evtHeadKey(stream)
	out := []loop.LogRecord{}
	err := e.b.view(ctx, func(txn *badger.Txn) error {
		h, ok, err := readHead(txn, hk)
		if err != nil || !ok {
			return err
		}
		h = h.live(nowSeconds())
		after = max(after, h.c)
		if after >= h.a {
			return nil
		}
		last := h.a
		if limit > 0 && last-after > uint64(limit) {
			last = after + uint64(limit)
		}
		n := last - after
		out = make([]loop.LogRecord, 0, min(n, 1024)) // a damaged head must not size an allocation
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: int(min(n, 100))})
		defer it.Close()
		want := after + 1
		for it.Seek(msgKey(prefix, want)); it.Valid() && want <= last; it.Next() {
			item := it.Item()
			seq, err := parseSeqKey(item.Key(), string(prefix))
			if err != nil {
				return corrupt(item.Key(), err)
			}
			if seq != want {
				return corrupt(msgKey(prefix, want), errors.New("record missing from event log"))
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			out = append(out, loop.LogRecord{Seq: seq, Data: v})
			want++
		}
		if want <= last {
			return corrupt(msgKey(prefix, want), errors.New("record missing from event log"))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read events of %q: %w", stream, err)
	}
	return out, nil
}

// Last implements loop.EventLog.
func (e *BadgerEvents) Last(ctx context.Context, stream string) (uint64, error) {
	if err := e.b.limits.checkID("stream", stream); err != nil {
		return 0, fmt.Errorf("last event: %w", err)
	}
	var last uint64
	err := e.b.view(ctx, func(txn *badger.Txn) error {
		h, _, err := readHead(txn, evtHeadKey(stream))
		last = h.a
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("last event of %q: %w", stream, err)
	}
	return last, nil
}

var _ loop.StreamSeeder = (*BadgerEvents)(nil)

// SeedStream implements loop.StreamSeeder: the head of a stream without
// records gets last as its last seq and floor.
func (e *BadgerEvents) SeedStream(ctx context.Context, stream string, last uint64) error {
	if err := e.b.limits.checkID("stream", stream); err != nil {
		return fmt.Errorf("seed events: %w", err)
	}
	hk := evtHeadKey(stream)
	err := e.b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		h, ok, err := readHead(txn, hk)
		if err != nil {
			return nil, err
		}
		if ok {
			if lv := h.live(nowSeconds()); lv.c != lv.a || lv.a >= last {
				return nil, nil // it has records, or ids up to last already
			}
		}
		// Records below the old last seq still to sweep keep their index
		// entry: they are below the new floor.
		return []mutation{set(hk, head{a: last, c: last}.encode())}, nil
	}})
	if err != nil {
		return fmt.Errorf("seed events of %q: %w", stream, err)
	}
	return nil
}

// nowSeconds is the Unix second against which stream deadlines are read.
func nowSeconds() uint64 { return uint64(max(time.Now().Unix(), 1)) }

// live returns a stream's head as readers see it at now: once its deadline
// has passed every record so far is gone (the floor is the last seq),
// whether or not the sweeper has deleted them yet.
func (h head) live(now uint64) head {
	if h.b != 0 && h.b <= now {
		h.c = h.a
	}
	return h
}

// grow returns the writes of a stream's head after n records were appended:
// the new last seq, and no deadline. An append cancels the stream's expiry
// (see Expire): the deadline and its expiry index entry go in the append's
// own write, so a stream written to after its deadline was set is never
// deleted under its writer, whatever the sweeper does next. An append
// after the deadline finds the earlier records gone: they stay below the
// floor, and the index entry stays for the sweeper to delete them. A
// stream whose records carry Badger TTLs of their own (legacyExpiry) keeps
// its deadline: its records would vanish under a head without one.
func (h head) grow(txn *badger.Txn, stream string, n, now uint64) ([]mutation, error) {
	var ms []mutation
	hk := evtHeadKey(stream)
	if h.b != 0 {
		legacy, err := legacyExpiry(txn, evtPrefix(stream))
		if err != nil {
			return nil, err
		}
		if legacy != 0 {
			h.a += n
			return append(ms, mutation{key: hk, value: h.encode(), expiresAt: h.b}), nil
		}
		if h.b > now {
			ms = append(ms, del(sweepKey(h.b, stream)))
		} else {
			h.c = h.a
		}
	}
	h.a += n
	h.b = 0
	return append(ms, set(hk, h.encode())), nil
}

// Expire implements loop.EventLog: the stream's records are gone once ttl
// has passed (ttl 0: now), unless a record is appended to it before: an
// append cancels the expiry (the stream's writer sets it again when it is
// done). Its last seq is not: the next append continues after it, so an id
// a client holds never names another event.
//
// Expire writes two small records whatever the stream's length: the
// stream's head with its deadline (reads see every record up to the last
// seq gone from then on, see head.live; the head itself stays, with no
// Badger TTL) and an entry of the expiry index, ordered by deadline. The records themselves are deleted later by the
// store's sweeper (sweepStreams), off the writes that wait for a sync. It
// shares its commit with whatever else is queued. It passes below the floor
// where writes stop (writeOp.frees: a head and an index entry, once per
// finished stream, are what lets the sweep delete it); moving the deadline
// of a stream stored before the expiry index rewrites its records and
// does not.
func (e *BadgerEvents) Expire(ctx context.Context, stream string, ttl time.Duration) error {
	if err := e.b.limits.checkID("stream", stream); err != nil {
		return fmt.Errorf("expire events: %w", err)
	}
	if err := checkTTL(ttl); err != nil {
		return fmt.Errorf("expire events: %w", err)
	}
	prefix, hk := evtPrefix(stream), evtHeadKey(stream)
	now := time.Now()
	deadline := uint64(max(now.Unix(), 1)) // ttl 0: due at once
	if ttl > 0 {
		deadline = expirySeconds(now.Add(ttl))
	}
	b := e.b
	// A deadline is retention, not something a client waits on: it rides
	// with the next batch (writeLater). A removal (ttl 0) may be a
	// client's request (the delete of a conversation): it goes at once.
	submit := b.writeLater
	if ttl == 0 {
		submit = b.write
	}
	err := submit(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		h, ok, err := readHead(txn, hk)
		if err != nil || !ok {
			return nil, err
		}
		var ms []mutation
		if h.b != 0 && h.b != deadline {
			// The entry of this stream's earlier deadline: the one
			// written now covers it.
			ms = append(ms, del(sweepKey(h.b, stream)))
		}
		ms = append(ms, set(sweepKey(deadline, stream), nil))
		if ttl == 0 {
			h.b, h.c = 0, h.a
			return append(ms, set(hk, h.encode())), nil
		}
		if legacy, err := legacyExpiry(txn, prefix); err != nil || (legacy != 0 && legacy < deadline) {
			if err == nil {
				err = errLegacyExpiry
			}
			return nil, err
		}
		h = h.live(nowSeconds())
		h.b = deadline
		return append(ms, set(hk, h.encode())), nil
	}, frees: true})
	if errors.Is(err, errLegacyExpiry) {
		err = b.write(ctx, &writeOp{run: func() error { return b.extendLegacy(stream, deadline) }})
	}
	if err != nil {
		return fmt.Errorf("expire events of %q: %w", stream, err)
	}
	return nil
}

// errLegacyExpiry: the stream's records carry a Badger TTL earlier than the
// new deadline (see legacyExpiry).
var errLegacyExpiry = errors.New("stream records expire before the new deadline")

// legacyExpiry returns the Badger TTL of a stream's first record (0: none).
// A store written before the expiry index gave every record of an expiring
// stream the stream's expiry; records appended since carry none. Such a
// stream's records expire by themselves, so moving its deadline later must
// clear their TTLs first, or they would vanish before their head.
func legacyExpiry(txn *badger.Txn, prefix []byte) (uint64, error) {
	item, err := txn.Get(msgKey(prefix, 1))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return item.ExpiresAt(), nil
}

// extendLegacy moves the deadline of a stream whose records carry Badger
// TTLs (legacyExpiry) to deadline: first the expiry index entry, then the
// records rewritten without TTL (in bounded transactions), then the head.
// A crash in between leaves the old deadline in force, and the entry has
// the sweeper delete whatever is left of the stream. It runs on the commit
// goroutine.
func (b *Badger) extendLegacy(stream string, deadline uint64) error {
	prefix, hk := evtPrefix(stream), evtHeadKey(stream)
	var h head
	var ok bool
	err := b.update(func(txn *badger.Txn) error {
		var err error
		if h, ok, err = readHead(txn, hk); err != nil || !ok {
			return err
		}
		return txn.Set(sweepKey(deadline, stream), nil)
	})
	if err != nil || !ok {
		return err
	}
	if err := b.setExpiry(prefix, h.a, 0); err != nil {
		return err
	}
	return b.update(func(txn *badger.Txn) error {
		h, ok, err := readHead(txn, hk)
		if err != nil || !ok {
			return err
		}
		if h.b != 0 && h.b != deadline {
			if err := txn.Delete(sweepKey(h.b, stream)); err != nil {
				return err
			}
		}
		h.b = deadline
		return txn.SetEntry(&badger.Entry{Key: hk, Value: h.encode(), ExpiresAt: deadline})
	})
}

// setExpiry rewrites the records of a stream up to seq last with an expiry,
// in transactions of bounded size: at most 1000 records, and at most the
// store's batch size in bytes (a stream of large records, e.g. a flood of
// deltas, would not fit in one Badger transaction otherwise). It runs on
// the commit goroutine.
func (b *Badger) setExpiry(prefix []byte, last, expiresAt uint64) error {
	const chunk = 1000
	for from := uint64(1); from <= last; {
		var es []*badger.Entry
		var size int64
		err := b.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 100})
			defer it.Close()
			for it.Seek(msgKey(prefix, from)); it.Valid() && len(es) < chunk; it.Next() {
				item := it.Item()
				seq, err := parseSeqKey(item.Key(), string(prefix))
				if err != nil || seq > last {
					from = last + 1
					break
				}
				n := item.EstimatedSize() + 64
				if len(es) > 0 && size+n > b.maxSize {
					break
				}
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				size += n
				es = append(es, &badger.Entry{Key: item.KeyCopy(nil), Value: v, ExpiresAt: expiresAt})
				from = seq + 1
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return nil
		}
		err = b.update(func(txn *badger.Txn) error {
			for _, e := range es {
				if err := txn.SetEntry(e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
