package host

import (
	"context"
	"fmt"

	"github.com/looopy-go/looopy/loop"
)

// maxContextIDBytes bounds a client's context id.
const maxContextIDBytes = 200

// contextOf returns the id under which the host keeps the conversation a
// client names: its own id behind the principal's scope
// (loop.ScopedContextID), so that two principals who pick the same id have
// two conversations, neither can take an id the other will use, and
// neither can learn that the other's exists. The default principal (auth
// off) keeps ids as they are. A conversation that a principal began before
// ids were scoped keeps its unscoped id. "" stays "": a new conversation.
func (s *Server) contextOf(ctx context.Context, auth *loop.AuthContext, clientID string) (string, error) {
	if clientID == "" {
		return "", nil
	}
	if !loop.ValidClientContextID(clientID) {
		return "", fmt.Errorf("%w: contextId %q: a client's context id may not start with \"~\"", loop.ErrInvalid, clientID)
	}
	if len(clientID) > maxContextIDBytes {
		return "", fmt.Errorf("%w: contextId longer than %d bytes", loop.ErrInvalid, maxContextIDBytes)
	}
	if auth.Principal == DefaultPrincipal {
		return clientID, nil
	}
	if meta, err := s.stores.Agents.LoadAgent(ctx, clientID); err == nil && meta.Owner == auth.Principal {
		return clientID, nil
	}
	return loop.ScopedContextID(auth.Principal, clientID), nil
}
