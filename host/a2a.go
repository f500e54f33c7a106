package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host/taskrt"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/plugins"
	"github.com/looopy-go/looopy/sse"
)

// The A2A operations, on A2A 1.0 types. The 0.3 binding converts its
// requests and results around these.

// sendMessage starts a turn; unless the client asked to get the task back
// at once, it waits for the turn to end (or to wait on the client) and
// returns the task.
func (s *Server) sendMessage(ctx context.Context, auth *loop.AuthContext, req *a2a.SendMessageRequest) (*a2a.Task, error) {
	if err := checkSendConfig(req); err != nil {
		return nil, err
	}
	// A blocking send tells its client of the task only at the turn's end:
	// the task's write may go with the end's.
	atEnd := req.Config == nil || !req.Config.ReturnImmediately
	st, err := s.start(ctx, auth, req, atEnd)
	if err != nil {
		return nil, err
	}
	hl := -1
	if req.Config != nil && req.Config.HistoryLength != nil {
		hl = *req.Config.HistoryLength
	}
	if st.Run == nil || (req.Config != nil && req.Config.ReturnImmediately) {
		// st.Run nil: answers recorded, the task still waits for others.
		// The task and its input are durable already (Start saved them).
		return s.answerTask(st.Task, s.historyLength(hl)), nil
	}
	if err := s.tasks.Wait(ctx, st.Run); err != nil {
		return nil, fmt.Errorf("wait for task %s: %w", st.Run.TaskID, err)
	}
	// The task as the turn's commit saved it; loaded when the turn saved
	// no end of its own.
	rec, ok := st.Run.Saved()
	if !ok {
		var err error
		if rec, err = s.tasks.Load(context.WithoutCancel(ctx), auth.Principal, st.Run.TaskID); err != nil {
			return nil, err
		}
	}
	return s.answerTask(rec, s.historyLength(hl)), nil
}

// answerTask is the task of an answer: toA2ATask, within maxAnswerBytes
// (fitTask).
func (s *Server) answerTask(rec loop.TaskRecord, historyLength int) *a2a.Task {
	t := toA2ATask(rec, historyLength)
	fitTask(t, s.cfg.Limits.MaxAnswerBytes)
	return t
}

// start starts the turn of an A2A message.
func (s *Server) start(ctx context.Context, auth *loop.AuthContext, req *a2a.SendMessageRequest, answerAtEnd bool) (*taskrt.Started, error) {
	if req == nil || req.Message == nil {
		return nil, fmt.Errorf("%w: message is required", a2a.ErrInvalidParams)
	}
	answers, creds, err := responsesOf(req.Message, auth.Principal)
	if err != nil {
		return nil, err
	}
	var msg loop.Message
	if answers == nil {
		if msg, err = toLoopMessage(req.Message); err != nil {
			return nil, err
		}
	} else {
		if req.Message.ID == "" || req.Message.Role != a2a.MessageRoleUser {
			return nil, fmt.Errorf("%w: message.messageId is required and message.role must be user", a2a.ErrInvalidParams)
		}
		if req.Message.TaskID == "" {
			return nil, fmt.Errorf("%w: responses answer a paused task: message.taskId is required", a2a.ErrInvalidParams)
		}
	}
	tools, err := s.clientToolsOf(ctx, req.Message)
	if err != nil {
		return nil, err
	}
	md, err := withThoughtChoice(req)
	if err != nil {
		return nil, err
	}
	if md, err = s.withCallChain(req, md); err != nil {
		s.log.WarnContext(ctx, "message refused", "principal", auth.Principal, "error", err.Error())
		return nil, err
	}
	contextID, err := s.contextOf(ctx, auth, req.Message.ContextID)
	if err != nil {
		return nil, err
	}
	if err := s.continueStream(ctx, req.Message.ContextID, contextID); err != nil {
		return nil, err
	}
	// The turn's plugin calls count as this principal's (a fair share of
	// each plugin's instances).
	ctx = plugins.WithPrincipal(ctx, auth.Principal)
	return s.tasks.Start(ctx, taskrt.StartRequest{Auth: auth, ContextID: contextID,
		TaskID: string(req.Message.TaskID), Message: msg, Metadata: md,
		Answers: answers, CheckAnswers: checkAnswers(creds), OnAnswered: s.keepCredentials(creds), ClientTools: tools,
		AnswerAtEnd: answerAtEnd})
}

func checkSendConfig(req *a2a.SendMessageRequest) error {
	if req == nil {
		return fmt.Errorf("%w: params are required", a2a.ErrInvalidParams)
	}
	if req.Config == nil {
		return nil
	}
	if req.Config.HistoryLength != nil && *req.Config.HistoryLength < 0 {
		return fmt.Errorf("%w: configuration.historyLength must not be negative", a2a.ErrInvalidParams)
	}
	if req.Config.PushConfig != nil {
		return a2a.ErrPushNotificationNotSupported
	}
	return nil
}

