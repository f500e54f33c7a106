package plugins

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

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
