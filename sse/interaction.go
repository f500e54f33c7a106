package sse

import (
	"encoding/json"
	"maps"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/loop"
)

// pauseRequests splits the requests a pausing status carries in its
// metadata (loop.InputRequest values, live or decoded from the log) from
// the rest of the metadata. It returns the data of the extension's
// requests part (docs/A2A_EXTENSION.md), nil when there are none.
func pauseRequests(md map[string]any) (data map[string]any, rest map[string]any) {
	raw, ok := md["requests"]
	if !ok {
		return nil, md
	}
	rest = maps.Clone(md)
	delete(rest, "requests")
	if len(rest) == 0 {
		rest = nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, rest
	}
	var reqs []map[string]any
	if json.Unmarshal(b, &reqs) != nil {
		return nil, rest
	}
	open := make([]any, 0, len(reqs))
	for _, r := range reqs {
		if _, answered := r["answer"]; answered {
			continue
		}
		open = append(open, r)
	}
	if len(open) == 0 {
		return nil, rest
	}
	return map[string]any{"requests": open}, rest
}

func withRequests(m *a2a.Message, data map[string]any) *a2a.Message {
	if m == nil || data == nil {
		return m
	}
	dp := a2a.NewDataPart(data)
	dp.Metadata = map[string]any{loop.InteractionURI: "requests"}
	m.Parts = append(m.Parts, dp)
	m.Extensions = []string{loop.InteractionURI}
	return m
}
