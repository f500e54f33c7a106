package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// The index of conversations by last activity: one entry
// conva/<lastActive:19>/<ctx> (empty value) per agent record, where
// lastActive is the later of the record's CreatedAt and LastActivity in
// Unix nanoseconds. The write that saves an agent record sets its entry
// and deletes the one of the record it replaces, so record and entry
// change together (no write of their own: the entry goes into the batch
// the record is synced with). The expiry of idle conversations reads the
// entries older than its cutoff only, not every record.
//
// An entry that names no record, or a time that is not its record's (left
// by a damaged record), is deleted by the expiry when it reaches it.
//
// A store written before the index existed has records without entries:
// the first expiry after Open writes their entries (backfillConvIndex, in
// writes of at most convBackfillPerWrite records, each entry computed from
// the record read inside the write), then the marker meta/convindex. A
// crash before the marker means the next expiry does it again, which
// writes the same entries.
const (
	pfxConvIdx      = "conva/"
	convIdxBuiltKey = "meta/convindex"
	convIdxPageSize = 4096
)

// convBackfillPage bounds the records one write of the backfill indexes
// (tests lower it).
var convBackfillPage = 256

// convListed, when set (tests), is called with the number of index
// entries each page of the expiry read.
var convListed func(n int)

// convIdxKey is the index entry of the conversation ctxID last active at
// at (timeKey).
func convIdxKey(at uint64, ctxID string) []byte {
	e := escape(ctxID)
	b := make([]byte, 0, len(pfxConvIdx)+timeWidth+1+len(e))
	b = appendTime(append(b, pfxConvIdx...), at)
	b = append(b, '/')
	return append(b, e...)
}

// parseConvIdxKey returns the time and the context id of an index entry.
func parseConvIdxKey(key []byte) (at uint64, ctxID string, err error) {
	created, id, err := parseTaskIdxKey(key, []byte(pfxConvIdx))
	if err != nil {
		return 0, "", fmt.Errorf("not a conversation index key: %q", key)
	}
	return created, id, nil
}

// agentTimes is what the index needs of an agent record.
type agentTimes struct {
	ContextID    string    `json:"contextId"`
	CreatedAt    time.Time `json:"createdAt"`
	LastActivity time.Time `json:"lastActivity"`
}

// storedConvIdx returns the index entry of the agent record stored at ak
// (false: no record, or one that cannot be read).
func storedConvIdx(txn *badger.Txn, ak []byte) ([]byte, bool) {
	item, err := txn.Get(ak)
	if err != nil {
		return nil, false
	}
	var key []byte
	_ = item.Value(func(v []byte) error {
		var a agentTimes
		if json.Unmarshal(v, &a) == nil && a.ContextID != "" {
			key = convIdxKey(timeKey(lastActive(a.CreatedAt, a.LastActivity)), a.ContextID)
		}
		return nil
	})
	return key, key != nil
}

// agentIdxMutations returns the index mutations of the write that stores
// an agent record whose entry is newIdx (nil: the record is deleted) at ak.
func agentIdxMutations(txn *badger.Txn, ak, newIdx []byte) []mutation {
	var ms []mutation
	if old, ok := storedConvIdx(txn, ak); ok && !bytes.Equal(old, newIdx) {
		ms = append(ms, del(old))
	}
	if newIdx != nil {
		ms = append(ms, set(newIdx, []byte{}))
	}
	return ms
}

// convIdxBackfillWrote, when set (tests), is called after each write of
// the backfill.
var convIdxBackfillWrote func()

// backfillConvIndex writes the index entries of the agent records of a
// store written before the index existed, once (see above).
func (b *Badger) backfillConvIndex(ctx context.Context) error {
	if b.convIdxBuilt.Load() {
		return nil
	}
	var built bool
	err := b.view(ctx, func(txn *badger.Txn) error {
		_, err := txn.Get([]byte(convIdxBuiltKey))
		built = err == nil
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	var after []byte
	for !built {
		var page [][]byte
		err := b.view(ctx, func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfxAgent), PrefetchValues: false})
			defer it.Close()
			it.Seek([]byte(pfxAgent))
			if after != nil {
				it.Seek(append(after, 0))
			}
			for ; it.Valid() && len(page) < convBackfillPage; it.Next() {
				page = append(page, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil {
			return err
		}
		last := len(page) < convBackfillPage
		err = b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
			var ms []mutation
			for _, ak := range page {
				if k, ok := storedConvIdx(txn, ak); ok {
					ms = append(ms, set(k, []byte{}))
				}
			}
			if last {
				ms = append(ms, set([]byte(convIdxBuiltKey), []byte{1}))
			}
			return ms, nil
		}, frees: true}) // once per store, what the expiry needs to find what to delete
		if err != nil {
			return err
		}
		if convIdxBackfillWrote != nil {
			convIdxBackfillWrote()
		}
		if last {
			built = true
			break
		}
		after = page[len(page)-1]
		select {
		case <-b.quit:
			return ErrClosed
		default:
		}
	}
	b.convIdxBuilt.Store(true)
	return nil
}

// idleConversations returns the index entries older than cutoff that come
// after the entry after (nil: from the first), at most convIdxPageSize:
// the candidates, checked again in the write.
func (b *Badger) idleConversations(ctx context.Context, cutoff time.Time, after []byte) ([][]byte, error) {
	end := convIdxKey(timeKey(cutoff), "")
	end = end[:len(end)-1] // conva/<cutoff>: every entry older sorts before it
	var out [][]byte
	defer func() {
		if convListed != nil {
			convListed(len(out))
		}
	}()
	err := b.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfxConvIdx), PrefetchValues: false})
		defer it.Close()
		it.Seek([]byte(pfxConvIdx))
		if after != nil {
			it.Seek(append(after, 0))
		}
		for ; it.Valid() && len(out) < convIdxPageSize; it.Next() {
			k := it.Item().Key()
			if bytes.Compare(k, end) >= 0 {
				break
			}
			out = append(out, it.Item().KeyCopy(nil))
		}
		return nil
	})
	return out, err
}
