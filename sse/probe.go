package sse

import (
	"bytes"
	"encoding/json"

	"github.com/looopy-go/looopy/loop"
)

var knownKinds = func() map[string]loop.EventKind {
	m := make(map[string]loop.EventKind)
	for _, k := range loop.AllKinds() {
		m[string(k)] = k
	}
	return m
}()

// probe returns the kind and task id of an encoded event without decoding
// all of it. loop.EncodeEvent writes the header first
// ({"kind":…,"contextId":…,"taskId":…), which the fast path reads; anything
// else goes through encoding/json. An unknown kind or a record that is not
// an event gives kind "".
func probe(data []byte) (loop.EventKind, []byte) {
	if k, task, ok := probeFast(data); ok {
		return k, task
	}
	var h struct {
		Kind   string `json:"kind"`
		TaskID string `json:"taskId"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return "", nil
	}
	return knownKinds[h.Kind], []byte(h.TaskID)
}

func probeFast(data []byte) (loop.EventKind, []byte, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"kind":"`))
	if !ok {
		return "", nil, false
	}
	kind, rest, ok := plainString(rest)
	if !ok {
		return "", nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"contextId":"`)); !ok {
		return "", nil, false
	}
	if _, rest, ok = plainString(rest); !ok {
		return "", nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"taskId":"`)); !ok {
		return "", nil, false
	}
	task, _, ok := plainString(rest)
	if !ok {
		return "", nil, false
	}
	return knownKinds[string(kind)], task, true
}

// plainString reads a JSON string body up to its closing quote; it fails on
// escapes, which the slow path handles.
func plainString(b []byte) (s, rest []byte, ok bool) {
	for i, c := range b {
		switch c {
		case '"':
			return b[:i], b[i+1:], true
		case '\\':
			return nil, nil, false
		}
	}
	return nil, nil, false
}
