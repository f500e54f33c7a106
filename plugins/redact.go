package plugins

import (
	"slices"
	"strings"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/pdk"
)

// Redacted replaces a plugin's secret wherever the plugin's output quotes
// it.
const Redacted = "[REDACTED]"

// minSecretLen: shorter values would redact ordinary words.
const minSecretLen = 4

// redactor replaces the values of a plugin's secrets in the text it hands
// the host: an API server that echoes the key it was sent ("Incorrect API
// key provided: sk-...") must not put the key into task statuses, events or
// the store. Nil redacts nothing.
func newRedactor(secrets map[string]string) *strings.Replacer {
	var vals []string
	for _, v := range secrets {
		if len(v) >= minSecretLen {
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return nil
	}
	// Longest first, so a secret containing another is replaced whole.
	slices.SortFunc(vals, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(vals))
	for _, v := range vals {
		pairs = append(pairs, v, Redacted)
	}
	return strings.NewReplacer(pairs...)
}

// redact returns s without the plugin's secrets.
func (p *Plugin) redact(s string) string {
	if p.redactor == nil || s == "" {
		return s
	}
	return p.redactor.Replace(s)
}

// redactPE returns a plugin error whose text holds no secret.
func (p *Plugin) redactPE(pe *pdk.Error) *pdk.Error {
	if p.redactor == nil {
		return pe
	}
	c := *pe
	c.Message = p.redact(c.Message)
	return &c
}

// redactResponse scrubs a model's answer (text, thoughts, tool arguments
// are the model's own and left alone).
func (p *Plugin) redactResponse(r *loop.ModelResponse) {
	if p.redactor == nil || r == nil {
		return
	}
	r.Message.Content = p.redact(r.Message.Content)
}

// redactResult scrubs a tool's result.
func (p *Plugin) redactResult(r *loop.ToolResult) {
	if p.redactor == nil {
		return
	}
	r.Content = p.redact(r.Content)
}
