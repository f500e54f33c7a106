package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// SaveAgent implements loop.AgentStore.
func (b *Badger) SaveAgent(ctx context.Context, m loop.AgentMetadata) error {
	apply, err := b.saveAgentApply(&m)
	if err != nil {
		return err
	}
	err = b.write(ctx, &writeOp{apply: apply})
	if err != nil {
		return fmt.Errorf("save agent %q: %w", m.ContextID, err)
	}
	return nil
}

// saveAgentApply returns the write that saves m.
func (b *Badger) saveAgentApply(m *loop.AgentMetadata) (func(*badger.Txn) ([]mutation, error), error) {
	if err := b.limits.checkID("context id", m.ContextID); err != nil {
		return nil, fmt.Errorf("save agent: %w", err)
	}
	v, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("save agent %q: encode: %w", m.ContextID, err)
	}
	k := agentKey(m.ContextID)
	idx := convIdxKey(timeKey(lastActive(m.CreatedAt, m.LastActivity)), m.ContextID)
	return func(txn *badger.Txn) ([]mutation, error) {
		return append([]mutation{set(k, v)}, agentIdxMutations(txn, k, idx)...), nil
	}, nil
}

// LoadAgent implements loop.AgentStore.
func (b *Badger) LoadAgent(ctx context.Context, contextID string) (loop.AgentMetadata, error) {
	if err := b.limits.checkID("context id", contextID); err != nil {
		return loop.AgentMetadata{}, fmt.Errorf("load agent: %w", err)
	}
	k := agentKey(contextID)
	var m loop.AgentMetadata
	err := b.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return &loop.NotFoundError{What: "agent", ID: contextID}
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			m, err = decodeAgent(k, v)
			return err
		})
	})
	if err != nil {
		return loop.AgentMetadata{}, fmt.Errorf("load agent: %w", err)
	}
	return m, nil
}

// DeleteAgent implements loop.AgentStore.
func (b *Badger) DeleteAgent(ctx context.Context, contextID string) error {
	if err := b.limits.checkID("context id", contextID); err != nil {
		return fmt.Errorf("delete agent: %w", err)
	}
	k := agentKey(contextID)
	err := b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		return append([]mutation{del(k)}, agentIdxMutations(txn, k, nil)...), nil
	}})
	if err != nil {
		return fmt.Errorf("delete agent %q: %w", contextID, err)
	}
	return nil
}

// KVGet implements KV.
func (b *Badger) KVGet(ctx context.Context, namespace, key string) ([]byte, error) {
	if err := b.limits.checkKV(namespace, key, nil, false); err != nil {
		return nil, fmt.Errorf("kv get: %w", err)
	}
	var v []byte
	err := b.view(ctx, func(txn *badger.Txn) error {
		var ok bool
		var err error
		v, ok, err = getValue(txn, kvKey(namespace, key))
		if err == nil && !ok {
			err = &loop.NotFoundError{What: "kv key", ID: namespace + "/" + key}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kv get: %w", err)
	}
	return v, nil
}

// KVSet implements KV.
func (b *Badger) KVSet(ctx context.Context, namespace, key string, value []byte) error {
	if err := b.limits.checkKV(namespace, key, value, true); err != nil {
		return fmt.Errorf("kv set: %w", err)
	}
	k, v := kvKey(namespace, key), append([]byte{}, value...)
	err := b.write(ctx, &writeOp{apply: func(*badger.Txn) ([]mutation, error) {
		return []mutation{set(k, v)}, nil
	}})
	if err != nil {
		return fmt.Errorf("kv set %s/%s: %w", namespace, key, err)
	}
	return nil
}

// KVSetQueued is KVSet for a record written again and again (counters):
// the write is queued to ride with the next batch of the store's writes,
// whoever submits it, so that it costs no sync of its own, and
// KVSetQueued returns at once. wait returns once the write is durable (or
// refused). Writes queued one after the other are applied in that order;
// one queued before another write is submitted is durable no later than
// that write.
func (b *Badger) KVSetQueued(namespace, key string, value []byte) (wait func() error) {
	if err := b.limits.checkKV(namespace, key, value, true); err != nil {
		return func() error { return fmt.Errorf("kv set: %w", err) }
	}
	k, v := kvKey(namespace, key), append([]byte{}, value...)
	op := &writeOp{apply: func(*badger.Txn) ([]mutation, error) {
		return []mutation{set(k, v)}, nil
	}}
	if err := b.queueLater(op); err != nil {
		return func() error { return fmt.Errorf("kv set %s/%s: %w", namespace, key, err) }
	}
	return func() error {
		if err := <-op.res; err != nil {
			return fmt.Errorf("kv set %s/%s: %w", namespace, key, err)
		}
		return nil
	}
}

// KVDelete implements KV.
func (b *Badger) KVDelete(ctx context.Context, namespace, key string) error {
	if err := b.limits.checkKV(namespace, key, nil, false); err != nil {
		return fmt.Errorf("kv delete: %w", err)
	}
	k := kvKey(namespace, key)
	err := b.write(ctx, &writeOp{apply: func(*badger.Txn) ([]mutation, error) {
		return []mutation{del(k)}, nil
	}})
	if err != nil {
		return fmt.Errorf("kv delete %s/%s: %w", namespace, key, err)
	}
	return nil
}
