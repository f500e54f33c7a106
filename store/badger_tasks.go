package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// taskIdent is what places a task in the indexes.
type taskIdent struct {
	ContextID string    `json:"contextId"`
	AgentID   string    `json:"agentId,omitempty"`
	Owner     string    `json:"owner,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// Version is the stored record's version, kept here so that a
	// versioned write compares it without decoding the record.
	Version uint64 `json:"version,omitempty"`
}

func identOf(t *loop.TaskRecord) taskIdent {
	return taskIdent{ContextID: t.ContextID, AgentID: t.AgentID, Owner: t.Owner, CreatedAt: t.CreatedAt, Version: t.Version}
}

// samePlace reports whether two placements put a task under the same
// index keys.
func (ti *taskIdent) samePlace(o *taskIdent) bool {
	return ti.ContextID == o.ContextID && ti.AgentID == o.AgentID && ti.Owner == o.Owner && ti.CreatedAt.Equal(o.CreatedAt)
}

func (ti *taskIdent) indexKeys(id string) [][]byte {
	c := timeKey(ti.CreatedAt)
	keys := [][]byte{
		taskIdxKey(taskIdxPrefix(idxAll, ""), c, id),
		taskIdxKey(taskIdxPrefix(idxContext, ti.ContextID), c, id),
	}
	if ti.AgentID != "" {
		keys = append(keys, taskIdxKey(taskIdxPrefix(idxAgent, ti.AgentID), c, id))
	}
	if ti.Owner != "" {
		keys = append(keys, taskIdxKey(taskIdxPrefix(idxOwner, ti.Owner), c, id))
	}
	return keys
}

func identKey(id string) []byte { return []byte(pfxTaskIdx + idxID + "/" + escape(id)) }

// oldIdent returns the index placement of the stored task as txn sees it:
// from its tidx/id entry, else (data written before it, or damaged) from the
// record itself. A task whose placement cannot be read has none: its index
// entries, if any, are skipped by listings, which check every entry against
// its record.
func oldIdent(txn *badger.Txn, id string) (ti *taskIdent, exists bool, err error) {
	item, err := txn.Get(identKey(id))
	if err == nil {
		if err := item.Value(func(b []byte) error { ti, err = decodeIdent(b); return err }); err == nil {
			return ti, true, nil
		}
	} else if !errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, err
	}
	item, err = txn.Get(taskKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := item.Value(func(b []byte) error { ti, err = decodeIdent(b); return err }); err != nil {
		return nil, true, nil
	}
	return ti, true, nil
}

// decodeIdent reads a task's placement from its tidx/id entry or from its
// record (a record holds the same fields).
func decodeIdent(v []byte) (*taskIdent, error) {
	var ti taskIdent
	if err := json.Unmarshal(v, &ti); err != nil {
		return nil, err
	}
	if ti.ContextID == "" {
		return nil, errors.New("task placement without context id")
	}
	return &ti, nil
}

// expirySeconds is t as Badger's entry expiry: Unix seconds, rounded up so
// that Badger never drops a record before its time (reads check the exact
// time).
func expirySeconds(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	if s <= 0 {
		return 1
	}
	return uint64(s)
}

// SaveTask implements loop.TaskStore. The record and its index entries
// expire together at ExpiresAt. The version is compared inside the commit
// transaction, which serializes every write of the store.
func (b *Badger) SaveTask(ctx context.Context, t loop.TaskRecord) error {
	apply, err := b.saveTaskApply(&t)
	if err != nil {
		return err
	}
	if err := b.write(ctx, &writeOp{apply: apply}); err != nil {
		return fmt.Errorf("save task %q: %w", t.ID, err)
	}
	return nil
}

// saveTaskApply returns the write that saves t with its index entries.
func (b *Badger) saveTaskApply(t0 *loop.TaskRecord) (func(*badger.Txn) ([]mutation, error), error) {
	t := *t0
	if err := checkTask(b.limits, &t); err != nil {
		return nil, fmt.Errorf("save task: %w", err)
	}
	read := t.Version
	t.Version++
	rec, err := json.Marshal(&t)
	if err != nil {
		return nil, fmt.Errorf("save task %q: encode: %w", t.ID, err)
	}
	sum, err := json.Marshal(summarize(&t))
	if err != nil {
		return nil, fmt.Errorf("save task %q: encode summary: %w", t.ID, err)
	}
	exp := expirySeconds(t.ExpiresAt)
	tk := taskKey(t.ID)
	ident := identOf(&t)
	newKeys := ident.indexKeys(t.ID)
	identVal, err := json.Marshal(&ident)
	if err != nil {
		return nil, fmt.Errorf("save task %q: encode placement: %w", t.ID, err)
	}
	ik := identKey(t.ID)
	return func(txn *badger.Txn) ([]mutation, error) {
		old, exists, err := oldIdent(txn, t.ID)
		if err != nil {
			return nil, err
		}
		var stored uint64
		if old != nil {
			stored = old.Version
		} else if exists {
			// A record whose placement cannot be read: only a writer
			// that read version 0 of it (it cannot have read more) may
			// replace it.
			stored = 0
		}
		if err := versionCheck(t.ID, stored, read); err != nil {
			return nil, err
		}
		ms := make([]mutation, 0, 2+2*len(newKeys))
		if old != nil && !old.samePlace(&ident) {
			for _, k := range old.indexKeys(t.ID) {
				if !containsKey(newKeys, k) {
					ms = append(ms, del(k))
				}
			}
		}
		ms = append(ms, mutation{key: tk, value: rec, expiresAt: exp}, mutation{key: ik, value: identVal, expiresAt: exp})
		for _, k := range newKeys {
			ms = append(ms, mutation{key: k, value: sum, expiresAt: exp})
		}
		return ms, nil
	}, nil
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

// LoadTask implements loop.TaskStore.
func (b *Badger) LoadTask(ctx context.Context, id string) (loop.TaskRecord, error) {
	if err := b.limits.checkID("task id", id); err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	var t loop.TaskRecord
	err := b.view(ctx, func(txn *badger.Txn) error {
		var ok bool
		var err error
		t, ok, err = getTask(txn, id, time.Now())
		if err == nil && !ok {
			err = &loop.NotFoundError{What: "task", ID: id}
		}
		return err
	})
	if err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	return t, nil
}

// LoadTaskOf implements loop.TaskStore: the owner is read from the task's
// small placement entry first, so another owner's task is refused without
// reading its record.
func (b *Badger) LoadTaskOf(ctx context.Context, id, owner string) (loop.TaskRecord, error) {
	if err := b.limits.checkID("task id", id); err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	var t loop.TaskRecord
	err := b.view(ctx, func(txn *badger.Txn) error {
		if v, ok, err := getValue(txn, identKey(id)); err != nil {
			return err
		} else if ok {
			if ti, err := decodeIdent(v); err == nil && ti.Owner != owner {
				return &loop.NotFoundError{What: "task", ID: id}
			}
		}
		var ok bool
		var err error
		t, ok, err = getTask(txn, id, time.Now())
		if err == nil && (!ok || t.Owner != owner) {
			err = &loop.NotFoundError{What: "task", ID: id}
		}
		return err
	})
	if err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	return t, nil
}

// TaskExists implements loop.TaskPresence: the record's key is looked up,
// its value neither read nor decoded.
func (b *Badger) TaskExists(ctx context.Context, id string) (bool, error) {
	if err := b.limits.checkID("task id", id); err != nil {
		return false, fmt.Errorf("task exists: %w", err)
	}
	var ok bool
	err := b.view(ctx, func(txn *badger.Txn) error {
		_, err := txn.Get(taskKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		ok = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("task exists: %w", err)
	}
	return ok, nil
}

// getTask reads a live task record.
func getTask(txn *badger.Txn, id string, now time.Time) (loop.TaskRecord, bool, error) {
	k := taskKey(id)
	item, err := txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return loop.TaskRecord{}, false, nil
	}
	if err != nil {
		return loop.TaskRecord{}, false, err
	}
	var t loop.TaskRecord
	err = item.Value(func(v []byte) error {
		t, err = decodeTask(k, v)
		return err
	})
	if err != nil {
		return loop.TaskRecord{}, false, err
	}
	if expired(t.ExpiresAt, now) {
		return loop.TaskRecord{}, false, nil
	}
	return t, true, nil
}

// ListTasks implements loop.TaskStore. It walks the most selective index
// the filter allows (context, owner, agent, else all tasks) newest first,
// filters on the summaries kept in the index and loads only the matches.
func (b *Badger) ListTasks(ctx context.Context, f loop.TaskFilter) ([]loop.TaskRecord, error) {
	var prefix []byte
	switch {
	case f.ContextID != "":
		prefix = taskIdxPrefix(idxContext, f.ContextID)
	case f.Owner != "":
		prefix = taskIdxPrefix(idxOwner, f.Owner)
	case f.AgentID != "":
		prefix = taskIdxPrefix(idxAgent, f.AgentID)
	default:
		prefix = taskIdxPrefix(idxAll, "")
	}
	now := time.Now()
	out := []loop.TaskRecord{}
	err := b.view(ctx, func(txn *badger.Txn) error {
		seek := append(append([]byte{}, prefix...), 0xFF)
		var skip []byte
		if f.After != "" {
			t, ok, err := getTask(txn, f.After, now)
			if errors.Is(err, loop.ErrCorrupt) {
				// A page may end with a task whose record does not
				// decode: its place is read from its index entry.
				ti, _, ierr := oldIdent(txn, f.After)
				if ierr != nil || ti == nil {
					return err
				}
				t, ok, err = loop.TaskRecord{CreatedAt: ti.CreatedAt}, true, nil
			}
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: page token: task %q not found", loop.ErrInvalid, f.After)
			}
			seek = taskIdxKey(prefix, timeKey(t.CreatedAt), f.After)
			skip = seek
		}
		opts := badger.IteratorOptions{Prefix: prefix, Reverse: true, PrefetchValues: true, PrefetchSize: 100}
		if f.Limit > 0 && f.Limit < 100 {
			opts.PrefetchSize = f.Limit
		}
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(seek); it.ValidForPrefix(prefix); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			item := it.Item()
			key := item.Key()
			if skip != nil && bytes.Equal(key, skip) {
				continue
			}
			created, id, err := parseTaskIdxKey(key, prefix)
			if err != nil {
				return corrupt(key, err)
			}
			var s taskSummary
			err = item.Value(func(v []byte) error {
				s, err = decodeSummary(key, v)
				return err
			})
			if err != nil {
				return err
			}
			if !s.match(&f) {
				continue
			}
			t, ok, err := getTask(txn, id, now)
			if errors.Is(err, loop.ErrCorrupt) {
				// A record that does not decode is listed as broken,
				// from its index entry: the other tasks stay listed.
				b.log.Error("task record does not decode; listed as broken", "task", id, "err", err)
				t, ok, err = brokenTask(id, created, s, err), true, nil
			}
			if err != nil {
				return err
			}
			// An entry left behind by an interrupted write no longer
			// matches its record: skip it.
			if !ok || timeKey(t.CreatedAt) != created {
				continue
			}
			if rs := summarize(&t); !rs.match(&f) {
				continue
			}
			out = append(out, t)
			if f.Limit > 0 && len(out) == f.Limit {
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

// DeleteTask implements loop.TaskStore. Deleting an unknown task is not an
// error.
func (b *Badger) DeleteTask(ctx context.Context, id string) error {
	if err := b.limits.checkID("task id", id); err != nil {
		return fmt.Errorf("delete task: %w", err)
	}
	tk := taskKey(id)
	err := b.write(ctx, &writeOp{apply: func(txn *badger.Txn) ([]mutation, error) {
		old, ok, err := oldIdent(txn, id)
		if err != nil || !ok {
			return nil, err
		}
		ms := []mutation{del(tk), del(identKey(id))}
		if old != nil {
			for _, k := range old.indexKeys(id) {
				ms = append(ms, del(k))
			}
		}
		return ms, nil
	}})
	if err != nil {
		return fmt.Errorf("delete task %q: %w", id, err)
	}
	return nil
}

// brokenTask stands for a task whose record does not decode, in a list:
// what its index entry knows, and why it is broken.
func brokenTask(id string, created uint64, s taskSummary, err error) loop.TaskRecord {
	return loop.TaskRecord{ID: id, ContextID: s.ContextID, AgentID: s.AgentID, Owner: s.Owner,
		Status: s.Status, Message: "the task's record does not decode: " + err.Error(),
		CreatedAt: time.Unix(0, int64(created)), UpdatedAt: time.Unix(0, int64(s.UpdatedAt)),
		Metadata: map[string]any{"broken": true}, Broken: true}
}
