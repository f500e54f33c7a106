package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/loop"
)

// SaveCheckpoint implements loop.CheckpointStore.
func (s *Store) SaveCheckpoint(ctx context.Context, cp loop.Checkpoint) error {
	if err := s.checkID("checkpoint task id", cp.TaskID); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	v, err := json.Marshal(&cp)
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if err := ctxErr(ctx, "save checkpoint"); err != nil {
		return err
	}
	return wrap("save checkpoint", saveCheckpointScript.Run(ctx, s.rdb, nil, s.p, cp.TaskID, v).Err())
}

// LoadCheckpoint implements loop.CheckpointStore.
func (s *Store) LoadCheckpoint(ctx context.Context, taskID string) (loop.Checkpoint, error) {
	if err := s.checkID("checkpoint task id", taskID); err != nil {
		return loop.Checkpoint{}, fmt.Errorf("load checkpoint: %w", err)
	}
	if err := ctxErr(ctx, "load checkpoint"); err != nil {
		return loop.Checkpoint{}, err
	}
	key := s.ckptKey(taskID)
	v, err := s.rdb.Get(ctx, key).Bytes()
	if isNil(err) {
		return loop.Checkpoint{}, &loop.NotFoundError{What: "checkpoint", ID: taskID}
	}
	if err != nil {
		return loop.Checkpoint{}, wrap("load checkpoint", err)
	}
	var cp loop.Checkpoint
	if err := json.Unmarshal(v, &cp); err != nil {
		return loop.Checkpoint{}, corrupt(key, err)
	}
	return cp, nil
}

// DeleteCheckpoint implements loop.CheckpointStore.
func (s *Store) DeleteCheckpoint(ctx context.Context, taskID string) error {
	if err := s.checkID("checkpoint task id", taskID); err != nil {
		return fmt.Errorf("delete checkpoint: %w", err)
	}
	if err := ctxErr(ctx, "delete checkpoint"); err != nil {
		return err
	}
	return wrap("delete checkpoint", deleteCheckpointScript.Run(ctx, s.rdb, nil, s.p, taskID).Err())
}

// callEnd is what EndCall adds to a journaled call.
type callEnd struct {
	Result  loop.ToolResult `json:"result"`
	EndedAt time.Time       `json:"endedAt"`
}

// BeginCall implements loop.Journal.
func (s *Store) BeginCall(ctx context.Context, e loop.JournalEntry) error {
	if e.TaskID == "" || e.CallID == "" {
		return fmt.Errorf("journal call: %w: empty task or call id", loop.ErrInvalid)
	}
	if err := s.checkID("task id", e.TaskID); err != nil {
		return fmt.Errorf("journal call: %w", err)
	}
	if err := s.checkID("call id", e.CallID); err != nil {
		return fmt.Errorf("journal call: %w", err)
	}
	e.State, e.Result, e.EndedAt = loop.CallStarted, nil, time.Time{}
	v, err := json.Marshal(&e)
	if err != nil {
		return fmt.Errorf("journal call: %w", err)
	}
	if err := ctxErr(ctx, "journal call"); err != nil {
		return err
	}
	return wrap("journal call", beginCallScript.Run(ctx, s.rdb, nil, s.p, e.TaskID, e.CallID, v).Err())
}

// EndCall implements loop.Journal.
func (s *Store) EndCall(ctx context.Context, taskID, callID string, res loop.ToolResult) error {
	if taskID == "" || callID == "" {
		return fmt.Errorf("end journaled call: %w: empty task or call id", loop.ErrInvalid)
	}
	v, err := json.Marshal(&callEnd{Result: res, EndedAt: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("end journaled call: %w", err)
	}
	if err := ctxErr(ctx, "end journaled call"); err != nil {
		return err
	}
	ok, err := endCallScript.Run(ctx, s.rdb, nil, s.p, taskID, callID, v).Int()
	if err != nil {
		return wrap("end journaled call", err)
	}
	if ok == 0 {
		return &loop.NotFoundError{What: "journaled call", ID: loop.IdempotencyKey(taskID, callID)}
	}
	return nil
}

// Calls implements loop.Journal.
func (s *Store) Calls(ctx context.Context, taskID string) ([]loop.JournalEntry, error) {
	if err := s.checkID("task id", taskID); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := ctxErr(ctx, "journal"); err != nil {
		return nil, err
	}
	var order *redis.StringSliceCmd
	var fields *redis.MapStringStringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		order = p.LRange(ctx, s.jordKey(taskID), 0, -1)
		fields = p.HGetAll(ctx, s.jrnlKey(taskID))
		return nil
	})
	if err != nil {
		return nil, wrap("journal", err)
	}
	key := s.jrnlKey(taskID)
	all := fields.Val()
	out := make([]loop.JournalEntry, 0, len(order.Val()))
	for _, id := range order.Val() {
		b, ok := all["b:"+id]
		if !ok {
			continue
		}
		var e loop.JournalEntry
		if err := json.Unmarshal([]byte(b), &e); err != nil {
			return nil, corrupt(key+" b:"+id, err)
		}
		if end, ok := all["e:"+id]; ok {
			var ce callEnd
			if err := json.Unmarshal([]byte(end), &ce); err != nil {
				return nil, corrupt(key+" e:"+id, err)
			}
			e.State, e.Result, e.EndedAt = loop.CallCompleted, &ce.Result, ce.EndedAt
		}
		out = append(out, e)
	}
	return out, nil
}

// DeleteCalls implements loop.Journal.
func (s *Store) DeleteCalls(ctx context.Context, taskID string) error {
	if err := s.checkID("task id", taskID); err != nil {
		return fmt.Errorf("delete journal: %w", err)
	}
	if err := ctxErr(ctx, "delete journal"); err != nil {
		return err
	}
	return wrap("delete journal", deleteCallsScript.Run(ctx, s.rdb, nil, s.p, taskID).Err())
}

