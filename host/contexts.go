package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
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
// continueStream has the stream of a conversation started again under its
// scoped id (contextOf: its client's id, clientID, named a conversation of
// this principal that expired or was deleted) continue the ids of the
// stream clientID named before, so that the Last-Event-ID a client holds
// for clientID never names another event (a resume after it gets the new
// turn). A principal that takes up an id another principal's deleted
// conversation had learns how many events that one had, no more.
func (s *Server) continueStream(ctx context.Context, clientID, contextID string) error {
	if clientID == "" || contextID == clientID {
		return nil
	}
	last, err := s.hub.Last(ctx, sse.ContextStream(clientID))
	if err != nil || last == 0 {
		return err
	}
	if _, err := s.stores.Agents.LoadAgent(ctx, clientID); err == nil {
		return nil // another principal's conversation: not this one's past
	} else if !errors.Is(err, loop.ErrNotFound) {
		return err
	}
	if n, err := s.hub.Last(ctx, sse.ContextStream(contextID)); err != nil || n > 0 {
		return err
	}
	return s.hub.Seed(ctx, sse.ContextStream(contextID), last)
}

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
