package host

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// LastEventIDHeader, on an answer of GET /events/{contextId}, is the id of
// the last event of the conversation's stream when the request opened it
// (0: none yet); the events after it are the ones yet to come.
const LastEventIDHeader = "Looopy-Last-Event-ID"

// handleEvents serves GET /events/{contextId}: Looopy's own event stream of
// a conversation, every event as it is (internal ones excepted), from the
// log then live. ?taskId= and ?kinds=a,b filter it; ?verbosity=brief|
// normal|detailed|none bounds its thought-stream events (default: the
// operator's thoughts.verbosity); Last-Event-ID (header, or ?lastEventId=)
// resumes it. The answer's Looopy-Last-Event-ID header says where the log
// ended when the stream was opened; HEAD answers the same head without a
// stream.
func (s *Server) handleEvents(c *fiber.Ctx) error {
	auth, err := s.principal(c)
	if err != nil {
		return err
	}
	// The stream is served after the handler returns, when the request's
	// memory belongs to other requests: everything it keeps is a copy.
	clientID := strings.Clone(c.Params("contextId"))
	contextID, err := s.contextOf(c.UserContext(), auth, clientID)
	if err != nil {
		return err
	}
	meta, err := s.stores.Agents.LoadAgent(c.UserContext(), contextID)
	if errors.Is(err, loop.ErrNotFound) || (err == nil && meta.Owner != auth.Principal) {
		return &loop.NotFoundError{What: "context", ID: clientID}
	}
	if err != nil {
		return fmt.Errorf("events of %q: %w", clientID, err)
	}
	enc := sse.LooopyEncoder{}
	if contextID != clientID {
		enc.ContextScope = loop.ContextScope(auth.Principal)
	}
	var f sse.Filter
	if t := c.Query("taskId"); t != "" {
		f.TaskIDs = strings.Split(strings.Clone(t), ",")
	}
	if k := c.Query("kinds"); k != "" {
		f.Kinds, err = parseKinds(strings.Clone(k))
		if err != nil {
			return err
		}
	}
	if f.Verbosity, err = s.eventsVerbosity(strings.Clone(c.Query("verbosity"))); err != nil {
		return err
	}
	lastID := c.Get("Last-Event-ID")
	if lastID == "" {
		lastID = c.Query("lastEventId")
	}
	after, err := parseLastEventID(lastID)
	if err != nil {
		return err
	}
	last, err := s.hub.Last(c.UserContext(), sse.ContextStream(contextID))
	if err != nil {
		return err
	}
	if after > last {
		return lastEventAhead(after, last)
	}
	if err := s.hub.CheckResume(c.UserContext(), sse.ContextStream(contextID), after); err != nil {
		return resumeRefused(after, err)
	}
	// Where the log ended when the stream was opened: a client that wants
	// only what comes next (looopy chat resuming a paused task) resumes
	// from it, without reading the conversation's past.
	c.Set(LastEventIDHeader, strconv.FormatUint(last, 10))
	if c.Method() == fiber.MethodHead {
		// The head of the stream's answer, Looopy-Last-Event-ID with it,
		// and no stream: a HEAD takes no place under the bounds on live
		// streams.
		s.sendSSE(c, nil)
		return nil
	}
	release, err := s.streamSlots.take(auth.Principal, sse.ContextStream(contextID))
	if err != nil {
		return err
	}
	conn := c.Context().Conn()
	s.sendSSE(c, func(w *bufio.Writer) {
		defer release()
		err := s.serveStream(w, conn, sse.ContextStream(contextID), after, 0, f, enc)
		if errors.Is(err, ErrConversationDeleted) {
			// The last frame says why the stream ends: a client that
			// reconnected would be told only 404.
			_ = writeStreamEnd(w, err)
			return
		}
		if err != nil && !errors.Is(err, errClientGone) && !errors.Is(err, errStreamShutdown) {
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "event stream ended with an error",
				slog.String("context_id", contextID), slog.String("error", err.Error()))
		}
	})
	return nil
}

// parseKinds reads a comma-separated list of event kinds. An unknown or
// internal kind is an error that names it.
func parseKinds(s string) ([]loop.EventKind, error) {
	known := map[loop.EventKind]bool{}
	for _, k := range loop.AllKinds() {
		known[k] = !k.Internal()
	}
	var out []loop.EventKind
	for _, p := range strings.Split(s, ",") {
		k := loop.EventKind(strings.TrimSpace(p))
		if k == "" {
			continue
		}
		if !known[k] {
			return nil, fmt.Errorf("%w: kinds: %q is not an event kind of this stream", loop.ErrInvalid, k)
		}
		out = append(out, k)
	}
	return out, nil
}

// StreamEndEvent is the name of the last frame of an /events stream that
// ends before its client leaves for a reason the client must know (its
// conversation was deleted): data {"reason": "CONVERSATION_DELETED",
// "message": ...}, no id (it is no event of the log).
const StreamEndEvent = "stream-end"

// writeStreamEnd writes the stream-end frame for err and flushes it.
func writeStreamEnd(w *bufio.Writer, err error) error {
	data, _ := json.Marshal(map[string]string{"reason": lookupError(err).reason, "message": err.Error()})
	if _, err := w.Write(sse.AppendFrame(nil, 0, StreamEndEvent, data)); err != nil {
		return errClientGone
	}
	if err := w.Flush(); err != nil {
		return errClientGone
	}
	return nil
}
