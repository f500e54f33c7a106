package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

var (
	_ loop.LeaseStore = (*Badger)(nil)
	_ loop.LeaseStore = (*Memory)(nil)
)

// pfxLease is the key space of leases: lease/<key> holds a loop.Lease
// (JSON). Leases carry no Badger TTL: a lapsed lease stays until it is
// released or taken over, so that a host starting up finds the work that
// was under way.
const pfxLease = "lease/"

func leaseKey(key string) []byte { return []byte(pfxLease + escape(key)) }

// leaseDecide is the rule every backend applies: it returns the lease to
// store for an acquisition (or renewal, renew true) by owner of key, given
// the stored one (nil: none), or the error to return.
func leaseDecide(cur *loop.Lease, key, owner, data string, ttl time.Duration, now time.Time, renew *loop.Lease) (loop.Lease, error) {
	if renew != nil {
		if cur == nil || cur.Owner != renew.Owner || cur.Token != renew.Token {
			return loop.Lease{}, fmt.Errorf("renew lease %q: %w", key, loop.ErrLeaseLost)
		}
		next := *cur
		next.Expires = now.Add(ttl)
		return next, nil
	}
	switch {
	case cur == nil:
		return loop.Lease{Key: key, Owner: owner, Token: 1, Expires: now.Add(ttl), Data: data}, nil
	case cur.Owner == owner:
		// Its holder again (a restarted host, or the next turn of a task
		// whose last turn is still letting go of it): a new token, so that
		// what the earlier acquisition holds can neither commit nor
		// release the lease any more.
		return loop.Lease{Key: key, Owner: owner, Token: cur.Token + 1, Expires: now.Add(ttl), Data: data}, nil
	case now.Before(cur.Expires):
		return loop.Lease{}, fmt.Errorf("acquire lease %q: %w (owner %q until %s)", key, loop.ErrLeaseHeld,
			cur.Owner, cur.Expires.UTC().Format(time.RFC3339Nano))
	default:
		return loop.Lease{Key: key, Owner: owner, Token: cur.Token + 1, Expires: now.Add(ttl), Data: data}, nil
	}
}

func checkLease(l Limits, key, owner string, ttl time.Duration) error {
	if err := l.checkID("lease key", key); err != nil {
		return err
	}
	if err := l.checkID("lease owner", owner); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: lease ttl %v is not positive", loop.ErrInvalid, ttl)
	}
	return nil
}

func getLease(txn *badger.Txn, key string) (*loop.Lease, error) {
	v, ok, err := getValue(txn, leaseKey(key))
	if err != nil || !ok {
		return nil, err
	}
	var l loop.Lease
	if err := json.Unmarshal(v, &l); err != nil {
		return nil, corrupt(leaseKey(key), err)
	}
	return &l, nil
}

// leaseApply is the write of an acquisition or renewal.
func leaseApply(key, owner, data string, ttl time.Duration, renew *loop.Lease, out *loop.Lease) func(*badger.Txn) ([]mutation, error) {
	return func(txn *badger.Txn) ([]mutation, error) {
		cur, err := getLease(txn, key)
		if err != nil {
			return nil, err
		}
		next, err := leaseDecide(cur, key, owner, data, ttl, time.Now(), renew)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(&next)
		if err != nil {
			return nil, err
		}
		*out = next
		return []mutation{set(leaseKey(key), v)}, nil
	}
}

// leaseHeld is the fence of a commit: the lease must be stored as l.
func leaseHeld(txn *badger.Txn, l *loop.Lease) error {
	cur, err := getLease(txn, l.Key)
	if err != nil {
		return err
	}
	if cur == nil || cur.Owner != l.Owner || cur.Token != l.Token {
		return fmt.Errorf("lease %q: %w", l.Key, loop.ErrLeaseLost)
	}
	return nil
}

var _ loop.LeasedTaskSaver = (*Badger)(nil)

// SaveTaskLeased implements loop.LeasedTaskSaver: the lease of t.ID, the
// task and agent (when not nil) in one transaction (one sync, shared with
// the batch).
func (b *Badger) SaveTaskLeased(ctx context.Context, t loop.TaskRecord, agent *loop.AgentMetadata, owner, data string, ttl time.Duration) (loop.Lease, error) {
	if err := checkLease(b.limits, t.ID, owner, ttl); err != nil {
		return loop.Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	save, err := b.taskAgentApply(&t, agent)
	if err != nil {
		return loop.Lease{}, err
	}
	var l loop.Lease
	acquire := leaseApply(t.ID, owner, data, ttl, nil, &l)
	err = b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		ms, err := acquire(txn)
		if err != nil {
			return nil, err
		}
		ts, err := save(txn)
		if err != nil {
			return nil, err
		}
		return append(ms, ts...), nil
	}})
	if err != nil {
		return loop.Lease{}, err
	}
	return l, nil
}

