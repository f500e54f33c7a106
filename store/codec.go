package store

import (
	"encoding/json"
	"errors"
	"slices"

	"github.com/looopy-go/looopy/loop"
)

// Records are stored as JSON: readable with any Badger tool, and tolerant of
// fields added later. Every decoder returns a *loop.CorruptError naming the
// key when the bytes are not a record of the expected shape.

func corrupt(key []byte, err error) error {
	return &loop.CorruptError{Key: string(key), Err: err}
}

func decodeMessage(key, v []byte) (loop.Message, error) {
	var m loop.Message
	if err := json.Unmarshal(v, &m); err != nil {
		return loop.Message{}, corrupt(key, err)
	}
	if m.Role == "" {
		return loop.Message{}, corrupt(key, errors.New("message has no role"))
	}
	return m, nil
}

func decodeTask(key, v []byte) (loop.TaskRecord, error) {
	var t loop.TaskRecord
	if err := json.Unmarshal(v, &t); err != nil {
		return loop.TaskRecord{}, corrupt(key, err)
	}
	if t.ID == "" {
		return loop.TaskRecord{}, corrupt(key, errors.New("task record has no id"))
	}
	return t, nil
}

func decodeAgent(key, v []byte) (loop.AgentMetadata, error) {
	var m loop.AgentMetadata
	if err := json.Unmarshal(v, &m); err != nil {
		return loop.AgentMetadata{}, corrupt(key, err)
	}
	if m.ContextID == "" {
		return loop.AgentMetadata{}, corrupt(key, errors.New("agent metadata has no context id"))
	}
	return m, nil
}

// taskSummary is the value of a task index entry: enough to filter a listing
// without loading the records that do not match.
type taskSummary struct {
	Status    loop.TaskStatus `json:"s"`
	UpdatedAt uint64          `json:"u"` // timeKey(UpdatedAt)
	ContextID string          `json:"c,omitempty"`
	AgentID   string          `json:"a,omitempty"`
	Owner     string          `json:"o,omitempty"`
}

func summarize(t *loop.TaskRecord) taskSummary {
	return taskSummary{Status: t.Status, UpdatedAt: timeKey(t.UpdatedAt), ContextID: t.ContextID, AgentID: t.AgentID, Owner: t.Owner}
}

func decodeSummary(key, v []byte) (taskSummary, error) {
	var s taskSummary
	if err := json.Unmarshal(v, &s); err != nil {
		return taskSummary{}, corrupt(key, err)
	}
	return s, nil
}

// match reports whether a task with summary s passes f.
func (s *taskSummary) match(f *loop.TaskFilter) bool {
	if f.ContextID != "" && s.ContextID != f.ContextID {
		return false
	}
	if f.AgentID != "" && s.AgentID != f.AgentID {
		return false
	}
	if f.Owner != "" && s.Owner != f.Owner {
		return false
	}
	if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, s.Status) {
		return false
	}
	if !f.UpdatedAfter.IsZero() && s.UpdatedAt <= timeKey(f.UpdatedAfter) {
		return false
	}
	if !f.UpdatedBefore.IsZero() && s.UpdatedAt >= timeKey(f.UpdatedBefore) {
		return false
	}
	return true
}
