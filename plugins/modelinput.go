package plugins

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/looopy-go/looopy/loop"
)

// toolSets remembers the encodings of the tool sets a model plugin was sent
// lately, so that a model call does not encode and hash the same 25 tool
// definitions again (about 80 µs of CPU per call with their schemas): the
// definitions of a request are compared with the remembered ones, field by
// field, and the remembered encoding and name are used when they are equal.
// A few sets are kept: agents with different tools may share one model.
type toolSets struct {
	mu   sync.Mutex
	sets []toolSetEnc // most recently used first
}

// toolSetsKept bounds the sets remembered per plugin.
const toolSetsKept = 4

type toolSetEnc struct {
	defs []loop.ToolDefinition // a copy: the caller's may change later
	enc  []byte                // json.Marshal of defs
	ref  string                // the name the guest keeps them under
}

// get returns the encoding of defs and its name.
func (c *toolSets) get(defs []loop.ToolDefinition) ([]byte, string, error) {
	c.mu.Lock()
	for i, s := range c.sets {
		if sameTools(s.defs, defs) {
			if i > 0 {
				copy(c.sets[1:i+1], c.sets[:i])
				c.sets[0] = s
			}
			c.mu.Unlock()
			return s.enc, s.ref, nil
		}
	}
	c.mu.Unlock()
	enc, err := json.Marshal(defs)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(enc)
	s := toolSetEnc{defs: cloneTools(defs), enc: enc, ref: hex.EncodeToString(sum[:16])}
	c.mu.Lock()
	if len(c.sets) < toolSetsKept {
		c.sets = append(c.sets, toolSetEnc{})
	}
	copy(c.sets[1:], c.sets[:len(c.sets)-1])
	c.sets[0] = s
	c.mu.Unlock()
	return s.enc, s.ref, nil
}

func sameTools(a, b []loop.ToolDefinition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Name != y.Name || x.Description != y.Description || x.Client != y.Client ||
			x.Idempotent != y.Idempotent || !bytes.Equal(x.Parameters, y.Parameters) ||
			(x.Parameters == nil) != (y.Parameters == nil) {
			return false
		}
	}
	return true
}

func cloneTools(defs []loop.ToolDefinition) []loop.ToolDefinition {
	out := make([]loop.ToolDefinition, len(defs))
	for i, d := range defs {
		if d.Parameters != nil {
			d.Parameters = append(json.RawMessage{}, d.Parameters...)
		}
		out[i] = d
	}
	return out
}

// keptHistory is what an instance's guest holds of the conversation
// (pdk.FeatureHistoryRef), as the host sent it: the guest keeps the
// messages of its last request under ref, and msgs are copies of them (a
// prefix of them: a message whose metadata cannot be copied ends it), deep
// enough that whatever the caller later does to its own messages, a
// comparison with them says whether the guest holds the same.
type keptHistory struct {
	ref  string
	msgs []loop.Message
}

// historyNames makes the names of kept conversations, unique in the
// process: a name never comes back, so an instance that lost its copy (or
// holds another) cannot be taken for one that holds it.
var historyNames atomic.Uint64

// match finds the longest run of kept messages the request's messages start
// with: the run starts at the first kept message (a longer conversation) or
// further on (a window that dropped the oldest messages). keep 0: none.
func (h *keptHistory) match(msgs []loop.Message) (skip, keep int) {
	if h.ref == "" || len(msgs) == 0 {
		return 0, 0
	}
	if k := commonPrefix(h.msgs, msgs); k > 0 {
		return 0, k
	}
	for j := 1; j < len(h.msgs); j++ {
		if sameMessage(&h.msgs[j], &msgs[0]) {
			return j, commonPrefix(h.msgs[j:], msgs)
		}
	}
	return 0, 0
}

// keep records that the guest now holds, under ref, the kept messages
// [skip, skip+keep) followed by the rest of msgs.
func (h *keptHistory) keep(ref string, skip, keep int, msgs []loop.Message) {
	var kept []loop.Message
	if keep > 0 {
		kept = h.msgs[skip : skip+keep] // what follows in the array is not needed any more
	}
	kept = slices.Grow(kept, len(msgs)-keep)
	for _, m := range msgs[keep:] {
		c, ok := cloneMessage(m)
		if !ok {
			break
		}
		kept = append(kept, c)
	}
	h.ref, h.msgs = ref, kept
}

func commonPrefix(kept, msgs []loop.Message) int {
	n := min(len(kept), len(msgs))
	for i := range n {
		if !sameMessage(&kept[i], &msgs[i]) {
			return i
		}
	}
	return n
}

// sameMessage reports whether two messages encode the same (a false "no"
// only costs sending a message again). It names every field of
// loop.Message: TestSameMessageCoversEveryField fails when one is added.
func sameMessage(a, b *loop.Message) bool {
	if a.Role != b.Role || a.Content != b.Content || a.Name != b.Name || a.ToolCallID != b.ToolCallID ||
		a.Pinned != b.Pinned || len(a.ToolCalls) != len(b.ToolCalls) || len(a.Metadata) != len(b.Metadata) {
		return false
	}
	for i := range a.ToolCalls {
		x, y := &a.ToolCalls[i], &b.ToolCalls[i]
		if x.ID != y.ID || x.Name != y.Name || !bytes.Equal(x.Arguments, y.Arguments) {
			return false
		}
	}
	return len(a.Metadata) == 0 || sameValue(a.Metadata, b.Metadata)
}

// cloneMessage copies what a message shares with its caller (tool calls,
// their arguments, metadata). ok is false for metadata holding a value of
// a type it does not know.
func cloneMessage(m loop.Message) (loop.Message, bool) {
	if m.ToolCalls != nil {
		calls := make([]loop.ToolCall, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			if c.Arguments != nil {
				c.Arguments = append(json.RawMessage{}, c.Arguments...)
			}
			calls[i] = c
		}
		m.ToolCalls = calls
	}
	if len(m.Metadata) > 0 {
		md, ok := cloneValue(m.Metadata)
		if !ok {
			return m, false
		}
		m.Metadata = md.(map[string]any)
	}
	return m, true
}

// cloneValue deep-copies a value of the kinds message metadata holds.
func cloneValue(v any) (any, bool) {
	switch x := v.(type) {
	case nil, string, bool, float64, float32, int, int64, int32, uint, uint64, uint32, json.Number:
		return x, true
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			c, ok := cloneValue(e)
			if !ok {
				return nil, false
			}
			out[k] = c
		}
		return out, true
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, ok := cloneValue(e)
			if !ok {
				return nil, false
			}
			out[i] = c
		}
		return out, true
	case []string:
		return slices.Clone(x), true
	}
	return nil, false
}

// sameValue compares a cloned value with another: equal only when of the
// same type (an int against the float64 of the same number is "not the
// same": harmless).
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case string, bool, float64, float32, int, int64, int32, uint, uint64, uint32, json.Number:
		return a == b
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			f, ok := y[k]
			if !ok || !sameValue(e, f) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case []string:
		y, ok := b.([]string)
		return ok && slices.Equal(x, y)
	}
	return false
}
