package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// Durable execution keys:
//
//	ckpt/<taskId>                 the checkpoint of a running turn (JSON)
//	journal/<taskId>/<callId>     one journaled tool call (JSON)
const (
	pfxCkpt    = "ckpt/"
	pfxJournal = "journal/"
)

func ckptKey(taskID string) []byte { return []byte(pfxCkpt + escape(taskID)) }
func journalPrefix(taskID string) []byte {
	return []byte(pfxJournal + escape(taskID) + "/")
}
func journalKey(taskID, callID string) []byte {
	return append(journalPrefix(taskID), escape(callID)...)
}

var (
	_ loop.CheckpointStore = (*Badger)(nil)
	_ loop.Journal         = (*Badger)(nil)
)

// SaveCheckpoint implements loop.CheckpointStore.
func (b *Badger) SaveCheckpoint(ctx context.Context, cp loop.Checkpoint) error {
	if cp.TaskID == "" {
		return fmt.Errorf("save checkpoint: %w: empty task id", loop.ErrInvalid)
	}
	v, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("save checkpoint %q: %w", cp.TaskID, err)
	}
	key := ckptKey(cp.TaskID)
	return b.write(ctx, &writeOp{apply: func(*badger.Txn) ([]mutation, error) {
		return []mutation{set(key, v)}, nil
	}})
}

// LoadCheckpoint implements loop.CheckpointStore.
func (b *Badger) LoadCheckpoint(ctx context.Context, taskID string) (loop.Checkpoint, error) {
	var cp loop.Checkpoint
	key := ckptKey(taskID)
	err := b.view(ctx, func(txn *badger.Txn) error {
		v, ok, err := getValue(txn, key)
		if err != nil || !ok {
			if err == nil {
				err = &loop.NotFoundError{What: "checkpoint", ID: taskID}
			}
			return err
		}
		cp, err = decodeCheckpoint(key, v)
		return err
	})
	return cp, err
}

// DeleteCheckpoint implements loop.CheckpointStore. It writes only when
// there is a checkpoint to delete, and passes below the floor where
// writes stop (writeOp.frees): the cleanup removes those of finished
// tasks.
func (b *Badger) DeleteCheckpoint(ctx context.Context, taskID string) error {
	key := ckptKey(taskID)
	return b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		if _, err := txn.Get(key); errors.Is(err, badger.ErrKeyNotFound) {
			return nil, nil
		}
		return []mutation{del(key)}, nil
	}, frees: true})
}

// BeginCall implements loop.Journal.
func (b *Badger) BeginCall(ctx context.Context, e loop.JournalEntry) error {
	if e.TaskID == "" || e.CallID == "" {
		return fmt.Errorf("journal call: %w: empty task or call id", loop.ErrInvalid)
	}
	e.State = loop.CallStarted
	v, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("journal call %q: %w", e.Key, err)
	}
	key := journalKey(e.TaskID, e.CallID)
	return b.write(ctx, &writeOp{apply: func(*badger.Txn) ([]mutation, error) {
		return []mutation{set(key, v)}, nil
	}})
}

// EndCall implements loop.Journal.
func (b *Badger) EndCall(ctx context.Context, taskID, callID string, res loop.ToolResult) error {
	key := journalKey(taskID, callID)
	return b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		v, ok, err := getValue(txn, key)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, &loop.NotFoundError{What: "journaled call", ID: loop.IdempotencyKey(taskID, callID)}
		}
		e, err := decodeJournal(key, v)
		if err != nil {
			return nil, err
		}
		e.State, e.Result, e.EndedAt = loop.CallCompleted, &res, time.Now().UTC()
		nv, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		return []mutation{set(key, nv)}, nil
	}})
}

// Calls implements loop.Journal.
func (b *Badger) Calls(ctx context.Context, taskID string) ([]loop.JournalEntry, error) {
	var out []loop.JournalEntry
	prefix := journalPrefix(taskID)
	err := b.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 32})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			e, err := decodeJournal(item.KeyCopy(nil), v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	sortJournal(out)
	return out, err
}

// DeleteCalls implements loop.Journal. It deletes only the entries it
// finds, and passes below the floor where writes stop (writeOp.frees).
func (b *Badger) DeleteCalls(ctx context.Context, taskID string) error {
	prefix := journalPrefix(taskID)
	return b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		var ms []mutation
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ms = append(ms, del(it.Item().KeyCopy(nil)))
		}
		return ms, nil
	}, frees: true})
}

func sortJournal(es []loop.JournalEntry) {
	slices.SortStableFunc(es, func(a, b loop.JournalEntry) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.CallID, b.CallID)
	})
}

func decodeCheckpoint(key, v []byte) (loop.Checkpoint, error) {
	var cp loop.Checkpoint
	if err := json.Unmarshal(v, &cp); err != nil {
		return loop.Checkpoint{}, corrupt(key, err)
	}
	if cp.TaskID == "" || (cp.Stage != loop.StageModel && cp.Stage != loop.StageTools) {
		return loop.Checkpoint{}, corrupt(key, errors.New("checkpoint has no task id or an unknown stage"))
	}
	return cp, nil
}

func decodeJournal(key, v []byte) (loop.JournalEntry, error) {
	var e loop.JournalEntry
	if err := json.Unmarshal(v, &e); err != nil {
		return loop.JournalEntry{}, corrupt(key, err)
	}
	if e.TaskID == "" || e.CallID == "" || (e.State != loop.CallStarted && e.State != loop.CallCompleted) {
		return loop.JournalEntry{}, corrupt(key, errors.New("journal entry has no ids or an unknown state"))
	}
	return e, nil
}