// taskAgentApply is the write of a starting task and, when agent is not
// nil, of its new context's metadata (SaveTaskLeased, SubmitTaskLeased).
func (b *Badger) taskAgentApply(t *loop.TaskRecord, agent *loop.AgentMetadata) (func(*badger.Txn) ([]mutation, error), error) {
	saveTask, err := b.saveTaskApply(t)
	if err != nil {
		return nil, err
	}
	var saveAgent func(*badger.Txn) ([]mutation, error)
	if agent != nil {
		if saveAgent, err = b.saveAgentApply(agent); err != nil {
			return nil, err
		}
	}
	id := t.ID
	return func(txn *badger.Txn) ([]mutation, error) {
		ms, err := saveTask(txn)
		if err != nil {
			return nil, fmt.Errorf("save task %q: %w", id, err)
		}
		if saveAgent != nil {
			as, err := saveAgent(txn)
			if err != nil {
				return nil, fmt.Errorf("save agent %q: %w", agent.ContextID, err)
			}
			ms = append(ms, as...)
		}
		return ms, nil
	}, nil
}

var _ loop.LeasedTaskSubmitter = (*Badger)(nil)

// SubmitTaskLeased implements loop.LeasedTaskSubmitter: SaveTaskLeased for
// a task whose lease nobody holds (a new task), queued without waiting for
// it. The lease's token is drawn at random rather than counted from the
// stored one (there is none), so that it names this write alone: a write
// fenced by it, which the commit goroutine applies after this one (the
// queue is first in, first out, and a batch applies in order), passes its
// fence only if this write was applied and committed. When a lease is
// stored already the write is refused (loop.ErrLeaseHeld).
func (b *Badger) SubmitTaskLeased(ctx context.Context, t loop.TaskRecord, agent *loop.AgentMetadata, owner, data string, ttl time.Duration) (loop.Lease, func() error, error) {
	l, op, err := b.newTaskOp(t, agent, owner, data, ttl)
	if err != nil {
		return loop.Lease{}, nil, err
	}
	if err := b.submit(ctx, op); err != nil {
		return loop.Lease{}, nil, err
	}
	return l, sync.OnceValue(func() error { return <-op.res }), nil
}

var _ loop.TaskWriteDeferrer = (*Badger)(nil)

// DeferTaskLeased implements loop.TaskWriteDeferrer: SubmitTaskLeased whose
// write is held back, for within at most, for the commit of its turn's
// end: a commit fenced by the returned lease (CommitTurn, AppendCommit)
// takes it along, first, in its own batch, so that a turn answered before
// within costs one sync, not two. flush submits it alone now (a turn about
// to run a tool); so does the deadline, and Close.
func (b *Badger) DeferTaskLeased(ctx context.Context, t loop.TaskRecord, agent *loop.AgentMetadata, owner, data string, ttl, within time.Duration) (loop.Lease, func(), func() error, error) {
	if err := ctx.Err(); err != nil {
		return loop.Lease{}, nil, nil, err
	}
	l, op, err := b.newTaskOp(t, agent, owner, data, ttl)
	if err != nil {
		return loop.Lease{}, nil, nil, err
	}
	b.mu.RLock()
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		return loop.Lease{}, nil, nil, ErrClosed
	}
	b.hold(l, op)
	flush := func() { b.flushHeld(l) }
	deadline := time.AfterFunc(within, flush)
	return l, flush, sync.OnceValue(func() error {
		err := <-op.res
		deadline.Stop()
		return err
	}), nil
}

// newTaskOp is the write of a new task with its lease (a drawn token) and
// agent (when not nil): SubmitTaskLeased.
func (b *Badger) newTaskOp(t loop.TaskRecord, agent *loop.AgentMetadata, owner, data string, ttl time.Duration) (loop.Lease, *writeOp, error) {
	if err := checkLease(b.limits, t.ID, owner, ttl); err != nil {
		return loop.Lease{}, nil, fmt.Errorf("acquire lease: %w", err)
	}
	save, err := b.taskAgentApply(&t, agent)
	if err != nil {
		return loop.Lease{}, nil, err
	}
	// Below 2^53, so that a client reading it as a JSON number keeps it
	// whole; never 0 or 1 (1 is the first token of a counted lease).
	l := loop.Lease{Key: t.ID, Owner: owner, Token: 2 + rand.Uint64N(1<<53-2), Expires: time.Now().Add(ttl), Data: data}
	v, err := json.Marshal(&l)
	if err != nil {
		return loop.Lease{}, nil, err
	}
	return l, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		cur, err := getLease(txn, t.ID)
		if err != nil {
			return nil, err
		}
		if cur != nil {
			return nil, fmt.Errorf("acquire lease %q: %w (a new task's lease is stored already, owner %q)", t.ID, loop.ErrLeaseHeld, cur.Owner)
		}
		ts, err := save(txn)
		if err != nil {
			return nil, err
		}
		return append([]mutation{set(leaseKey(t.ID), v)}, ts...), nil
	}}, nil
}