// DurableTaskIDs implements loop.DurableLister.
func (s *Store) DurableTaskIDs(ctx context.Context) ([]string, error) {
	if err := ctxErr(ctx, "durable tasks"); err != nil {
		return nil, err
	}
	ids, err := s.rdb.SMembers(ctx, s.durKey()).Result()
	if err != nil {
		return nil, wrap("durable tasks", err)
	}
	slices.Sort(ids)
	return ids, nil
}

// --- leases ---

func (s *Store) checkLease(key, owner string, ttl time.Duration) error {
	if err := s.checkID("lease key", key); err != nil {
		return err
	}
	if err := s.checkID("lease owner", owner); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: lease ttl %v is not positive", loop.ErrInvalid, ttl)
	}
	return nil
}

func ttlMillis(ttl time.Duration) string {
	ms := ttl.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10)
}

func parseInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("unexpected %T", v)
}

// AcquireLease implements loop.LeaseStore. Expiry is the server's clock.
func (s *Store) AcquireLease(ctx context.Context, key, owner, data string, ttl time.Duration) (loop.Lease, error) {
	if err := s.checkLease(key, owner, ttl); err != nil {
		return loop.Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	if err := ctxErr(ctx, "acquire lease"); err != nil {
		return loop.Lease{}, err
	}
	res, err := acquireLeaseScript.Run(ctx, s.rdb, nil, s.p, key, owner, data, ttlMillis(ttl)).Slice()
	if err != nil {
		return loop.Lease{}, wrap(fmt.Sprintf("acquire lease %q", key), err)
	}
	if len(res) != 3 {
		return loop.Lease{}, fmt.Errorf("acquire lease %q: unexpected reply %v", key, res)
	}
	exp, err := parseInt(res[2])
	if err != nil {
		return loop.Lease{}, corrupt(s.leaseKey(key), err)
	}
	if ok, _ := res[0].(int64); ok == 0 {
		return loop.Lease{}, fmt.Errorf("acquire lease %q: %w (owner %q until %s)", key, loop.ErrLeaseHeld,
			res[1], time.UnixMilli(exp).UTC().Format(time.RFC3339Nano))
	}
	tok, err := parseInt(res[1])
	if err != nil {
		return loop.Lease{}, corrupt(s.leaseKey(key), err)
	}
	return loop.Lease{Key: key, Owner: owner, Token: uint64(tok), Expires: time.UnixMilli(exp).UTC(), Data: data}, nil
}

// RenewLease implements loop.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, l loop.Lease, ttl time.Duration) (loop.Lease, error) {
	if err := s.checkLease(l.Key, l.Owner, ttl); err != nil {
		return loop.Lease{}, fmt.Errorf("renew lease: %w", err)
	}
	if err := ctxErr(ctx, "renew lease"); err != nil {
		return loop.Lease{}, err
	}
	res, err := renewLeaseScript.Run(ctx, s.rdb, nil, s.p, l.Key, l.Owner, strconv.FormatUint(l.Token, 10), ttlMillis(ttl)).Slice()
	if err != nil {
		return loop.Lease{}, wrap(fmt.Sprintf("renew lease %q", l.Key), err)
	}
	if ok, _ := res[0].(int64); ok == 0 || len(res) != 3 {
		return loop.Lease{}, fmt.Errorf("renew lease %q: %w", l.Key, loop.ErrLeaseLost)
	}
	exp, err := parseInt(res[1])
	if err != nil {
		return loop.Lease{}, corrupt(s.leaseKey(l.Key), err)
	}
	l.Expires = time.UnixMilli(exp).UTC()
	l.Data, _ = res[2].(string)
	return l, nil
}

// ReleaseLease implements loop.LeaseStore.
func (s *Store) ReleaseLease(ctx context.Context, l loop.Lease) error {
	if err := s.checkID("lease key", l.Key); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	if err := ctxErr(ctx, "release lease"); err != nil {
		return err
	}
	err := releaseLeaseScript.Run(ctx, s.rdb, nil, s.p, l.Key, l.Owner, strconv.FormatUint(l.Token, 10)).Err()
	return wrap(fmt.Sprintf("release lease %q", l.Key), err)
}

// ListLeases implements loop.LeaseStore.
func (s *Store) ListLeases(ctx context.Context) ([]loop.Lease, error) {
	if err := ctxErr(ctx, "list leases"); err != nil {
		return nil, err
	}
	keys, err := s.rdb.SMembers(ctx, s.leaseSet()).Result()
	if err != nil {
		return nil, wrap("list leases", err)
	}
	slices.SortFunc(keys, strings.Compare)
	cmds := make([]*redis.SliceCmd, len(keys))
	if len(keys) > 0 {
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = p.HMGet(ctx, s.leaseKey(k), "o", "t", "e", "d")
			}
			return nil
		})
		if err != nil {
			return nil, wrap("list leases", err)
		}
	}
	out := make([]loop.Lease, 0, len(keys))
	for i, k := range keys {
		v := cmds[i].Val()
		if len(v) != 4 || v[0] == nil {
			continue // released between the two reads
		}
		tok, err1 := parseInt(v[1])
		exp, err2 := parseInt(v[2])
		if err1 != nil || err2 != nil {
			return nil, corrupt(s.leaseKey(k), fmt.Errorf("token %v, expiry %v", v[1], v[2]))
		}
		owner, _ := v[0].(string)
		data, _ := v[3].(string)
		out = append(out, loop.Lease{Key: k, Owner: owner, Token: uint64(tok), Expires: time.UnixMilli(exp).UTC(), Data: data})
	}
	return out, nil
}
