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
	var applies []func(*badger.Txn) ([]mutation, error)
	if len(c.Messages) > 0 {
		if err := b.limits.checkID("context id", c.ContextID); err != nil {
			return fmt.Errorf("commit turn: %w", err)
		}
		a, err := appendApply(c.ContextID, c.Messages)
		if err != nil {
			return fmt.Errorf("commit turn: %w", err)
		}
		applies = append(applies, a)
	}
	a, err := b.saveAgentApply(&c.Agent)
	if err != nil {
		return fmt.Errorf("commit turn: %w", err)
	}
	applies = append(applies, a)
	if c.Task != nil {
		a, err := b.saveTaskApply(c.Task)
		if err != nil {
			return fmt.Errorf("commit turn: %w", err)
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
	err = b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		var all []mutation
		for _, a := range applies {
			ms, err := a(txn)
			if err != nil {
				return nil, err
			}
			all = append(all, ms...)
		}
		return all, nil
	}})
	if err != nil {
		return fmt.Errorf("commit turn of %q: %w", c.ContextID, err)
	}
	return nil
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
