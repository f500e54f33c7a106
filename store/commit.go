package store

import (
	"context"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

var (
	_ loop.TurnCommitter = (*Badger)(nil)
	_ loop.TurnCommitter = (*Memory)(nil)
)

// CommitTurn implements loop.TurnCommitter: the history, the agent metadata,
// the task record and the removal of the checkpoint in one transaction, one
// sync.
func (b *Badger) CommitTurn(ctx context.Context, c loop.TurnCommit) error {
	apply, err := b.commitApply(c)
	if err != nil {
		return fmt.Errorf("commit turn: %w", err)
	}
	if err := b.writeBehind(ctx, c.Lease, &writeOp{apply: apply}); err != nil {
		return fmt.Errorf("commit turn of %q: %w", c.ContextID, err)
	}
	return nil
}

// commitApply returns the apply of a turn's commit: the lease fence first,
// then the history, the agent, the task (versioned) and the removal of the
// checkpoint.
func (b *Badger) commitApply(c loop.TurnCommit) (func(*badger.Txn) ([]mutation, error), error) {
	var applies []func(*badger.Txn) ([]mutation, error)
	if len(c.Messages) > 0 {
		if err := b.limits.checkID("context id", c.ContextID); err != nil {
			return nil, err
		}
		a, err := appendApply(c.ContextID, c.Messages)
		if err != nil {
			return nil, err
		}
		applies = append(applies, a)
	}
	a, err := b.saveAgentApply(&c.Agent)
	if err != nil {
		return nil, err
	}
	applies = append(applies, a)
	if c.Task != nil {
		a, err := b.saveTaskApply(c.Task)
		if err != nil {
			return nil, err
		}
		applies = append(applies, a)
	}
	if c.DeleteCheckpoint != "" {
		key := ckptKey(c.DeleteCheckpoint)
		applies = append(applies, func(*badger.Txn) ([]mutation, error) { return []mutation{del(key)}, nil })
	}
	if c.Lease != nil {
		l := *c.Lease
		// The fence comes first: a commit by an owner that lost its
		// lease writes nothing.
		applies = append([]func(*badger.Txn) ([]mutation, error){func(txn *badger.Txn) ([]mutation, error) {
			return nil, leaseHeld(txn, &l)
		}}, applies...)
	}
	return func(txn *badger.Txn) ([]mutation, error) {
		var all []mutation
		for _, a := range applies {
			ms, err := a(txn)
			if err != nil {
				return nil, err
			}
			all = append(all, ms...)
		}
		return all, nil
	}, nil
}

var _ loop.EventCommitter = (*BadgerEvents)(nil)

// Commits implements loop.EventCommitter: a commit of this log's own
// Badger (or of a wrapper passing its commits on to it).
func (e *BadgerEvents) Commits(tc loop.TurnCommitter) bool {
	for i := 0; i < 8 && tc != nil; i++ {
		if b, ok := tc.(*Badger); ok {
			return b == e.b
		}
		u, ok := tc.(loop.CommitterUnwrapper)
		if !ok {
			return false
		}
		tc = u.UnwrapCommitter()
	}
	return false
}

// AppendCommit implements loop.EventCommitter: the records before the
// commit, the commit and the records after it in one transaction, one
// sync. A refused commit (its lease fence, its task's version, a record
// the store's limits refuse) leaves the records before it appended alone.
func (e *BadgerEvents) AppendCommit(ctx context.Context, appends []loop.CommitAppend, c loop.TurnCommit) (first []uint64, commitErr, err error) {
	if len(appends) == 0 {
		return nil, nil, fmt.Errorf("append commit: %w: no streams", loop.ErrInvalid)
	}
	seen := make(map[string]bool, len(appends))
	for _, a := range appends {
		if err := e.b.limits.checkID("stream", a.Stream); err != nil {
			return nil, nil, fmt.Errorf("append commit: %w", err)
		}
		if seen[a.Stream] {
			return nil, nil, fmt.Errorf("append commit to %q: %w: stream named twice", a.Stream, loop.ErrInvalid)
		}
		seen[a.Stream] = true
	}
	apply, cerr := e.b.commitApply(c)
	first = make([]uint64, len(appends))
	err = e.b.writeBehind(ctx, c.Lease, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		// Called again when its batch filled up: each call starts anew.
		commitErr = cerr
		var ms []mutation
		if commitErr == nil {
			cms, err := apply(txn)
			if err != nil {
				commitErr = err
			} else {
				ms = cms
			}
		}
		for i, a := range appends {
			n := len(a.Before)
			if commitErr == nil {
				n += len(a.After)
			}
			first[i] = 0
			if n == 0 {
				continue
			}
			prefix, hk := evtPrefix(a.Stream), evtHeadKey(a.Stream)
			h, _, err := readHead(txn, hk) // absent: a new stream
			if err != nil {
				return nil, err
			}
			first[i] = h.a + 1
			seq := first[i]
			for _, d := range a.Before {
				ms = append(ms, set(msgKey(prefix, seq), d))
				seq++
			}
			if commitErr == nil {
				for _, d := range a.After {
					ms = append(ms, set(msgKey(prefix, seq), d))
					seq++
				}
			}
			hm, err := h.grow(txn, a.Stream, uint64(n), nowSeconds())
			if err != nil {
				return nil, err
			}
			ms = append(ms, hm...)
		}
		return ms, nil
	}})
	if err != nil {
		return nil, nil, fmt.Errorf("append commit of %q: %w", c.ContextID, err)
	}
	for i, a := range appends {
		if first[i] != 0 {
			e.waiters.wake(a.Stream)
		}
	}
	if commitErr != nil {
		commitErr = fmt.Errorf("commit turn of %q: %w", c.ContextID, commitErr)
	}
	return first, commitErr, nil
}

// CommitTurn implements loop.TurnCommitter. The memory store has nothing to
// sync; it checks the lease and the task's version, then applies the parts
// in order (one commit at a time).
func (m *Memory) CommitTurn(ctx context.Context, c loop.TurnCommit) error {
	m.commitMu.Lock()
	defer m.commitMu.Unlock()
	if c.Lease != nil {
		if err := m.leaseHeld(c.Lease); err != nil {
			return fmt.Errorf("commit turn of %q: %w", c.ContextID, err)
		}
	}
	if c.Task != nil {
		m.taskMu.Lock()
		err := m.checkVersionLocked(c.Task)
		m.taskMu.Unlock()
		if err != nil {
			return fmt.Errorf("commit turn of %q: %w", c.ContextID, err)
		}
	}
	if len(c.Messages) > 0 {
		if err := m.Append(ctx, c.ContextID, c.Messages...); err != nil {
			return err
		}
	}
	if err := m.SaveAgent(ctx, c.Agent); err != nil {
		return err
	}
	if c.Task != nil {
		if err := m.SaveTask(ctx, *c.Task); err != nil {
			return err
		}
	}
	if c.DeleteCheckpoint != "" {
		return m.DeleteCheckpoint(ctx, c.DeleteCheckpoint)
	}
	return nil
}
