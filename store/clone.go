package store

import (
	"encoding/json"
	"maps"

	"github.com/looopy-go/looopy/loop"
)

// The in-memory store keeps its own copies, so that a caller changing a
// message after Append (or a result of Recent) never changes the history.

func cloneMessage(m loop.Message) loop.Message {
	if m.ToolCalls != nil {
		calls := make([]loop.ToolCall, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			c.Arguments = cloneBytes(c.Arguments)
			calls[i] = c
		}
		m.ToolCalls = calls
	}
	m.Metadata = cloneMap(m.Metadata)
	return m
}

func cloneMessages(ms []loop.Message) []loop.Message {
	if ms == nil {
		return nil
	}
	out := make([]loop.Message, len(ms))
	for i := range ms {
		out[i] = cloneMessage(ms[i])
	}
	return out
}

func cloneTask(t loop.TaskRecord) loop.TaskRecord {
	t.History = cloneMessages(t.History)
	if t.PendingCalls != nil {
		calls := make([]loop.ToolCall, len(t.PendingCalls))
		for i, c := range t.PendingCalls {
			c.Arguments = cloneBytes(c.Arguments)
			calls[i] = c
		}
		t.PendingCalls = calls
	}
	t.Metadata = cloneMap(t.Metadata)
	return t
}

func cloneAgent(m loop.AgentMetadata) loop.AgentMetadata {
	m.Metadata = cloneMap(m.Metadata)
	return m
}

func cloneBytes[B ~[]byte](b B) B {
	if b == nil {
		return nil
	}
	return append(B(nil), b...)
}

func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for k, v := range out {
		out[k] = cloneValue(v)
	}
	return out
}

// cloneValue copies the mutable JSON-like values (maps, slices, raw JSON);
// anything else is shared.
func cloneValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return cloneMap(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneValue(e)
		}
		return out
	case json.RawMessage:
		return cloneBytes(v)
	case []byte:
		return cloneBytes(v)
	case []string:
		return append([]string(nil), v...)
	}
	return v
}
