package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/looopy-go/looopy/loop"
)

var (
	_ loop.CheckpointStore = (*Memory)(nil)
	_ loop.Journal         = (*Memory)(nil)
)

// SaveCheckpoint implements loop.CheckpointStore.
func (m *Memory) SaveCheckpoint(ctx context.Context, cp loop.Checkpoint) error {
	if cp.TaskID == "" {
		return fmt.Errorf("save checkpoint: %w: empty task id", loop.ErrInvalid)
	}
	cp, err := deepCopy(cp)
	if err != nil {
		return fmt.Errorf("save checkpoint %q: %w", cp.TaskID, err)
	}
	m.durMu.Lock()
	m.ckpts[cp.TaskID] = cp
	m.durMu.Unlock()
	return nil
}

// LoadCheckpoint implements loop.CheckpointStore.
func (m *Memory) LoadCheckpoint(ctx context.Context, taskID string) (loop.Checkpoint, error) {
	m.durMu.RLock()
	cp, ok := m.ckpts[taskID]
	m.durMu.RUnlock()
	if !ok {
		return loop.Checkpoint{}, &loop.NotFoundError{What: "checkpoint", ID: taskID}
	}
	return deepCopy(cp)
}

// DeleteCheckpoint implements loop.CheckpointStore.
func (m *Memory) DeleteCheckpoint(ctx context.Context, taskID string) error {
	m.durMu.Lock()
	delete(m.ckpts, taskID)
	m.durMu.Unlock()
	return nil
}

// BeginCall implements loop.Journal.
func (m *Memory) BeginCall(ctx context.Context, e loop.JournalEntry) error {
	if e.TaskID == "" || e.CallID == "" {
		return fmt.Errorf("journal call: %w: empty task or call id", loop.ErrInvalid)
	}
	e.State = loop.CallStarted
	e, err := deepCopy(e)
	if err != nil {
		return err
	}
	m.durMu.Lock()
	defer m.durMu.Unlock()
	calls := m.journal[e.TaskID]
	if calls == nil {
		calls = map[string]loop.JournalEntry{}
		m.journal[e.TaskID] = calls
	}
	calls[e.CallID] = e
	return nil
}

// EndCall implements loop.Journal.
func (m *Memory) EndCall(ctx context.Context, taskID, callID string, res loop.ToolResult) error {
	res, err := deepCopy(res)
	if err != nil {
		return err
	}
	m.durMu.Lock()
	defer m.durMu.Unlock()
	e, ok := m.journal[taskID][callID]
	if !ok {
		return &loop.NotFoundError{What: "journaled call", ID: loop.IdempotencyKey(taskID, callID)}
	}
	e.State, e.Result, e.EndedAt = loop.CallCompleted, &res, time.Now().UTC()
	m.journal[taskID][callID] = e
	return nil
}

// Calls implements loop.Journal.
func (m *Memory) Calls(ctx context.Context, taskID string) ([]loop.JournalEntry, error) {
	m.durMu.RLock()
	out := make([]loop.JournalEntry, 0, len(m.journal[taskID]))
	for _, e := range m.journal[taskID] {
		out = append(out, e)
	}
	m.durMu.RUnlock()
	sortJournal(out)
	return deepCopy(out)
}

// DeleteCalls implements loop.Journal.
func (m *Memory) DeleteCalls(ctx context.Context, taskID string) error {
	m.durMu.Lock()
	delete(m.journal, taskID)
	m.durMu.Unlock()
	return nil
}

// deepCopy copies v through JSON, the form the Badger store keeps, so the
// memory store never shares a slice or map with its callers.
func deepCopy[T any](v T) (T, error) {
	var out T
	data, err := json.Marshal(v)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(data, &out)
	return out, err
}
