package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// The deletions of conversations still to finish. DeleteConversation
// enters the conversation here in the write that deletes its agent record
// and history (convdel/<ctx> = the time of that write, in Unix
// nanoseconds); what belongs to it elsewhere (its finished tasks, their
// artifacts, the event streams) is then deleted by the host, which removes
// the entry last (ConversationDeleteDone). A host killed in between finds
// the entry at its next start (PendingConversationDeletes) and finishes
// the deletion before it serves anything.
const pfxConvDelete = "convdel/"

func convDeleteKey(ctxID string) []byte { return []byte(pfxConvDelete + escape(ctxID)) }

func convDeleteValue(at time.Time) []byte {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(at.UnixNano()))
	return v[:]
}

// PendingConversationDeletes returns the conversations whose deletion
// (DeleteConversation) is not finished yet, each with the time of its
// deletion.
func (b *Badger) PendingConversationDeletes(ctx context.Context) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := b.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfxConvDelete), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			id, err := unescape(string(item.Key()[len(pfxConvDelete):]))
			if err != nil {
				continue // not a key of ours
			}
			var at time.Time
			_ = item.Value(func(v []byte) error {
				if len(v) == 8 {
					at = time.Unix(0, int64(binary.BigEndian.Uint64(v)))
				}
				return nil
			})
			if at.IsZero() {
				at = time.Now() // unreadable: every finished task of it so far
			}
			out[id] = at
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pending conversation deletes: %w", err)
	}
	return out, nil
}

// ConversationDeleteDone removes the entry of a conversation whose
// deletion is finished.
func (b *Badger) ConversationDeleteDone(ctx context.Context, contextID string) error {
	if err := b.limits.checkID("context id", contextID); err != nil {
		return fmt.Errorf("conversation delete done: %w", err)
	}
	k := convDeleteKey(contextID)
	err := b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		if _, err := txn.Get(k); errors.Is(err, badger.ErrKeyNotFound) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		return []mutation{del(k)}, nil
	}, frees: true})
	if err != nil {
		return fmt.Errorf("conversation delete done %q: %w", contextID, err)
	}
	return nil
}

// PendingConversationDeletes is Badger's, in memory (nothing survives a
// restart, so an entry only lives while a deletion runs).
func (m *Memory) PendingConversationDeletes(ctx context.Context) (map[string]time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.agentMu.Lock()
	defer m.agentMu.Unlock()
	out := make(map[string]time.Time, len(m.convDeletes))
	for id, at := range m.convDeletes {
		out[id] = at
	}
	return out, nil
}

// ConversationDeleteDone is Badger's, in memory.
func (m *Memory) ConversationDeleteDone(ctx context.Context, contextID string) error {
	m.agentMu.Lock()
	defer m.agentMu.Unlock()
	delete(m.convDeletes, contextID)
	return nil
}