// historyLength bounds a requested history length: -1 (not given) means
// the configured maximum.
func (s *Server) historyLength(n int) int {
	if n < 0 || n > s.cfg.Limits.MaxHistoryLength {
		return s.cfg.Limits.MaxHistoryLength
	}
	return n
}

func (s *Server) getTask(ctx context.Context, auth *loop.AuthContext, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	hl := -1
	if req.HistoryLength != nil {
		if *req.HistoryLength < 0 {
			return nil, fmt.Errorf("%w: historyLength must not be negative", a2a.ErrInvalidParams)
		}
		hl = *req.HistoryLength
	}
	rec, err := s.tasks.Load(ctx, auth.Principal, string(req.ID))
	if err != nil {
		return nil, err
	}
	return s.answerTask(rec, s.historyLength(hl)), nil
}

func (s *Server) cancelTask(ctx context.Context, auth *loop.AuthContext, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	rec, err := s.tasks.Cancel(ctx, auth.Principal, string(req.ID))
	if err != nil {
		return nil, err
	}
	return s.answerTask(rec, s.historyLength(-1)), nil
}

func (s *Server) listTasks(ctx context.Context, auth *loop.AuthContext, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	size := req.PageSize
	switch {
	case size < 0:
		return nil, fmt.Errorf("%w: pageSize must not be negative", a2a.ErrInvalidParams)
	case size == 0 || size > s.cfg.Limits.MaxPageSize:
		size = s.cfg.Limits.MaxPageSize
	}
	hl := 0 // a listing carries no history unless asked
	if req.HistoryLength != nil {
		if *req.HistoryLength < 0 {
			return nil, fmt.Errorf("%w: historyLength must not be negative", a2a.ErrInvalidParams)
		}
		hl = s.historyLength(*req.HistoryLength)
	}
	contextID, err := s.contextOf(ctx, auth, req.ContextID)
	if err != nil {
		return nil, err
	}
	f := loop.TaskFilter{Owner: auth.Principal, ContextID: contextID}
	if req.Status != a2a.TaskStateUnspecified {
		st, ok := loopStatus(req.Status)
		if !ok {
			return nil, fmt.Errorf("%w: unknown status %q", a2a.ErrInvalidParams, req.Status)
		}
		f.Statuses = []loop.TaskStatus{st}
	}
	if req.StatusTimestampAfter != nil {
		f.UpdatedAfter = *req.StatusTimestampAfter
	}
	start := 0
	if req.PageToken != "" {
		n, err := strconv.Atoi(req.PageToken)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: pageToken %q is not one this server gave", a2a.ErrInvalidParams, req.PageToken)
		}
		start = n
	}
	// The tasks are read a few at a time (a task may hold megabytes), and
	// the page ends at size tasks or maxAnswerBytes, whichever comes first
	// (its first task always goes in: a page makes progress). The rest of
	// the walk only counts.
	f.Limit = listChunk
	limit := s.cfg.Limits.MaxAnswerBytes
	resp := &a2a.ListTasksResponse{Tasks: []*a2a.Task{}, PageSize: size}
	total, end, used := 0, -1, 0
	for {
		recs, err := s.stores.Tasks.ListTasks(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("list tasks: %w", err)
		}
		for _, rec := range recs {
			i := total
			total++
			if i < start || end >= 0 {
				continue
			}
			if len(resp.Tasks) == size {
				end = i
				continue
			}
			t := toA2ATask(rec, hl)
			if !req.IncludeArtifacts {
				t.Artifacts = nil
			}
			n := encodedSize(t) + 1 // and its comma
			if len(resp.Tasks) > 0 && limit > 0 && used+n > limit {
				end = i
				continue
			}
			if len(resp.Tasks) == 0 {
				n = fitTask(t, limit) + 1
			}
			resp.Tasks = append(resp.Tasks, t)
			used += n
		}
		if len(recs) < listChunk {
			break
		}
		f.After = recs[len(recs)-1].ID
	}
	if start > total {
		return nil, fmt.Errorf("%w: pageToken %q is not one this server gave", a2a.ErrInvalidParams, req.PageToken)
	}
	resp.TotalSize = total
	if end >= 0 {
		resp.NextPageToken = strconv.Itoa(end)
	}
	return resp, nil
}

// listChunk is how many task records ListTasks reads from the store at a
// time.
const listChunk = 8

// taskStream is a stream of one task's events to serve: the events of its
// stream after an id, or, for a task waiting on the client with no turn
// running, just the task as it is.
type taskStream struct {
	taskID   string
	after    uint64
	endAt    uint64 // > 0: the stream is complete up to this id (a finished task)
	snapshot *a2a.Task
	// thoughts is the verbosity of the thoughts the stream carries (""
	// none: see a2aThoughts).
	thoughts string
}

