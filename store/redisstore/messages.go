package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/loop"
)

// encodeMessages checks and encodes a batch; a message without a role
// refuses the whole batch.
func encodeMessages(op string, msgs []loop.Message) ([]any, error) {
	vals := make([]any, len(msgs))
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

// Append implements loop.MessageStore: one RPUSH, atomic on the server.
func (s *Store) Append(ctx context.Context, contextID string, msgs ...loop.Message) error {
	if err := s.checkID("context id", contextID); err != nil {
		return fmt.Errorf("append messages: %w", err)
	}
	vals, err := encodeMessages("append messages", msgs)
	if err != nil {
		return err
	}
	if err := ctxErr(ctx, "append messages"); err != nil {
		return err
	}
	if len(vals) == 0 {
		return nil
	}
	return wrap("append messages to "+fmt.Sprintf("%q", contextID), s.rdb.RPush(ctx, s.msgKey(contextID), vals...).Err())
}

// Recent implements loop.MessageStore.
func (s *Store) Recent(ctx context.Context, contextID string, limit int) ([]loop.Message, error) {
	if err := s.checkID("context id", contextID); err != nil {
		return nil, fmt.Errorf("recent messages: %w", err)
	}
	if err := ctxErr(ctx, "recent messages"); err != nil {
		return nil, err
	}
	start := int64(0)
	if limit > 0 {
		start = -int64(limit)
	}
	key := s.msgKey(contextID)
	vals, err := s.rdb.LRange(ctx, key, start, -1).Result()
	if err != nil {
		return nil, wrap("recent messages", err)
	}
	out := make([]loop.Message, 0, len(vals))
	for i, v := range vals {
		var m loop.Message
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return nil, corrupt(fmt.Sprintf("%s[%d]", key, i), err)
		}
		if m.Role == "" {
			return nil, corrupt(fmt.Sprintf("%s[%d]", key, i), fmt.Errorf("message has no role"))
		}
		out = append(out, m)
	}
	return out, nil
}

// Count implements loop.MessageStore.
func (s *Store) Count(ctx context.Context, contextID string) (int, error) {
	if err := s.checkID("context id", contextID); err != nil {
		return 0, fmt.Errorf("count messages: %w", err)
	}
	if err := ctxErr(ctx, "count messages"); err != nil {
		return 0, err
	}
	n, err := s.rdb.LLen(ctx, s.msgKey(contextID)).Result()
	return int(n), wrap("count messages", err)
}

// Replace implements loop.MessageStore: DEL and RPUSH in one transaction.
func (s *Store) Replace(ctx context.Context, contextID string, msgs []loop.Message) error {
	if err := s.checkID("context id", contextID); err != nil {
		return fmt.Errorf("replace messages: %w", err)
	}
	vals, err := encodeMessages("replace messages", msgs)
	if err != nil {
		return err
	}
	if err := ctxErr(ctx, "replace messages"); err != nil {
		return err
	}
	key := s.msgKey(contextID)
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		if len(vals) > 0 {
			p.RPush(ctx, key, vals...)
		}
		return nil
	})
	return wrap("replace messages", err)
}

// Delete implements loop.MessageStore.
func (s *Store) Delete(ctx context.Context, contextID string) error {
	if err := s.checkID("context id", contextID); err != nil {
		return fmt.Errorf("delete messages: %w", err)
	}
	if err := ctxErr(ctx, "delete messages"); err != nil {
		return err
	}
	return wrap("delete messages", s.rdb.Del(ctx, s.msgKey(contextID)).Err())
}

// SaveAgent implements loop.AgentStore.
func (s *Store) SaveAgent(ctx context.Context, m loop.AgentMetadata) error {
	v, err := s.encodeAgent(&m)
	if err != nil {
		return err
	}
	if err := ctxErr(ctx, "save agent"); err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.agentKey(m.ContextID), v, 0)
		p.ZAdd(ctx, s.convIdxKey(), redis.Z{Score: convScore(&m), Member: m.ContextID})
		return nil
	})
	return wrap("save agent", err)
}

// convScore is the score of m's entry in the index by last activity: the
// later of its creation and last activity, in Unix milliseconds.
func convScore(m *loop.AgentMetadata) float64 {
	last := m.LastActivity
	if m.CreatedAt.After(last) {
		last = m.CreatedAt
	}
	return float64(last.UnixMilli())
}

func (s *Store) encodeAgent(m *loop.AgentMetadata) ([]byte, error) {
	if err := s.checkID("context id", m.ContextID); err != nil {
		return nil, fmt.Errorf("save agent: %w", err)
	}
	v, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("save agent: %w", err)
	}
	return v, nil
}

// LoadAgent implements loop.AgentStore.
func (s *Store) LoadAgent(ctx context.Context, contextID string) (loop.AgentMetadata, error) {
	if err := s.checkID("context id", contextID); err != nil {
		return loop.AgentMetadata{}, fmt.Errorf("load agent: %w", err)
	}
	if err := ctxErr(ctx, "load agent"); err != nil {
		return loop.AgentMetadata{}, err
	}
	key := s.agentKey(contextID)
	v, err := s.rdb.Get(ctx, key).Bytes()
	if isNil(err) {
		return loop.AgentMetadata{}, &loop.NotFoundError{What: "agent", ID: contextID}
	}
	if err != nil {
		return loop.AgentMetadata{}, wrap("load agent", err)
	}
	var m loop.AgentMetadata
	if err := json.Unmarshal(v, &m); err != nil {
		return loop.AgentMetadata{}, corrupt(key, err)
	}
	return m, nil
}

