package loop

import (
	"context"
	"fmt"
	"strings"
)

// CallChainKey is the metadata key of a task's call chain: how deep it
// runs among agents calling agents across hosts, and which hosts the call
// went through. A host sends it with every message it sends a remote agent
// (the message's metadata), stores what it received in the task it starts,
// and refuses a message whose chain already names it (a cycle) or that
// would nest past MaxSubAgentDepth. The depth is a floor: a caller can
// make it larger, never smaller than what the host already recorded.
const CallChainKey = InteractionURI + "/callChain"

// Bounds of a call chain read from a message.
const (
	maxChainHosts   = 2 * MaxSubAgentDepth
	maxChainIDBytes = 128
)

// CallChain is where a task stands among agents calling agents: Depth 0 is
// a client's own task; Hosts are the ids of the hosts the call went
// through, this host's last once it is recorded.
type CallChain struct {
	Depth int      `json:"depth"`
	Hosts []string `json:"hosts,omitempty"`
}

// Value is the chain as metadata holds it.
func (c CallChain) Value() map[string]any {
	hosts := make([]any, len(c.Hosts))
	for i, h := range c.Hosts {
		hosts[i] = h
	}
	return map[string]any{"depth": c.Depth, "hosts": hosts}
}

// Has says whether the chain went through host id.
func (c CallChain) Has(id string) bool {
	for _, h := range c.Hosts {
		if h == id {
			return true
		}
	}
	return false
}

// CallChainOf reads the chain md holds under CallChainKey (a value decoded
// from JSON or made by Value). No chain is the zero chain; one that is not
// well formed is an error (ErrInvalid).
func CallChainOf(md map[string]any) (CallChain, error) {
	var c CallChain
	raw, ok := md[CallChainKey]
	if !ok || raw == nil {
		return c, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return c, fmt.Errorf("%w: metadata %s must be an object {\"depth\", \"hosts\"}", ErrInvalid, CallChainKey)
	}
	switch d := m["depth"].(type) {
	case nil:
	case float64:
		if d < 0 || d != float64(int(d)) || d > 1<<20 {
			return c, fmt.Errorf("%w: metadata %s: depth must be a whole number from 0", ErrInvalid, CallChainKey)
		}
		c.Depth = int(d)
	case int:
		if d < 0 {
			return c, fmt.Errorf("%w: metadata %s: depth must be a whole number from 0", ErrInvalid, CallChainKey)
		}
		c.Depth = d
	default:
		return c, fmt.Errorf("%w: metadata %s: depth must be a number", ErrInvalid, CallChainKey)
	}
	switch hs := m["hosts"].(type) {
	case nil:
	case []any:
		if len(hs) > maxChainHosts {
			return c, fmt.Errorf("%w: metadata %s: more than %d hosts", ErrInvalid, CallChainKey, maxChainHosts)
		}
		for _, h := range hs {
			s, ok := h.(string)
			if !ok || s == "" || len(s) > maxChainIDBytes || strings.ContainsAny(s, "\r\n") {
				return c, fmt.Errorf("%w: metadata %s: hosts must be ids (strings of 1 to %d bytes)", ErrInvalid, CallChainKey, maxChainIDBytes)
			}
			c.Hosts = append(c.Hosts, s)
		}
	case []string:
		c.Hosts = append(c.Hosts, hs...)
	default:
		return c, fmt.Errorf("%w: metadata %s: hosts must be a list of ids", ErrInvalid, CallChainKey)
	}
	return c, nil
}

// Merge is the chain of a task that had c and is given o: the deeper depth
// (a depth is never lowered), and every host either names.
func (c CallChain) Merge(o CallChain) CallChain {
	out := CallChain{Depth: max(c.Depth, o.Depth), Hosts: append([]string(nil), c.Hosts...)}
	for _, h := range o.Hosts {
		if !out.Has(h) {
			out.Hosts = append(out.Hosts, h)
		}
	}
	return out
}

type callChainCtx struct{}

// WithCallChain returns ctx carrying the chain of the turn it runs: the
// calls of remote agents made in it send the chain on.
func WithCallChain(ctx context.Context, c CallChain) context.Context {
	return context.WithValue(ctx, callChainCtx{}, c)
}

// CallChainFrom is the chain ctx carries (the zero chain when none).
func CallChainFrom(ctx context.Context) CallChain {
	c, _ := ctx.Value(callChainCtx{}).(CallChain)
	return c
}
