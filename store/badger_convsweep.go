package store

import (
	"context"
	"encoding/binary"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// The expiry of idle conversations. A conversation is its agent record
// (agent/<ctx>), its history head (msgh/<ctx>) and its messages
// (msg/<ctx>/<seq>). ExpireConversations removes those idle since before a
// cutoff in two steps, so that a crash at any point leaves a conversation
// either whole or gone:
//
//  1. One write, per conversation, deletes its agent record, empties its
//     history head (first = last+1, so readers find no message and a new
//     message goes on after the old seqs instead of over them) and writes
//     convx/<ctx> = the old last seq, the entry of a durable index of
//     conversations whose messages are still to delete. From that write on,
//     the conversation is gone for every reader.
//  2. Writes of at most sweepChunk keys delete its old messages (seqs up to
//     the entry's bound that lie outside the head's live range); the write
//     that deletes the last of them deletes the entry, and the head too when
//     it is still empty. A restart finds the entries and goes on.
//
// The decision of step 1 is taken inside the write (the commit goroutine
// applies writes one after the other): the agent record is read again and
// the conversation kept if it was active since the cutoff or has a task
// that is not finished (working, input-required, auth-required), so a turn
// that began meanwhile keeps it.
const pfxConvSweep = "convx/"

// convPerWrite bounds the conversations the first step takes in one write.
const convPerWrite = 64

func convSweepKey(ctxID string) []byte { return []byte(pfxConvSweep + escape(ctxID)) }

// ExpireConversations deletes the conversations (agent record, history)
// whose last activity is before idleBefore and that have no unfinished
// task, and the messages of those it deleted before (a crash, or a history
// larger than one write). It returns the ids of the conversations it
// deleted. It is safe to call at any time and from several goroutines.
func (b *Badger) ExpireConversations(ctx context.Context, idleBefore time.Time) ([]string, error) {
	if err := b.sweepConversationMessages(ctx); err != nil {
		return nil, err
	}
	cands, err := b.idleConversations(ctx, idleBefore)
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	var gone []string
	for len(cands) > 0 {
		batch := cands[:min(len(cands), convPerWrite)]
		cands = cands[len(batch):]
		var took []string
		err := b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
			took = took[:0]
			var ms []mutation
			for _, id := range batch {
				m, ok := expireConvApply(txn, id, idleBefore)
				if ok {
					ms = append(ms, m...)
					took = append(took, id)
				}
			}
			return ms, nil
		}})
		if err != nil {
			return gone, err
		}
		gone = append(gone, took...)
		if convWrote != nil {
			convWrote()
		}
	}
	return gone, b.sweepConversationMessages(ctx)
}

// convWrote, when set (tests), is called after each write of the first step.
var convWrote func()

// idleConversations lists the agent records last active before cutoff:
// the candidates, checked again in the write. It lists them all (not the
// first n), so that idle conversations kept for an unfinished task never
// hide the others from every sweep.
func (b *Badger) idleConversations(ctx context.Context, cutoff time.Time) ([]string, error) {
	var out []string
	err := b.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfxAgent), PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			var idle bool
			var id string
			_ = item.Value(func(v []byte) error {
				m, err := decodeAgent(item.Key(), v)
				if err != nil {
					return err // a damaged record stays for a reader to report
				}
				id, idle = m.ContextID, lastActive(m.CreatedAt, m.LastActivity).Before(cutoff)
				return nil
			})
			if idle && id != "" {
				out = append(out, id)
			}
		}
		return nil
	})
	return out, err
}

func lastActive(created, last time.Time) time.Time {
	if last.After(created) {
		return last
	}
	return created
}

