package host

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/loop"
)

// chainIDOf is the id this host gives itself in call chains
// (loop.CallChainKey): a digest of its lease name (limits.hostId, by
// default the machine's name and data directory), so that it names the
// host without telling remote agents either; random for a host without
// one.
func chainIDOf(hostID string) string {
	if hostID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		hostID = hex.EncodeToString(b[:])
	}
	sum := sha256.Sum256([]byte("looopy-call-chain\x00" + hostID))
	return "h-" + hex.EncodeToString(sum[:9])
}

// withCallChain checks the call chain a message came with (its own
// metadata's or the request's, loop.CallChainKey) and returns md, the
// task's metadata, with the chain this host records: the one received,
// this host added. A message from a chain that already went through this
// host (agents that name each other) is refused, and so is one that would
// run deeper than sub-agents nest (loop.MaxSubAgentDepth): every hop
// between hosts is a level, as an agent plugin's sub-agent is. A chain
// only raises the depth: a caller cannot make a task shallower than the
// chain it runs in (the task's recorded chain is kept, taskrt).
func (s *Server) withCallChain(req *a2a.SendMessageRequest, md map[string]any) (map[string]any, error) {
	in, err := loop.CallChainOf(req.Metadata)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", a2a.ErrInvalidParams, err)
	}
	if req.Message != nil {
		m, err := loop.CallChainOf(req.Message.Metadata)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", a2a.ErrInvalidParams, err)
		}
		in = in.Merge(m)
	}
	if in.Depth == 0 && len(in.Hosts) == 0 {
		if _, ok := md[loop.CallChainKey]; !ok {
			return md, nil
		}
		out := maps.Clone(md)
		delete(out, loop.CallChainKey)
		return out, nil
	}
	if in.Has(s.chainID) {
		return nil, fmt.Errorf("%w: call cycle refused: this message comes from a chain of agents calling agents (%d deep) that already went through this host (remote agents that name each other)",
			a2a.ErrInvalidParams, in.Depth)
	}
	if in.Depth > loop.MaxSubAgentDepth {
		return nil, fmt.Errorf("%w: call chain too deep: this message comes %d levels deep through agents calling agents; sub-agents nest at most %d deep",
			a2a.ErrInvalidParams, in.Depth, loop.MaxSubAgentDepth)
	}
	if len(in.Hosts) >= 2*loop.MaxSubAgentDepth {
		in.Hosts = in.Hosts[len(in.Hosts)-2*loop.MaxSubAgentDepth+1:]
	}
	in.Hosts = append(in.Hosts, s.chainID)
	out := maps.Clone(md)
	if out == nil {
		out = map[string]any{}
	}
	out[loop.CallChainKey] = in.Value()
	return out, nil
}