// DeleteAgent implements loop.AgentStore.
func (s *Store) DeleteAgent(ctx context.Context, contextID string) error {
	if err := s.checkID("context id", contextID); err != nil {
		return fmt.Errorf("delete agent: %w", err)
	}
	if err := ctxErr(ctx, "delete agent"); err != nil {
		return err
	}
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.agentKey(contextID))
		p.ZRem(ctx, s.convIdxKey(), contextID)
		return nil
	})
	return wrap("delete agent", err)
}

// --- the key-value space (plugins' KV, usage counters) ---

func (s *Store) checkKV(ns, key string, value []byte, set bool) error {
	if err := s.checkID("kv namespace", ns); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%w: kv key is empty", loop.ErrInvalid)
	}
	if len(key) > s.limits.MaxKVKeySize {
		return fmt.Errorf("%w: kv key is %d bytes, the limit is %d", loop.ErrInvalid, len(key), s.limits.MaxKVKeySize)
	}
	if set && len(value) > s.limits.MaxKVValueSize {
		return fmt.Errorf("%w: kv value is %d bytes, the limit is %d", loop.ErrInvalid, len(value), s.limits.MaxKVValueSize)
	}
	return nil
}

// KVGet returns the value of key, or an error matching loop.ErrNotFound.
func (s *Store) KVGet(ctx context.Context, namespace, key string) ([]byte, error) {
	if err := s.checkKV(namespace, key, nil, false); err != nil {
		return nil, fmt.Errorf("kv get: %w", err)
	}
	if err := ctxErr(ctx, "kv get"); err != nil {
		return nil, err
	}
	v, err := s.rdb.Get(ctx, s.kvKey(namespace, key)).Bytes()
	if isNil(err) {
		return nil, &loop.NotFoundError{What: "kv key", ID: namespace + "/" + key}
	}
	return v, wrap("kv get", err)
}

// KVSet stores value under key, durably when it returns.
func (s *Store) KVSet(ctx context.Context, namespace, key string, value []byte) error {
	if err := s.checkKV(namespace, key, value, true); err != nil {
		return fmt.Errorf("kv set: %w", err)
	}
	if err := ctxErr(ctx, "kv set"); err != nil {
		return err
	}
	_, err := s.kvSet(ctx, namespace, key, value, -1, -1)
	return wrap("kv set", err)
}

// kvSet stores value under key and keeps the namespace's usage (keys,
// value bytes) with it, in one script; with maxKeys >= 0 it first checks
// the write leaves the namespace within maxKeys and maxBytes, and answers
// "keys" or "bytes" (nothing written) when it would not.
func (s *Store) kvSet(ctx context.Context, namespace, key string, value []byte, maxKeys, maxBytes int64) (string, error) {
	if value == nil {
		value = []byte{}
	}
	return kvSetScript.Run(ctx, s.rdb, nil, s.kvKey(namespace, key), s.kvUsageKey(namespace), value,
		strconv.FormatInt(maxKeys, 10), strconv.FormatInt(maxBytes, 10)).Text()
}

// KVSetWithin stores value under key unless the namespace would then hold
// more than maxKeys keys or maxBytes bytes of values; the check and the
// write are one atomic step on the server, so a quota holds for every
// host writing to the namespace. over is "keys" or "bytes" when the write
// was refused, "" when it was made.
func (s *Store) KVSetWithin(ctx context.Context, namespace, key string, value []byte, maxKeys, maxBytes int64) (over string, err error) {
	if err := s.checkKV(namespace, key, value, true); err != nil {
		return "", fmt.Errorf("kv set: %w", err)
	}
	if err := ctxErr(ctx, "kv set"); err != nil {
		return "", err
	}
	over, err = s.kvSet(ctx, namespace, key, value, max(maxKeys, 0), max(maxBytes, 0))
	return over, wrap("kv set", err)
}

// KVUsage reports the keys and value bytes a namespace holds (kept by
// every write, not counted).
func (s *Store) KVUsage(ctx context.Context, namespace string) (keys, bytes int64, err error) {
	if err := ctxErr(ctx, "kv usage"); err != nil {
		return 0, 0, err
	}
	k := s.kvUsageKey(namespace)
	v, err := s.rdb.HMGet(ctx, k, "k", "b").Result()
	if err != nil {
		return 0, 0, wrap("kv usage", err)
	}
	var out [2]int64
	for i, x := range v {
		if x == nil {
			continue
		}
		str, _ := x.(string)
		if out[i], err = strconv.ParseInt(str, 10, 64); err != nil {
			return 0, 0, corrupt(k, err)
		}
	}
	return out[0], out[1], nil
}

// KVDelete removes key; removing an absent key is not an error.
func (s *Store) KVDelete(ctx context.Context, namespace, key string) error {
	if err := s.checkKV(namespace, key, nil, false); err != nil {
		return fmt.Errorf("kv delete: %w", err)
	}
	if err := ctxErr(ctx, "kv delete"); err != nil {
		return err
	}
	return wrap("kv delete", kvDeleteScript.Run(ctx, s.rdb, nil, s.kvKey(namespace, key), s.kvUsageKey(namespace)).Err())
}
