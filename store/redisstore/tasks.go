package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/loop"
)

// timeKey is t as non-negative Unix nanoseconds (the Badger store's order).
func timeKey(t time.Time) uint64 {
	if t.IsZero() || t.Before(time.Unix(0, 0)) {
		return 0
	}
	const maxNanos = 1<<63 - 1
	if t.After(time.Unix(0, maxNanos)) {
		return maxNanos
	}
	return uint64(t.UnixNano())
}

// member is a task's entry in the listing indexes: newest first is the
// reverse lexical order.
func member(t *loop.TaskRecord) string {
	return fmt.Sprintf("%019d:%s", timeKey(t.CreatedAt), t.ID)
}

func memberID(m string) string {
	if len(m) > 20 && m[19] == ':' {
		return m[20:]
	}
	return ""
}

// taskArgs checks t and returns the arguments of the save scripts after
// the prefix and id: version, data, member, context, owner, agent, expiry,
// status, updated.
func (s *Store) taskArgs(t *loop.TaskRecord) ([]any, error) {
	if err := s.checkID("task id", t.ID); err != nil {
		return nil, err
	}
	if err := s.checkID("task context id", t.ContextID); err != nil {
		return nil, err
	}
	if len(t.Owner) > s.limits.MaxIDSize || len(t.AgentID) > s.limits.MaxIDSize {
		return nil, fmt.Errorf("%w: task owner or agent id over %d bytes", loop.ErrInvalid, s.limits.MaxIDSize)
	}
	stored := *t
	stored.Version = 0
	data, err := json.Marshal(&stored)
	if err != nil {
		return nil, fmt.Errorf("encode task: %w", err)
	}
	var exp int64
	if !t.ExpiresAt.IsZero() {
		exp = t.ExpiresAt.UnixMilli()
		if exp <= 0 {
			exp = 1 // long past: gone at once
		}
	}
	return []any{strconv.FormatUint(t.Version, 10), data, member(t), t.ContextID, t.Owner, t.AgentID,
		strconv.FormatInt(exp, 10), string(t.Status), strconv.FormatUint(timeKey(t.UpdatedAt), 10)}, nil
}

// SaveTask implements loop.TaskStore: a compare-and-set on the version,
// with the listing indexes, in one script.
func (s *Store) SaveTask(ctx context.Context, t loop.TaskRecord) error {
	args, err := s.taskArgs(&t)
	if err != nil {
		return fmt.Errorf("save task: %w", err)
	}
	if err := ctxErr(ctx, "save task"); err != nil {
		return err
	}
	res, err := saveTaskScript.Run(ctx, s.rdb, nil, append([]any{s.p, t.ID}, args...)...).Int64Slice()
	if err != nil {
		return wrap(fmt.Sprintf("save task %q", t.ID), err)
	}
	if len(res) != 2 {
		return fmt.Errorf("save task %q: unexpected reply %v", t.ID, res)
	}
	if res[0] == 0 {
		return fmt.Errorf("save task %q: %w: stored version %d, written over version %d", t.ID, loop.ErrConflict, res[1], t.Version)
	}
	return nil
}

// LoadTask implements loop.TaskStore.
func (s *Store) LoadTask(ctx context.Context, id string) (loop.TaskRecord, error) {
	if err := s.checkID("task id", id); err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	if err := ctxErr(ctx, "load task"); err != nil {
		return loop.TaskRecord{}, err
	}
	vals, err := s.rdb.HMGet(ctx, s.taskKey(id), "v", "d").Result()
	if err != nil {
		return loop.TaskRecord{}, wrap("load task", err)
	}
	t, ok, err := s.decodeTask(id, vals)
	if err != nil {
		return loop.TaskRecord{}, err
	}
	if !ok {
		return loop.TaskRecord{}, &loop.NotFoundError{What: "task", ID: id}
	}
	return t, nil
}

// TaskExists implements loop.TaskPresence with EXISTS on the record's key.
func (s *Store) TaskExists(ctx context.Context, id string) (bool, error) {
	if err := s.checkID("task id", id); err != nil {
		return false, fmt.Errorf("task exists: %w", err)
	}
	n, err := s.rdb.Exists(ctx, s.taskKey(id)).Result()
	if err != nil {
		return false, wrap("task exists", err)
	}
	return n == 1, nil
}