// expireConvApply returns the mutations of the first step for contextID,
// or false when it is to be kept: gone already, active since cutoff, or
// with an unfinished task.
func expireConvApply(txn *badger.Txn, contextID string, cutoff time.Time) ([]mutation, bool) {
	ak := agentKey(contextID)
	item, err := txn.Get(ak)
	if err != nil {
		return nil, false
	}
	idle := false
	_ = item.Value(func(v []byte) error {
		m, err := decodeAgent(ak, v)
		if err == nil {
			idle = lastActive(m.CreatedAt, m.LastActivity).Before(cutoff)
		}
		return err
	})
	if !idle || hasUnfinishedTask(txn, contextID) {
		return nil, false
	}
	ms := []mutation{del(ak)}
	hk := msgHeadKey(contextID)
	h, ok, err := readHead(txn, hk)
	if err != nil {
		return nil, false // a damaged head: kept for a reader to report
	}
	if ok {
		ms = append(ms, set(hk, head{h.b + 1, h.b}.encode()))
		var bound [8]byte
		binary.BigEndian.PutUint64(bound[:], h.b)
		ms = append(ms, set(convSweepKey(contextID), bound[:]))
	}
	return ms, true
}

// hasUnfinishedTask reports whether a task of contextID is not finished
// (an unreadable summary counts as unfinished: keep rather than lose).
func hasUnfinishedTask(txn *badger.Txn, contextID string) bool {
	pfx := taskIdxPrefix(idxContext, contextID)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: pfx})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		unfinished := true
		_ = item.Value(func(v []byte) error {
			s, err := decodeSummary(item.Key(), v)
			if err == nil {
				unfinished = !s.Status.Terminal()
			}
			return nil
		})
		if unfinished {
			return true
		}
	}
	return false
}

// sweepConversationMessages runs the second step for every entry of the
// index, in writes of at most sweepChunk keys.
func (b *Badger) sweepConversationMessages(ctx context.Context) error {
	for {
		entries, err := b.convSweepEntries(ctx)
		if err != nil || len(entries) == 0 {
			return err
		}
		var moved int
		err = b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
			var ms []mutation
			ms, moved = convSweepApply(txn, entries)
			return ms, nil
		}})
		if err != nil {
			return err
		}
		if sweepWrote != nil {
			sweepWrote()
		}
		if moved == 0 {
			return nil
		}
		select {
		case <-b.quit:
			return nil
		default:
		}
	}
}

func (b *Badger) convSweepEntries(ctx context.Context) ([][]byte, error) {
	var out [][]byte
	err := b.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfxConvSweep)})
		defer it.Close()
		for it.Rewind(); it.Valid() && len(out) < sweepStreamsPerWrite; it.Next() {
			out = append(out, it.Item().KeyCopy(nil))
		}
		return nil
	})
	return out, err
}

// convSweepApply returns the deletions of one write of the second step and
// how many keys it deletes.
func convSweepApply(txn *badger.Txn, entries [][]byte) ([]mutation, int) {
	var ms []mutation
	budget := sweepChunk
	for _, ek := range entries {
		if budget <= 0 {
			break
		}
		id, err := unescape(string(ek[len(pfxConvSweep):]))
		var bound uint64
		if err == nil {
			var item *badger.Item
			if item, err = txn.Get(ek); err == nil {
				err = item.Value(func(v []byte) error {
					if len(v) == 8 {
						bound = binary.BigEndian.Uint64(v)
					}
					return nil
				})
			}
		}
		if err != nil {
			ms = append(ms, del(ek))
			budget--
			continue
		}
		prefix, hk := msgPrefix(id), msgHeadKey(id)
		h, ok, err := readHead(txn, hk)
		if err != nil {
			ms = append(ms, del(ek)) // a damaged head: its messages stay for a reader to report
			budget--
			continue
		}
		n, more := 0, false
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		for it.Seek(msgKey(prefix, 1)); it.Valid(); it.Next() {
			seq, err := parseSeqKey(it.Item().Key(), string(prefix))
			if err != nil || seq > bound {
				break
			}
			if ok && seq >= h.a && seq <= h.b {
				continue // a message of the conversation begun again
			}
			if n == budget {
				more = true
				break
			}
			ms = append(ms, del(it.Item().KeyCopy(nil)))
			n++
		}
		it.Close()
		budget -= n
		if more {
			break
		}
		if ok && h.a > h.b && h.b == bound {
			ms = append(ms, del(hk)) // still empty: nothing of it is left
		}
		ms = append(ms, del(ek))
		budget--
	}
	return ms, len(ms)
}