// AcquireLease implements loop.LeaseStore.
func (b *Badger) AcquireLease(ctx context.Context, key, owner, data string, ttl time.Duration) (loop.Lease, error) {
	if err := checkLease(b.limits, key, owner, ttl); err != nil {
		return loop.Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	var l loop.Lease
	if err := b.write(ctx, &writeOp{apply: leaseApply(key, owner, data, ttl, nil, &l)}); err != nil {
		return loop.Lease{}, err
	}
	return l, nil
}

// RenewLease implements loop.LeaseStore.
func (b *Badger) RenewLease(ctx context.Context, held loop.Lease, ttl time.Duration) (loop.Lease, error) {
	if err := checkLease(b.limits, held.Key, held.Owner, ttl); err != nil {
		return loop.Lease{}, fmt.Errorf("renew lease: %w", err)
	}
	var l loop.Lease
	if err := b.write(ctx, &writeOp{apply: leaseApply(held.Key, held.Owner, held.Data, ttl, &held, &l)}); err != nil {
		return loop.Lease{}, err
	}
	return l, nil
}

// ReleaseLease implements loop.LeaseStore.
func (b *Badger) ReleaseLease(ctx context.Context, held loop.Lease) error {
	if err := b.limits.checkID("lease key", held.Key); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	// Letting go rides with the next batch (writeLater): the holder is
	// done, and a lease still stored a moment longer only says so late.
	err := b.writeLater(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		cur, err := getLease(txn, held.Key)
		if err != nil || cur == nil || cur.Owner != held.Owner || cur.Token != held.Token {
			return nil, err
		}
		return []mutation{del(leaseKey(held.Key))}, nil
	}})
	if err != nil {
		return fmt.Errorf("release lease %q: %w", held.Key, err)
	}
	return nil
}

// ListLeases implements loop.LeaseStore.
func (b *Badger) ListLeases(ctx context.Context) ([]loop.Lease, error) {
	out := []loop.Lease{}
	err := b.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(pfxLease), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var l loop.Lease
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &l) }); err != nil {
				return corrupt(it.Item().KeyCopy(nil), err)
			}
			out = append(out, l)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}

// AcquireLease implements loop.LeaseStore.
func (m *Memory) AcquireLease(ctx context.Context, key, owner, data string, ttl time.Duration) (loop.Lease, error) {
	return m.lease(ctx, key, owner, data, ttl, nil)
}

// RenewLease implements loop.LeaseStore.
func (m *Memory) RenewLease(ctx context.Context, held loop.Lease, ttl time.Duration) (loop.Lease, error) {
	return m.lease(ctx, held.Key, held.Owner, held.Data, ttl, &held)
}

func (m *Memory) lease(ctx context.Context, key, owner, data string, ttl time.Duration, renew *loop.Lease) (loop.Lease, error) {
	if err := checkLease(m.limits, key, owner, ttl); err != nil {
		return loop.Lease{}, fmt.Errorf("lease: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return loop.Lease{}, err
	}
	m.leaseMu.Lock()
	defer m.leaseMu.Unlock()
	var cur *loop.Lease
	if l, ok := m.leases[key]; ok {
		cur = &l
	}
	next, err := leaseDecide(cur, key, owner, data, ttl, time.Now(), renew)
	if err != nil {
		return loop.Lease{}, err
	}
	m.leases[key] = next
	return next, nil
}

// ReleaseLease implements loop.LeaseStore.
func (m *Memory) ReleaseLease(ctx context.Context, held loop.Lease) error {
	m.leaseMu.Lock()
	defer m.leaseMu.Unlock()
	if cur, ok := m.leases[held.Key]; ok && cur.Owner == held.Owner && cur.Token == held.Token {
		delete(m.leases, held.Key)
	}
	return nil
}

// ListLeases implements loop.LeaseStore.
func (m *Memory) ListLeases(ctx context.Context) ([]loop.Lease, error) {
	m.leaseMu.Lock()
	out := make([]loop.Lease, 0, len(m.leases))
	for _, l := range m.leases {
		out = append(out, l)
	}
	m.leaseMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].Key, out[j].Key) < 0 })
	return out, nil
}

// leaseHeldMemory is the fence of a memory commit.
func (m *Memory) leaseHeld(l *loop.Lease) error {
	m.leaseMu.Lock()
	defer m.leaseMu.Unlock()
	cur, ok := m.leases[l.Key]
	if !ok || cur.Owner != l.Owner || cur.Token != l.Token {
		return fmt.Errorf("lease %q: %w", l.Key, loop.ErrLeaseLost)
	}
	return nil
}