// LoadTaskOf implements loop.TaskStore: the owner is read from the task's
// index hash first, so another owner's task is refused without fetching or
// decoding its record.
func (s *Store) LoadTaskOf(ctx context.Context, id, owner string) (loop.TaskRecord, error) {
	if err := s.checkID("task id", id); err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	if err := ctxErr(ctx, "load task"); err != nil {
		return loop.TaskRecord{}, err
	}
	o, err := s.rdb.HGet(ctx, s.identKey(id), "o").Result()
	switch {
	case err == nil && o != owner:
		return loop.TaskRecord{}, &loop.NotFoundError{What: "task", ID: id}
	case err != nil && !errors.Is(err, redis.Nil):
		return loop.TaskRecord{}, wrap("load task", err)
	}
	t, err := s.LoadTask(ctx, id)
	if err == nil && t.Owner != owner {
		return loop.TaskRecord{}, &loop.NotFoundError{What: "task", ID: id}
	}
	return t, err
}

// decodeTask decodes the reply of HMGET v d (ok false: no record). A
// record past its ExpiresAt is gone even before Redis removes it.
func (s *Store) decodeTask(id string, vals []any) (loop.TaskRecord, bool, error) {
	if len(vals) != 2 || vals[0] == nil || vals[1] == nil {
		return loop.TaskRecord{}, false, nil
	}
	key := s.taskKey(id)
	vs, _ := vals[0].(string)
	ver, err := strconv.ParseUint(vs, 10, 64)
	if err != nil {
		return loop.TaskRecord{}, false, corrupt(key, fmt.Errorf("version %q: %w", vs, err))
	}
	ds, _ := vals[1].(string)
	var t loop.TaskRecord
	if err := json.Unmarshal([]byte(ds), &t); err != nil {
		return loop.TaskRecord{}, false, corrupt(key, err)
	}
	if t.ID != id {
		return loop.TaskRecord{}, false, corrupt(key, fmt.Errorf("record of task %q", t.ID))
	}
	if !t.ExpiresAt.IsZero() && !time.Now().Before(t.ExpiresAt) {
		return loop.TaskRecord{}, false, nil
	}
	t.Version = ver
	return t, true, nil
}

// ListTasks implements loop.TaskStore: it walks the most selective index
// newest first, in pages, and loads the records of each page in one
// pipeline.
func (s *Store) ListTasks(ctx context.Context, f loop.TaskFilter) ([]loop.TaskRecord, error) {
	if err := ctxErr(ctx, "list tasks"); err != nil {
		return nil, err
	}
	var idx string
	switch {
	case f.ContextID != "":
		idx = s.p + "ti:c:" + f.ContextID
	case f.Owner != "":
		idx = s.p + "ti:o:" + f.Owner
	case f.AgentID != "":
		idx = s.p + "ti:g:" + f.AgentID
	default:
		idx = s.p + "ti:all"
	}
	max := "+"
	if f.After != "" {
		m, err := s.pagePlace(ctx, f.After)
		if err != nil {
			return nil, err
		}
		max = "(" + m
	}
	page := int64(100)
	if f.Limit > 0 && f.Limit < 100 {
		page = int64(f.Limit)
	}
	out := []loop.TaskRecord{}
	for {
		members, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: idx, Start: max, Stop: "-", ByLex: true, Rev: true, Count: page}).Result()
		if err != nil {
			return nil, wrap("list tasks", err)
		}
		if len(members) == 0 {
			return out, nil
		}
		cmds := make([]*redis.SliceCmd, len(members))
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, m := range members {
				cmds[i] = p.HMGet(ctx, s.taskKey(memberID(m)), "v", "d")
			}
			return nil
		})
		if err != nil {
			return nil, wrap("list tasks", err)
		}
		for i, m := range members {
			id := memberID(m)
			t, ok, err := s.decodeTask(id, cmds[i].Val())
			if errors.Is(err, loop.ErrCorrupt) {
				// A record that does not decode is listed as broken, from
				// its index entry: the other tasks stay listed.
				s.log.Error("task record does not decode; listed as broken", "task", id, "err", err)
				t, ok, err = s.brokenTask(ctx, id, m, err)
				if err != nil {
					return nil, err
				}
				if ok && brokenMatch(&t, &f) {
					out = append(out, t)
					if f.Limit > 0 && len(out) == f.Limit {
						return out, nil
					}
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			if !ok {
				// Expired: its index entries go now.
				if err := dropIndexScript.Run(ctx, s.rdb, nil, s.p, id, m).Err(); err != nil {
					s.log.Warn("drop index entries of an expired task", "task", id, "err", err)
				}
				continue
			}
			// An entry left by an earlier version of the record no longer
			// matches it.
			if member(&t) != m || !match(&t, &f) {
				continue
			}
			out = append(out, t)
			if f.Limit > 0 && len(out) == f.Limit {
				return out, nil
			}
		}
		if int64(len(members)) < page {
			return out, nil
		}
		max = "(" + members[len(members)-1]
	}
}

