package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/gofiber/fiber/v2"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// thoughtChoice reads the verbosity a client asks for in the metadata of its
// message or, failing that, of its request (loop.ThoughtVerbosityKey): ""
// when it asks for none. A value that is not a level is an invalid param.
func thoughtChoice(mds ...map[string]any) (string, error) {
	for _, md := range mds {
		v, ok := md[loop.ThoughtVerbosityKey]
		if !ok {
			continue
		}
		str, isStr := v.(string)
		level, err := loop.ParseVerbosity(str)
		if !isStr || err != nil || level == "" {
			return "", fmt.Errorf("%w: metadata.%s must be one of brief, normal, detailed, none (got %v)",
				a2a.ErrInvalidParams, loop.ThoughtVerbosityKey, v)
		}
		return level, nil
	}
	return "", nil
}

// withThoughtChoice records the verbosity chosen in a message in the
// request's metadata, which the task keeps: a later SubscribeToTask of the
// task carries the thoughts its client asked for.
func withThoughtChoice(req *a2a.SendMessageRequest) (map[string]any, error) {
	var msgMD map[string]any
	if req.Message != nil {
		msgMD = req.Message.Metadata
	}
	level, err := thoughtChoice(msgMD, req.Metadata)
	if err != nil || level == "" {
		return req.Metadata, err
	}
	md := maps.Clone(req.Metadata)
	if md == nil {
		md = map[string]any{}
	}
	md[loop.ThoughtVerbosityKey] = level
	return md, nil
}

// a2aThoughts is the thought filter of an A2A stream: the level its client
// chose, or no thoughts (an A2A client that did not ask would show each one
// as a status message of the agent).
func a2aThoughts(level string) string {
	if level == "" {
		return loop.VerbosityNone
	}
	return level
}

// eventsVerbosity is the level of an /events stream: ?verbosity=, or the
// operator's default.
func (s *Server) eventsVerbosity(q string) (string, error) {
	level, err := loop.ParseVerbosity(q)
	if err != nil {
		return "", fmt.Errorf("verbosity: %w", err)
	}
	if level == "" {
		level = s.cfg.Thoughts.Verbosity
	}
	if level == "" {
		level = loop.VerbosityNormal
	}
	return level, nil
}

// adminEvents serves GET /admin/events/{contextId} (behind the admin
// credential): a conversation's event stream as /events serves it, with
// the internal:thought-process events of the loop's decisions (recorded
// when thoughts.debug is on). The context id is the one the admin task
// list shows. ?taskId=, ?kinds=, ?verbosity= (default detailed) and
// Last-Event-ID work as on /events.
func (s *Server) adminEvents(c *fiber.Ctx) error {
	contextID := strings.Clone(c.Params("contextId"))
	if _, err := s.stores.Agents.LoadAgent(c.UserContext(), contextID); err != nil {
		if errors.Is(err, loop.ErrNotFound) {
			return &loop.NotFoundError{What: "context", ID: contextID}
		}
		return fmt.Errorf("events of %q: %w", contextID, err)
	}
	f := sse.Filter{Debug: true}
	if t := c.Query("taskId"); t != "" {
		f.TaskIDs = strings.Split(strings.Clone(t), ",")
	}
	if k := c.Query("kinds"); k != "" {
		var err error
		if f.Kinds, err = parseKinds(strings.Clone(k)); err != nil {
			return err
		}
		f.Kinds = append(f.Kinds, loop.KindInternalThoughtProcess)
	}
	level, err := loop.ParseVerbosity(c.Query("verbosity"))
	if err != nil {
		return fmt.Errorf("verbosity: %w", err)
	}
	f.Verbosity = level
	lastID := c.Get("Last-Event-ID")
	if lastID == "" {
		lastID = c.Query("lastEventId")
	}
	after, err := parseLastEventID(lastID)
	if err != nil {
		return err
	}
	if err := s.hub.CheckResume(c.UserContext(), sse.ContextStream(contextID), after); err != nil {
		return resumeRefused(after, err)
	}
	conn := c.Context().Conn()
	s.sendSSE(c, func(w *bufio.Writer) {
		err := s.serveStream(w, conn, sse.ContextStream(contextID), after, 0, f, sse.LooopyEncoder{})
		if err != nil && !errors.Is(err, errClientGone) && !errors.Is(err, errStreamShutdown) {
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "admin event stream ended with an error",
				slog.String("context_id", contextID), slog.String("error", err.Error()))
		}
	})
	return nil
}
