package redisstore

import (
	"context"
	"fmt"
	"strconv"
)

// Counters are integers kept in one hash per (namespace, key), added to
// atomically on the server: the usage of a principal counted by every
// host of a service.
func (s *Store) cntKey(ns, key string) string {
	return s.p + "cnt:" + strconv.Itoa(len(ns)) + ":" + ns + ":" + key
}

// AddCounters adds deltas to the counters of (namespace, key) in one
// transaction and returns every counter of it after the addition.
func (s *Store) AddCounters(ctx context.Context, namespace, key string, deltas map[string]int64) (map[string]int64, error) {
	if err := s.checkKV(namespace, key, nil, false); err != nil {
		return nil, fmt.Errorf("add counters: %w", err)
	}
	if err := ctxErr(ctx, "add counters"); err != nil {
		return nil, err
	}
	k := s.cntKey(namespace, key)
	pipe := s.rdb.TxPipeline()
	for name, d := range deltas {
		if d != 0 {
			pipe.HIncrBy(ctx, k, name, d)
		}
	}
	all := pipe.HGetAll(ctx, k)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, wrap("add counters", err)
	}
	return parseCounters(k, all.Val())
}

// Counters returns the counters of (namespace, key); none: an empty map.
func (s *Store) Counters(ctx context.Context, namespace, key string) (map[string]int64, error) {
	if err := s.checkKV(namespace, key, nil, false); err != nil {
		return nil, fmt.Errorf("counters: %w", err)
	}
	if err := ctxErr(ctx, "counters"); err != nil {
		return nil, err
	}
	k := s.cntKey(namespace, key)
	m, err := s.rdb.HGetAll(ctx, k).Result()
	if err != nil {
		return nil, wrap("counters", err)
	}
	return parseCounters(k, m)
}

func parseCounters(k string, m map[string]string) (map[string]int64, error) {
	out := make(map[string]int64, len(m))
	for name, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, corrupt(k, err)
		}
		out[name] = n
	}
	return out, nil
}
