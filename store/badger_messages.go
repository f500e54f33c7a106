package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

func encodeMessages(op string, msgs []loop.Message) ([][]byte, error) {
	vals := make([][]byte, len(msgs))
	for i := range msgs {
		if msgs[i].Role == "" {
			return nil, fmt.Errorf("%s: %w: message %d has no role", op, loop.ErrInvalid, i)
		}
		v, err := json.Marshal(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("%s: encode message %d: %w", op, i, err)
		}
		vals[i] = v
	}
	return vals, nil
}

// Append implements loop.MessageStore.
func (b *Badger) Append(ctx context.Context, contextID string, msgs ...loop.Message) error {
	if err := b.limits.checkID("context id", contextID); err != nil {
		return fmt.Errorf("append messages: %w", err)
	}
	if len(msgs) == 0 {
		return nil
	}
	apply, err := appendApply(contextID, msgs)
	if err != nil {
		return err
	}
	err = b.write(ctx, &writeOp{apply: apply})
	if err != nil {
		return fmt.Errorf("append messages to %q: %w", contextID, err)
	}
	return nil
}

// appendApply returns the write that appends msgs to a history.
func appendApply(contextID string, msgs []loop.Message) (func(*badger.Txn) ([]mutation, error), error) {
	vals, err := encodeMessages("append messages", msgs)
	if err != nil {
		return nil, err
	}
	prefix, hk := msgPrefix(contextID), msgHeadKey(contextID)
	return func(txn *badger.Txn) ([]mutation, error) {
		h, ok, err := readHead(txn, hk)
		if err != nil {
			return nil, err
		}
		if !ok {
			h = head{a: 1}
		}
		es := make([]mutation, 0, len(vals)+1)
		for i, v := range vals {
			es = append(es, set(msgKey(prefix, h.b+1+uint64(i)), v))
		}
		h.b += uint64(len(vals))
		return append(es, set(hk, h.encode())), nil
	}, nil
}

// Recent implements loop.MessageStore. It seeks straight to the first
// wanted message: its cost does not grow with the length of the history.
func (b *Badger) Recent(ctx context.Context, contextID string, limit int) ([]loop.Message, error) {
	if err := b.limits.checkID("context id", contextID); err != nil {
		return nil, fmt.Errorf("recent messages: %w", err)
	}
	prefix, hk := msgPrefix(contextID), msgHeadKey(contextID)
	var out []loop.Message
	err := b.view(ctx, func(txn *badger.Txn) error {
		h, ok, err := readHead(txn, hk)
		if err != nil || !ok || h.a > h.b {
			return err
		}
		from := h.a
		if limit > 0 && h.b-h.a+1 > uint64(limit) {
			from = h.b - uint64(limit) + 1
		}
		n := h.b - from + 1
		out = make([]loop.Message, 0, min(n, 1024)) // a damaged head must not size an allocation
		opts := badger.IteratorOptions{Prefix: prefix}
		it := txn.NewIterator(opts)
		defer it.Close()
		want := from
		for it.Seek(msgKey(prefix, from)); it.Valid() && want <= h.b; it.Next() {
			item := it.Item()
			key := item.Key()
			seq, err := parseSeqKey(key, string(prefix))
			if err != nil {
				return corrupt(key, err)
			}
			if seq != want {
				return corrupt(msgKey(prefix, want), errors.New("message missing from history"))
			}
			var m loop.Message
			err = item.Value(func(v []byte) error {
				m, err = decodeMessage(key, v)
				return err
			})
			if err != nil {
				return err
			}
			out = append(out, m)
			want++
		}
		if want <= h.b {
			return corrupt(msgKey(prefix, want), errors.New("message missing from history"))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("recent messages of %q: %w", contextID, err)
	}
	if out == nil {
		out = []loop.Message{}
	}
	return out, nil
}

// Count implements loop.MessageStore.
func (b *Badger) Count(ctx context.Context, contextID string) (int, error) {
	if err := b.limits.checkID("context id", contextID); err != nil {
		return 0, fmt.Errorf("count messages: %w", err)
	}
	var n int
	err := b.view(ctx, func(txn *badger.Txn) error {
		hk := msgHeadKey(contextID)
		h, ok, err := readHead(txn, hk)
		if ok && h.a <= h.b {
			if h.b-h.a >= math.MaxInt32 {
				return corrupt(hk, fmt.Errorf("history range %d..%d is not plausible", h.a, h.b))
			}
			n = int(h.b - h.a + 1)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("count messages of %q: %w", contextID, err)
	}
	return n, nil
}

// Replace implements loop.MessageStore. The new history is written after
// the old one and the head moved in one transaction; the old messages are
// deleted afterwards.
func (b *Badger) Replace(ctx context.Context, contextID string, msgs []loop.Message) error {
	if err := b.limits.checkID("context id", contextID); err != nil {
		return fmt.Errorf("replace messages: %w", err)
	}
	vals, err := encodeMessages("replace messages", msgs)
	if err != nil {
		return err
	}
	prefix, hk := msgPrefix(contextID), msgHeadKey(contextID)
	err = b.write(ctx, &writeOp{run: func() error {
		var bound uint64
		err := b.update(func(txn *badger.Txn) error {
			h, ok, err := readHead(txn, hk)
			if err != nil {
				return err
			}
			if !ok {
				h = head{a: 1}
			}
			for i, v := range vals {
				if err := txn.Set(msgKey(prefix, h.b+1+uint64(i)), v); err != nil {
					return err
				}
			}
			h = head{a: h.b + 1, b: h.b + uint64(len(vals))}
			bound = h.a
			return txn.Set(hk, h.encode())
		})
		if err != nil {
			return err
		}
		if err := b.purge(prefix, bound); err != nil {
			return fmt.Errorf("delete old messages: %w", err)
		}
		if len(vals) == 0 {
			return b.update(func(txn *badger.Txn) error { return txn.Delete(hk) })
		}
		return nil
	}})
	if err != nil {
		return fmt.Errorf("replace messages of %q: %w", contextID, err)
	}
	return nil
}

// Delete implements loop.MessageStore.
func (b *Badger) Delete(ctx context.Context, contextID string) error {
	if err := b.limits.checkID("context id", contextID); err != nil {
		return fmt.Errorf("delete messages: %w", err)
	}
	prefix, hk := msgPrefix(contextID), msgHeadKey(contextID)
	err := b.write(ctx, &writeOp{run: func() error {
		// Without a head the history is empty at once; a later Append
		// rewrites every seq it makes visible, so keys left behind by a
		// crash here never reappear.
		if err := b.update(func(txn *badger.Txn) error { return txn.Delete(hk) }); err != nil {
			return err
		}
		return b.purge(prefix, 0)
	}})
	if err != nil {
		return fmt.Errorf("delete messages of %q: %w", contextID, err)
	}
	return nil
}