// subscribe prepares SubscribeToTask. With a Last-Event-ID (replay), the
// client resumes a stream it had: the events after lastEventID are
// replayed, then the live ones; 0, an id before the first, replays the
// whole stream, a finished task's too. Without one, a running turn is
// streamed from its start (its first event is the task), and a task
// waiting on the client is sent as it is.
func (s *Server) subscribe(ctx context.Context, auth *loop.AuthContext, req *a2a.SubscribeToTaskRequest, lastEventID uint64, replay bool) (*taskStream, error) {
	rec, err := s.tasks.Load(ctx, auth.Principal, string(req.ID))
	if err != nil {
		return nil, err
	}
	ts, err := s.subscribeFrom(ctx, rec, lastEventID, replay)
	if ts != nil {
		ts.thoughts, _ = thoughtChoice(rec.Metadata)
	}
	return ts, err
}

func (s *Server) subscribeFrom(ctx context.Context, rec loop.TaskRecord, lastEventID uint64, replay bool) (*taskStream, error) {
	if replay {
		last, err := s.hub.Last(ctx, sse.TaskStream(rec.ID))
		if err != nil {
			return nil, err
		}
		if lastEventID > last {
			return nil, lastEventAhead(lastEventID, last)
		}
		if err := s.hub.CheckResume(ctx, sse.TaskStream(rec.ID), lastEventID); err != nil {
			return nil, resumeRefused(lastEventID, err)
		}
		ts := &taskStream{taskID: rec.ID, after: lastEventID}
		if rec.Status.Terminal() && s.tasks.Running(rec.ID) == nil {
			// Its end is in the log (the runtime settles a turn's
			// events before it lets go of the task): replay, then stop,
			// even for a client that already had the final status.
			ts.endAt = last
		}
		return ts, nil
	}
	if rec.Status.Terminal() {
		return nil, a2a.NewError(a2a.ErrUnsupportedOperation,
			fmt.Sprintf("task %q is %s: nothing more will happen to it", rec.ID, rec.Status))
	}
	if r := s.tasks.Running(rec.ID); r != nil {
		return &taskStream{taskID: rec.ID, after: r.After}, nil
	}
	if rec.Status == loop.TaskWorking && s.stores.Shared {
		// Its turn runs on another host (or waits for a takeover): it is
		// streamed from its start, as on the host that runs it.
		after, err := s.turnStart(ctx, rec.ID)
		if err != nil {
			return nil, err
		}
		return &taskStream{taskID: rec.ID, after: after}, nil
	}
	return &taskStream{taskID: rec.ID, snapshot: s.answerTask(rec, s.historyLength(-1))}, nil
}

// turnStart returns the id after which the current turn's events are in a
// task's stream: the end (task-complete) of its previous turn, 0 for its
// first.
func (s *Server) turnStart(ctx context.Context, taskID string) (uint64, error) {
	// Read a batch at a time: a task's stream holds every turn's events.
	var start, after uint64
	for {
		recs, err := s.stores.Events.Read(ctx, sse.TaskStream(taskID), after, turnStartBatch)
		if err != nil {
			return 0, err
		}
		if len(recs) == 0 {
			return start, nil
		}
		for _, r := range recs {
			e, err := loop.DecodeEvent(r.Data)
			if err != nil {
				return 0, fmt.Errorf("stream of task %q: %w", taskID, err)
			}
			if e.Head().Kind == loop.KindTaskComplete {
				start = r.Seq
			}
		}
		after = recs[len(recs)-1].Seq
	}
}

// turnStartBatch is how many events turnStart reads at a time.
const turnStartBatch = 64

// lastEventAhead is the answer to a Last-Event-ID beyond the end of its
// stream: an id this server never gave, or a stream that expired. The
// client must not resume from it (it would skip whatever gets that id).
func lastEventAhead(id, last uint64) error {
	return fmt.Errorf("%w: Last-Event-ID %d is beyond the end of the stream (its last event is %d): "+
		"the stream expired or the id is not one this server gave; subscribe again without Last-Event-ID",
		sse.ErrAhead, id, last)
}

// resumeRefused is the answer to a Last-Event-ID whose following events
// are no longer kept (sse.ErrExpired): resuming would skip them unsaid.
func resumeRefused(id uint64, err error) error {
	if !errors.Is(err, sse.ErrExpired) {
		return err
	}
	return fmt.Errorf("%w: Last-Event-ID %d: a stream's events are kept limits.taskTTL after its last turn; "+
		"subscribe again without Last-Event-ID to read what is kept", sse.ErrExpired, id)
}

// parseLastEventID reads a Last-Event-ID header.
func parseLastEventID(v string) (uint64, error) {
	id, err := sse.ParseLastEventID(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", a2a.ErrInvalidRequest, err)
	}
	return id, nil
}

// marshalResult is the JSON of a JSON-RPC result frame.
func marshalResponse(id json.RawMessage, result any, e *rpcError) []byte {
	b, err := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: id, Result: result, Error: e})
	if err != nil {
		b, _ = json.Marshal(rpcResponse{JSONRPC: "2.0", ID: id,
			Error: &rpcError{Code: -32603, Message: "internal error: response not encodable"}})
	}
	return b
}