// pagePlace returns the listing member of the task a page token names.
// The token may name a task whose record does not decode (a page can end
// with one): its place is read from its index entry.
func (s *Store) pagePlace(ctx context.Context, id string) (string, error) {
	t, err := s.LoadTask(ctx, id)
	switch {
	case err == nil:
		return member(&t), nil
	case errors.Is(err, loop.ErrNotFound):
		return "", fmt.Errorf("list tasks: %w: page token: task %q not found", loop.ErrInvalid, id)
	case errors.Is(err, loop.ErrCorrupt):
		m, merr := s.rdb.HGet(ctx, s.identKey(id), "m").Result()
		if merr == nil && memberID(m) == id {
			return m, nil
		}
		if merr != nil && !isNil(merr) {
			return "", wrap("list tasks", merr)
		}
	}
	return "", fmt.Errorf("list tasks: %w", err)
}

// brokenTask stands for the task id, listed under member m, whose record
// does not decode (err): what its index entry knows (context, owner,
// agent, status, update time), metadata.broken, and why in its message.
// ok is false when the entry m is not the task's current one. A task
// saved before its index entry kept the status has none (see brokenMatch).
func (s *Store) brokenTask(ctx context.Context, id, m string, err error) (loop.TaskRecord, bool, error) {
	x, herr := s.rdb.HMGet(ctx, s.identKey(id), "m", "c", "o", "g", "s", "u").Result()
	if herr != nil {
		return loop.TaskRecord{}, false, wrap("list tasks", herr)
	}
	str := func(i int) string { v, _ := x[i].(string); return v }
	if cur := str(0); cur != "" && cur != m {
		return loop.TaskRecord{}, false, nil
	}
	created, _ := strconv.ParseUint(m[:19], 10, 64)
	updated, _ := strconv.ParseUint(str(5), 10, 64)
	return loop.TaskRecord{ID: id, ContextID: str(1), Owner: str(2), AgentID: str(3), Status: loop.TaskStatus(str(4)),
		Message:   "the task's record does not decode: " + err.Error(),
		CreatedAt: time.Unix(0, int64(created)), UpdatedAt: time.Unix(0, int64(updated)),
		Metadata: map[string]any{"broken": true}, Broken: true}, true, nil
}

// brokenMatch is match for a broken task. One whose status is unknown
// (saved before the index entry kept it) matches any status: recovery,
// which lists the tasks still working, must meet it to settle it.
func brokenMatch(t *loop.TaskRecord, f *loop.TaskFilter) bool {
	if t.Status == "" && len(f.Statuses) > 0 {
		g := *f
		g.Statuses = nil
		return match(t, &g)
	}
	return match(t, f)
}

func match(t *loop.TaskRecord, f *loop.TaskFilter) bool {
	switch {
	case f.ContextID != "" && t.ContextID != f.ContextID,
		f.Owner != "" && t.Owner != f.Owner,
		f.AgentID != "" && t.AgentID != f.AgentID,
		len(f.Statuses) > 0 && !slices.Contains(f.Statuses, t.Status),
		!f.UpdatedAfter.IsZero() && !t.UpdatedAt.After(f.UpdatedAfter),
		!f.UpdatedBefore.IsZero() && !t.UpdatedAt.Before(f.UpdatedBefore):
		return false
	}
	return true
}

