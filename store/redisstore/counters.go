package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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
	return s.addCounters(ctx, namespace, key, nil, deltas)
}

// addCounters is AddCounters and, with ids, AddCountersSettling: the
// holds of ids go in the same transaction as the addition.
func (s *Store) addCounters(ctx context.Context, namespace, key string, ids []string, deltas map[string]int64) (map[string]int64, error) {
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
	if len(ids) > 0 {
		pipe.HDel(ctx, s.heldKey(namespace, key), ids...)
	}
	all := pipe.HGetAll(ctx, k)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, wrap("add counters", err)
	}
	return parseCounters(k, all.Val())
}

// ReserveCounter adds n to counter name of (namespace, key) unless that
// would take it past limit: the check and the addition are one step on the
// server (a script), so callers reserving at once on any number of hosts
// never pass the limit together, and a refused caller changes nothing. It
// returns every counter of (namespace, key) after it, and whether n was
// added.
func (s *Store) ReserveCounter(ctx context.Context, namespace, key, name string, n, limit int64) (map[string]int64, bool, error) {
	if err := s.checkKV(namespace, key, nil, false); err != nil {
		return nil, false, fmt.Errorf("reserve counter: %w", err)
	}
	if err := ctxErr(ctx, "reserve counter"); err != nil {
		return nil, false, err
	}
	k := s.cntKey(namespace, key)
	res, err := reserveCounterScript.Run(ctx, s.rdb, []string{k}, name, n, limit).Slice()
	if err != nil {
		return nil, false, wrap("reserve counter", err)
	}
	if len(res) != 2 {
		return nil, false, corrupt(k, fmt.Errorf("reserve counter: %d results", len(res)))
	}
	ok, _ := res[0].(int64)
	totals, err := parseFlatCounters(k, res[1])
	return totals, ok == 1, err
}

// reserveCounterScript: KEYS[1] the hash, ARGV name, n, limit.
var reserveCounterScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local n, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local ok = 0
if cur + n <= limit then
  redis.call('HINCRBY', KEYS[1], ARGV[1], n)
  ok = 1
end
return {ok, redis.call('HGETALL', KEYS[1])}
`)

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

// heldKey is the hash of the holds on the counters of (namespace, key):
// field the holder's id, value "amount:expiry" (unix ms).
func (s *Store) heldKey(ns, key string) string {
	return s.p + "cntheld:" + strconv.Itoa(len(ns)) + ":" + ns + ":" + key
}

// ReserveHeld holds n under id (replacing what id held) while counter name
// of (namespace, key) plus every hold on it is below limit: the check and
// the hold are one step on the server (a script), so holders on any number
// of hosts never pass the limit together. A hold not dropped within ttl
// lapses: the host that took it died. It returns the counter, what the
// others hold, and whether n is held.
func (s *Store) ReserveHeld(ctx context.Context, namespace, key, id, name string, n, limit int64, ttl time.Duration) (cur, held int64, ok bool, err error) {
	if err := s.checkKV(namespace, key, nil, false); err != nil {
		return 0, 0, false, fmt.Errorf("reserve held: %w", err)
	}
	if err := ctxErr(ctx, "reserve held"); err != nil {
		return 0, 0, false, err
	}
	if ttl <= 0 {
		ttl = time.Minute
	}
	res, err := reserveHeldScript.Run(ctx, s.rdb, []string{s.cntKey(namespace, key), s.heldKey(namespace, key)},
		id, name, n, limit, ttl.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, 0, false, wrap("reserve held", err)
	}
	if len(res) != 3 {
		return 0, 0, false, corrupt(s.heldKey(namespace, key), fmt.Errorf("reserve held: %d results", len(res)))
	}
	return res[1], res[2], res[0] == 1, nil
}

// reserveHeldScript: KEYS[1] the counters, KEYS[2] the holds; ARGV id,
// name, n, limit, ttl (ms). Lapsed holds are dropped on the way.
var reserveHeldScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local amount, expiry = string.match(all[i+1], '^(%d+):(%d+)$')
  if amount == nil or tonumber(expiry) <= now then
    redis.call('HDEL', KEYS[2], all[i])
  elseif all[i] ~= ARGV[1] then
    held = held + tonumber(amount)
  end
end
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[2]) or '0')
local ok = 0
if cur + held < tonumber(ARGV[4]) then
  local ttl = tonumber(ARGV[5])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. ':' .. (now + ttl))
  local left = redis.call('PTTL', KEYS[2])
  if left < ttl then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  ok = 1
else
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return {ok, cur, held}
`)

// AddCountersSettling is AddCounters that drops the holds of ids
// (ReserveHeld) in the same transaction.
func (s *Store) AddCountersSettling(ctx context.Context, namespace, key string, ids []string, deltas map[string]int64) (map[string]int64, error) {
	return s.addCounters(ctx, namespace, key, ids, deltas)
}

// CountersHeld returns the counters of (namespace, key) and the total of
// the holds on them (ReserveHeld) that have not lapsed, read in one step
// on the server (a script, which drops no hold: lapsed ones are skipped).
func (s *Store) CountersHeld(ctx context.Context, namespace, key string) (map[string]int64, int64, error) {
	if err := s.checkKV(namespace, key, nil, false); err != nil {
		return nil, 0, fmt.Errorf("counters: %w", err)
	}
	if err := ctxErr(ctx, "counters"); err != nil {
		return nil, 0, err
	}
	k := s.cntKey(namespace, key)
	res, err := countersHeldScript.Run(ctx, s.rdb, []string{k, s.heldKey(namespace, key)}).Slice()
	if err != nil {
		return nil, 0, wrap("counters", err)
	}
	if len(res) != 2 {
		return nil, 0, corrupt(k, fmt.Errorf("counters: %d results", len(res)))
	}
	held, _ := res[0].(int64)
	totals, err := parseFlatCounters(k, res[1])
	return totals, held, err
}

// countersHeldScript: KEYS[1] the counters, KEYS[2] the holds. It returns
// the total held by holds not lapsed, then the counters.
var countersHeldScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local amount, expiry = string.match(all[i+1], '^(%d+):(%d+)$')
  if amount ~= nil and tonumber(expiry) > now then
    held = held + tonumber(amount)
  end
end
return {held, redis.call('HGETALL', KEYS[1])}
`)

// parseFlatCounters reads counters a script answered as HGETALL does: a
// flat list of names and values.
func parseFlatCounters(k string, reply any) (map[string]int64, error) {
	flat, _ := reply.([]any)
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		f, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		m[f] = v
	}
	return parseCounters(k, m)
}
