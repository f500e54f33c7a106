package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/loop"
)

// OrderedKV is an ordered, transactional key-value space on Redis, for
// records that need ranges by prefix and multi-key transactions (the
// artifact store's). Values are strings P o:<name>:<key>; a sorted set P
// oi:<name> holds every key for the ranges.
//
// Transactions are optimistic: every key read, and the index when a range
// is listed, is WATCHed; the writes go in one MULTI/EXEC that fails when
// any of them changed, and the transaction runs again. A read-only one
// ends with an empty MULTI/EXEC, so that it too saw one consistent state.
type OrderedKV struct {
	s    *Store
	vals string // prefix of the value keys
	idx  string
}

// OrderedKV returns the ordered space called name.
func (s *Store) OrderedKV(name string) *OrderedKV {
	return &OrderedKV{s: s, vals: s.p + "o:" + name + ":", idx: s.p + "oi:" + name}
}

// maxTxnAttempts bounds the retries of a transaction that keeps losing
// races (then it fails with loop.ErrConflict).
const maxTxnAttempts = 64

// View runs fn in a read-only transaction.
func (k *OrderedKV) View(fn func(*Txn) error) error { return k.run(false, fn) }

// Update runs fn in a read-write transaction: all of its writes or none.
func (k *OrderedKV) Update(fn func(*Txn) error) error { return k.run(true, fn) }

func (k *OrderedKV) run(write bool, fn func(*Txn) error) error {
	ctx := context.Background()
	for attempt := range maxTxnAttempts {
		err := k.s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			t := &Txn{k: k, ctx: ctx, tx: tx, write: write, pending: map[string][]byte{}}
			if err := fn(t); err != nil {
				return err
			}
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				if len(t.pending) == 0 {
					p.Ping(ctx) // validates the watches
				}
				for key, v := range t.pending {
					if v == nil {
						p.Del(ctx, k.vals+key)
						p.ZRem(ctx, k.idx, key)
					} else {
						p.Set(ctx, k.vals+key, v, 0)
						p.ZAdd(ctx, k.idx, redis.Z{Member: key})
					}
				}
				return nil
			})
			return err
		})
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(1+min(attempt, 20))) * time.Millisecond)
	}
	return fmt.Errorf("ordered kv: %w: gave up after %d attempts", loop.ErrConflict, maxTxnAttempts)
}

// Txn is a transaction of an OrderedKV. It is used by one goroutine.
type Txn struct {
	k       *OrderedKV
	ctx     context.Context
	tx      *redis.Tx
	write   bool
	pending map[string][]byte // nil: deleted
}

// Get appends the value of key to dst; an absent key is loop.ErrNotFound.
func (t *Txn) Get(key, dst []byte) ([]byte, error) {
	if v, ok := t.pending[string(key)]; ok {
		if v == nil {
			return nil, &loop.NotFoundError{What: "key", ID: string(key)}
		}
		return append(dst[:0], v...), nil
	}
	vk := t.k.vals + string(key)
	var get *redis.StringCmd
	_, err := t.tx.Pipelined(t.ctx, func(p redis.Pipeliner) error {
		p.Do(t.ctx, "WATCH", vk)
		get = p.Get(t.ctx, vk)
		return nil
	})
	if isNil(err) || isNil(get.Err()) {
		return nil, &loop.NotFoundError{What: "key", ID: string(key)}
	}
	if err != nil {
		return nil, err
	}
	b, err := get.Bytes()
	if err != nil {
		return nil, err
	}
	return append(dst[:0], b...), nil
}

// Set writes key (when the transaction commits).
func (t *Txn) Set(key, val []byte) error {
	if !t.write {
		return errors.New("set in a read-only transaction")
	}
	if val == nil {
		val = []byte{}
	}
	t.pending[string(key)] = val
	return nil
}

// Delete removes key (when the transaction commits).
func (t *Txn) Delete(key []byte) error {
	if !t.write {
		return errors.New("delete in a read-only transaction")
	}
	t.pending[string(key)] = nil
	return nil
}

// Keys calls fn with each key starting with prefix, in byte order, with
// the transaction's own writes; it returns the first error of fn.
func (t *Txn) Keys(prefix []byte, fn func([]byte) error) error {
	var all []string
	min := "[" + string(prefix)
	for {
		var rng *redis.StringSliceCmd
		_, err := t.tx.Pipelined(t.ctx, func(p redis.Pipeliner) error {
			p.Do(t.ctx, "WATCH", t.k.idx)
			rng = p.ZRangeByLex(t.ctx, t.k.idx, &redis.ZRangeBy{Min: min, Max: "+", Count: 500})
			return nil
		})
		if err != nil {
			return err
		}
		page := rng.Val()
		done := len(page) < 500
		for _, key := range page {
			if !bytes.HasPrefix([]byte(key), prefix) {
				done = true
				break
			}
			if v, ok := t.pending[key]; ok && v == nil {
				continue
			}
			all = append(all, key)
		}
		if done {
			break
		}
		min = "(" + page[len(page)-1]
	}
	for key, v := range t.pending {
		if v != nil && bytes.HasPrefix([]byte(key), prefix) {
			all = append(all, key)
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	for _, key := range all {
		if err := fn([]byte(key)); err != nil {
			return err
		}
	}
	return nil
}