// DeleteTask implements loop.TaskStore.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	if err := s.checkID("task id", id); err != nil {
		return fmt.Errorf("delete task: %w", err)
	}
	if err := ctxErr(ctx, "delete task"); err != nil {
		return err
	}
	return wrap(fmt.Sprintf("delete task %q", id), deleteTaskScript.Run(ctx, s.rdb, nil, s.p, id).Err())
}

// sweepEvery removes the index entries of expired tasks, which Redis
// cannot remove with the records.
func (s *Store) sweepEvery(ctx context.Context, every time.Duration) {
	defer close(s.swept)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("sweep of expired task index entries", "err", err)
		} else if n > 0 {
			s.log.Debug("swept expired task index entries", "tasks", n)
		}
	}
}

// Sweep removes the index entries of every task whose record expired and
// returns how many tasks it cleaned.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	idx := s.p + "ti:all"
	max, n := "+", 0
	for {
		members, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: idx, Start: max, Stop: "-", ByLex: true, Rev: true, Count: 500}).Result()
		if err != nil {
			return n, wrap("sweep tasks", err)
		}
		if len(members) == 0 {
			return n, nil
		}
		cmds := make([]*redis.IntCmd, len(members))
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, m := range members {
				cmds[i] = p.Exists(ctx, s.taskKey(memberID(m)))
			}
			return nil
		})
		if err != nil {
			return n, wrap("sweep tasks", err)
		}
		for i, m := range members {
			if cmds[i].Val() == 0 {
				if err := dropIndexScript.Run(ctx, s.rdb, nil, s.p, memberID(m), m).Err(); err != nil {
					return n, wrap("sweep tasks", err)
				}
				n++
			}
		}
		if len(members) < 500 {
			return n, nil
		}
		max = "(" + members[len(members)-1]
	}
}

// CommitTurn implements loop.TurnCommitter: the lease fence, the task's
// version check and every write in one script, so a crash (of the host or
// of Redis) leaves all of the turn or none of it.
func (s *Store) CommitTurn(ctx context.Context, c loop.TurnCommit) error {
	op := fmt.Sprintf("commit turn of %q", c.ContextID)
	args, err := s.commitArgs(op, c, 0)
	if err != nil {
		return err
	}
	if err := ctxErr(ctx, op); err != nil {
		return err
	}
	res, err := commitTurnScript.Run(ctx, s.rdb, nil, args...).Slice()
	if err != nil {
		return wrap(op, err)
	}
	return commitResult(op, c, res)
}

// commitArgs returns commit_turn's arguments for c (see commitTurnLua),
// after room reserved ahead of them in the slice.
func (s *Store) commitArgs(op string, c loop.TurnCommit, room int) ([]any, error) {
	agent, err := s.encodeAgent(&c.Agent)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(c.Messages) > 0 {
		if err := s.checkID("context id", c.ContextID); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
	msgs, err := encodeMessages(op, c.Messages)
	if err != nil {
		return nil, err
	}
	args := make([]any, room, room+19+len(msgs))
	args = append(args, s.p, c.ContextID, c.Agent.ContextID, agent)
	if c.Lease != nil {
		args = append(args, c.Lease.Key, c.Lease.Owner, strconv.FormatUint(c.Lease.Token, 10))
	} else {
		args = append(args, "", "", "")
	}
	if c.Task != nil {
		ta, err := s.taskArgs(c.Task)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		args = append(args, c.Task.ID)
		args = append(args, ta...)
	} else {
		args = append(args, "", "", "", "", "", "", "", "", "", "")
	}
	args = append(args, c.DeleteCheckpoint, strconv.FormatFloat(convScore(&c.Agent), 'f', -1, 64))
	return append(args, msgs...), nil
}

// commitResult reads commit_turn's answer: nil, or why c was refused.
func commitResult(op string, c loop.TurnCommit, res []any) error {
	status, _ := res[0].(string)
	switch status {
	case "OK":
		return nil
	case "LOST":
		return fmt.Errorf("%s: lease %q: %w", op, c.Lease.Key, loop.ErrLeaseLost)
	case "CONFLICT":
		return fmt.Errorf("%s: task %q: %w: stored version %v, written over version %d", op, c.Task.ID, loop.ErrConflict, res[1], c.Task.Version)
	}
	return fmt.Errorf("%s: unexpected reply %v", op, res)
}
