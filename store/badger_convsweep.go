package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// The expiry of idle conversations. A conversation is its agent record
// (agent/<ctx>), its history head (msgh/<ctx>) and its messages
// (msg/<ctx>/<seq>). ExpireConversations removes those idle since before a
// cutoff in two steps, so that a crash at any point leaves a conversation
// either whole or gone:
//
//  1. One write, per conversation, deletes its agent record and its entry
//     in the index by last activity (badger_convindex.go), empties its
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

// convPerWrite bounds the conversations the first step takes in one write
// (tests lower it).
var convPerWrite = 64

func convSweepKey(ctxID string) []byte { return []byte(pfxConvSweep + escape(ctxID)) }

// ExpireConversations deletes the conversations (agent record, history)
// whose last activity is before idleBefore and that have no unfinished
// task, and the messages of those it deleted before (a crash, or a history
// larger than one write). It returns the ids of the conversations it
// deleted. It reads the entries of the index by last activity older than
// idleBefore, not every conversation (see badger_convindex.go). It is safe
// to call at any time and from several goroutines.
func (b *Badger) ExpireConversations(ctx context.Context, idleBefore time.Time) ([]string, error) {
	if err := b.sweepConversationMessages(ctx); err != nil {
		return nil, err
	}
	if err := b.backfillConvIndex(ctx); err != nil {
		return nil, err
	}
	var gone []string
	var after []byte
	for {
		// Pages by key: the entries kept (a conversation with an
		// unfinished task) never hide those after them.
		cands, err := b.idleConversations(ctx, idleBefore, after)
		if err != nil {
			return gone, err
		}
		if len(cands) == 0 {
			break
		}
		after = cands[len(cands)-1]
		for len(cands) > 0 {
			batch := cands[:min(len(cands), convPerWrite)]
			cands = cands[len(batch):]
			var took []string
			err := b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
				took = took[:0]
				var ms []mutation
				for _, ek := range batch {
					m, id := expireConvApply(txn, ek, idleBefore)
					ms = append(ms, m...)
					if id != "" {
						took = append(took, id)
					}
				}
				return ms, nil
			}, frees: true})
			if err != nil {
				return gone, err
			}
			gone = append(gone, took...)
			if convWrote != nil {
				convWrote()
			}
		}
		select {
		case <-b.quit:
			return gone, nil
		default:
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	return gone, b.sweepConversationMessages(ctx)
}

// convWrote, when set (tests), is called after each write of the first step.
var convWrote func()

func lastActive(created, last time.Time) time.Time {
	if last.After(created) {
		return last
	}
	return created
}

// expireConvApply returns the mutations of the first step for the index
// entry ek and the id of the conversation it deletes ("" when it is kept:
// active since cutoff, with an unfinished task, or with a damaged record).
// An entry that names no record, or not its record's time, is deleted
// (with the record's entry written again, should it be missing).
func expireConvApply(txn *badger.Txn, ek []byte, cutoff time.Time) ([]mutation, string) {
	at, contextID, err := parseConvIdxKey(ek)
	if err != nil {
		return []mutation{del(ek)}, ""
	}
	ak := agentKey(contextID)
	item, err := txn.Get(ak)
	if err != nil {
		return []mutation{del(ek)}, "" // no record: a stale entry
	}
	var m loop.AgentMetadata
	if err := item.Value(func(v []byte) error {
		m, err = decodeAgent(ak, v)
		return err
	}); err != nil {
		return nil, "" // a damaged record stays for a reader to report
	}
	last := lastActive(m.CreatedAt, m.LastActivity)
	if timeKey(last) != at {
		return []mutation{del(ek), set(convIdxKey(timeKey(last), contextID), []byte{})}, ""
	}
	if !last.Before(cutoff) || hasUnfinishedTask(txn, contextID) {
		return nil, ""
	}
	ms, err := convDeleteMutations(txn, contextID)
	if err != nil {
		return nil, "" // a damaged head: kept for a reader to report
	}
	return ms, contextID // ms deletes ek: the entry the record names
}

// convDeleteMutations returns the mutations of the first step that
// delete the conversation contextID: its agent record, its index entry
// (the one its record names), its history head emptied and its entry in
// convx/.
func convDeleteMutations(txn *badger.Txn, contextID string) ([]mutation, error) {
	ak := agentKey(contextID)
	ms := []mutation{del(ak)}
	if ek, ok := storedConvIdx(txn, ak); ok {
		ms = append(ms, del(ek))
	}
	hk := msgHeadKey(contextID)
	h, ok, err := readHead(txn, hk)
	if err != nil {
		return nil, err
	}
	if ok {
		ms = append(ms, set(hk, head{a: h.b + 1, b: h.b}.encode()))
		var bound [8]byte
		binary.BigEndian.PutUint64(bound[:], h.b)
		ms = append(ms, set(convSweepKey(contextID), bound[:]))
	}
	return ms, nil
}

// DeleteConversation deletes the conversation contextID (agent record,
// history) now, whatever its last activity, unless it has an unfinished
// task: then it returns false and deletes nothing. The decision is taken
// inside the write, as the expiry's, and the deletion is the expiry's
// (whole or gone after a crash). A conversation without an agent record
// is not found (a *loop.NotFoundError); its messages, if any, are deleted
// all the same. Unless it was kept, the conversation is entered among the
// deletions to finish (PendingConversationDeletes) in the same write.
func (b *Badger) DeleteConversation(ctx context.Context, contextID string) (bool, error) {
	if err := b.limits.checkID("context id", contextID); err != nil {
		return false, fmt.Errorf("delete conversation: %w", err)
	}
	ak := agentKey(contextID)
	var found, kept bool
	err := b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		_, err := txn.Get(ak)
		found = err == nil
		if err != nil && !errors.Is(err, badger.ErrKeyNotFound) {
			return nil, err
		}
		if kept = hasUnfinishedTask(txn, contextID); kept {
			return nil, nil
		}
		ms, err := convDeleteMutations(txn, contextID)
		if err != nil {
			return nil, err
		}
		// The entry the host removes once the rest of the conversation
		// is deleted (convdelete.go).
		return append(ms, set(convDeleteKey(contextID), convDeleteValue(time.Now()))), nil
	}})
	if err != nil {
		return false, fmt.Errorf("delete conversation %q: %w", contextID, err)
	}
	if kept {
		return false, nil
	}
	if err := b.sweepConversationMessages(ctx); err != nil {
		return true, fmt.Errorf("delete conversation %q: %w", contextID, err)
	}
	if !found {
		return false, &loop.NotFoundError{What: "conversation", ID: contextID}
	}
	return true, nil
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
		}, frees: true})
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
