package chat

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// The kinds of Looopy's event stream the chat draws a turn from: the
// text, the tool calls, sub-agents, thoughts, artifacts, answers to
// pauses, and task-complete, which says the turn's events are all there.
const feedKinds = "content-delta,content-complete,tool-start,tool-complete,tool-progress,subtask-created,thought-stream," +
	"warning,file-write,data-write,dataset-write,input-received,task-complete"

// feedCatchUp bounds how long the end of a turn waits for the event
// stream to deliver the turn's last events.
const feedCatchUp = 15 * time.Second

// eventFeed reads a Looopy host's /events stream of the conversation for
// one leg of a turn, from the last event the chat saw, and shows the
// events of the turn's task and its sub-tasks. Until stop returns it owns
// the session's artifacts.
type eventFeed struct {
	s      *session
	st     turnState // what it showed (text)
	root   string
	cancel context.CancelFunc
	done   chan struct{} // closed when the stream ends
	failed chan struct{} // closed when the stream could not be read
	rootUp chan struct{} // closed at the root task's task-complete
	once   sync.Once
	last   atomic.Int64
	mu     sync.Mutex
	tasks  map[string]string // task id → the sub-agent it runs ("" for the root)
	tools  map[string]string // tool call id → tool name
}

func (s *session) follow(ctx context.Context, taskID a2a.TaskID) *eventFeed {
	fctx, cancel := context.WithCancel(ctx)
	f := &eventFeed{s: s, root: string(taskID), cancel: cancel, done: make(chan struct{}), rootUp: make(chan struct{}), failed: make(chan struct{}),
		tasks: map[string]string{string(taskID): ""}, tools: map[string]string{}}
	f.last.Store(s.lastEvent)
	go f.run(fctx, s.contextID)
	return f
}

// wait lets the stream deliver the leg's events up to the root task's
// task-complete (a task that is still working after a broken A2A stream
// is not waited for).
func (f *eventFeed) wait(state a2a.TaskState) {
	if state == a2a.TaskStateWorking || state == a2a.TaskStateSubmitted || state == a2a.TaskStateUnspecified {
		return
	}
	t := time.NewTimer(feedCatchUp)
	defer t.Stop()
	select {
	case <-f.rootUp:
	case <-f.done:
	case <-t.C:
		f.s.p.line(styleDim, "(the host's event stream did not say the turn ended; tool calls may be missing above)")
	}
}

// failedCh is closed when the stream could not be read (nil for no feed,
// which never fires in a select).
func (f *eventFeed) failedCh() <-chan struct{} {
	if f == nil {
		return nil
	}
	return f.failed
}

func (f *eventFeed) stop() {
	f.cancel()
	<-f.done
	if l := f.last.Load(); l > f.s.lastEvent {
		f.s.lastEvent = l
	}
}

func (f *eventFeed) run(ctx context.Context, contextID string) {
	defer close(f.done)
	connected, tries := false, 0
	for {
		ok, err := f.read(ctx, contextID)
		if ctx.Err() != nil {
			return
		}
		if ok {
			connected, tries = true, 0
		}
		tries++
		if !connected || tries > feedRetries {
			sep := ": "
			if errors.Is(err, errAnswered) {
				sep = " "
			}
			f.s.p.line(styleDim, "(no tool calls shown: the host's event stream%s%s)", sep, sanitize(err.Error()))
			close(f.failed)
			return
		}
		// A stream that broke off is read again from the last event seen.
		t := time.NewTimer(time.Duration(tries) * 500 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// feedRetries is how many times in a row a broken event stream is opened
// again before the chat goes on with A2A alone.
const feedRetries = 6

// read reads the stream once, from the last event seen, until it ends. It
// reports whether it got the stream at all, and why it ended.
func (f *eventFeed) read(ctx context.Context, contextID string) (bool, error) {
	u := f.s.opts.URL + "/events/" + url.PathEscape(contextID) + "?kinds=" + feedKinds
	if l := f.last.Load(); l > 0 {
		u += "&lastEventId=" + strconv.FormatInt(l, 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := f.s.hc.Do(req)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%w %s", errAnswered, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var id int64
	var kind string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 {
				f.event(kind, []byte(data.String()))
			}
			if id > 0 {
				f.last.Store(id)
			}
			id, kind = 0, ""
			data.Reset()
		case strings.HasPrefix(line, "id:"):
			id, _ = strconv.ParseInt(strings.TrimSpace(line[3:]), 10, 64)
		case strings.HasPrefix(line, "event:"):
			kind = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(line[5:], " "))
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	return true, errors.New("ended")
}

var errAnswered = errors.New("answered")

// lastEventIDHeader is the header with which a Looopy host says where the
// conversation's event stream ended when /events was opened.
const lastEventIDHeader = "Looopy-Last-Event-ID"

// skipPast moves the session's place in the conversation's event stream
// to its current end (a resumed conversation: what is there was shown by
// the chat that ran it). A host that does not say where its stream ends
// leaves the place at the start. It asks with HEAD: the answer's head
// without a stream, so no place under the host's bounds on live streams
// is taken for it.
func (s *session) skipPast(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(sctx, http.MethodHead,
		s.opts.URL+"/events/"+url.PathEscape(s.contextID)+"?kinds=task-complete", nil)
	if err != nil {
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.hc.Do(req)
	if err != nil {
		return
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	if last, err := strconv.ParseInt(resp.Header.Get(lastEventIDHeader), 10, 64); err == nil && last > s.lastEvent {
		s.lastEvent = last
	}
}

// looopyEvent holds the fields of the event kinds the chat shows.
type looopyEvent struct {
	Kind         string          `json:"kind"`
	TaskID       string          `json:"taskId"`
	ParentTaskID string          `json:"parentTaskId"`
	ToolCallID   string          `json:"toolCallId"`
	ToolName     string          `json:"toolName"`
	Arguments    json.RawMessage `json:"arguments"`
	Success      bool            `json:"success"`
	Result       string          `json:"result"`
	Error        string          `json:"error"`
	Progress     float64         `json:"progress"`
	Message      string          `json:"message"`
	SubtaskID    string          `json:"subtaskId"`
	AgentID      string          `json:"agentId"`
	Prompt       string          `json:"prompt"`
	Content      string          `json:"content"`
	Code         string          `json:"code"`
	Reason       string          `json:"reason"`
	Delta        string          `json:"delta"`
	Index        int             `json:"index"`
	ArtifactID   string          `json:"artifactId"`
	Data         json.RawMessage `json:"data"`
	Encoding     string          `json:"encoding"`
	Complete     bool            `json:"complete"`
	Name         string          `json:"name"`
	MimeType     string          `json:"mimeType"`
	Description  string          `json:"description"`
	Rows         []any           `json:"rows"`
	InputID      string          `json:"inputId"`
	ProvidedBy   string          `json:"providedBy"`
	Metadata     map[string]any  `json:"metadata"`
}

func (f *eventFeed) event(kind string, data []byte) {
	var e looopyEvent
	if json.Unmarshal(data, &e) != nil {
		return
	}
	if e.Kind == "" {
		e.Kind = kind
	}
	f.mu.Lock()
	agent, ours := f.tasks[e.TaskID]
	if !ours {
		if parentAgent, ok := f.tasks[e.ParentTaskID]; ok && e.ParentTaskID != "" {
			agent, ours = parentAgent, true
			f.tasks[e.TaskID] = parentAgent
		}
	}
	if ours && e.Kind == "subtask-created" {
		f.tasks[e.SubtaskID] = e.AgentID
	}
	if e.Kind == "tool-start" {
		f.tools[e.ToolCallID] = e.ToolName
	}
	tool := f.tools[e.ToolCallID]
	// A sub-agent's own calls are named after the call that runs it:
	// "<parent call>><its call>".
	if i := strings.LastIndex(e.ToolCallID, ">"); i > 0 {
		if parent := f.tools[e.ToolCallID[:i]]; parent != "" {
			agent = parent
		}
	}
	f.mu.Unlock()
	if !ours {
		return
	}
	pre := ""
	if agent != "" {
		pre = strings.Repeat("  ", strings.Count(e.ToolCallID, ">")) + "[" + sanitize(agent) + "] "
	}
	p := f.s.p
	switch e.Kind {
	case "tool-start":
		p.line(styleTool, "%s⚙ %s %s", pre, sanitize(e.ToolName), sanitize(clip(compactJSON(e.Arguments), maxShownArg)))
	case "tool-complete":
		if e.Success {
			p.line(styleTool, "%s  ↳ %s → %s", pre, sanitize(e.ToolName), sanitize(oneLine(clip(e.Result, maxShownArg))))
		} else {
			p.line(styleErr, "%s  ↳ %s failed: %s", pre, sanitize(e.ToolName), sanitize(oneLine(clip(e.Error, maxShownArg))))
		}
	case "tool-progress":
		switch {
		case e.Message != "":
			p.line(styleDim, "%s  … %s", pre, sanitize(oneLine(e.Message)))
		case e.Progress > 0:
			p.line(styleDim, "%s  … %s %.0f%%", pre, sanitize(tool), e.Progress*100)
		}
	case "content-delta", "content-complete":
		if e.TaskID != f.root || agent != "" {
			return // a sub-agent's text is its answer, shown as its result
		}
		id := a2a.ArtifactID("content-" + e.TaskID)
		ev := &a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(e.TaskID), Append: e.Index > 0,
			Artifact: &a2a.Artifact{ID: id, Parts: a2a.ContentParts{a2a.NewTextPart(e.Delta)}}}
		if e.Kind == "content-complete" {
			if e.Content == "" {
				return
			}
			ev.Append, ev.LastChunk, ev.Artifact.Parts = false, true, a2a.ContentParts{a2a.NewTextPart(e.Content)}
		}
		f.s.artifact(&f.st, ev)
	case "file-write", "data-write", "dataset-write":
		if ev := artifactEvent(e); ev != nil {
			f.s.artifact(&f.st, ev)
		}
	case "input-received":
		p.line(styleDim, "%s✓ answer to %s received%s", pre, sanitize(e.InputID), sanitize(suffix(" (", str(e.Metadata["decision"]), ")")))
	case "subtask-created":
		p.line(styleAgent, "%s⤷ sub-agent %s: %s", pre, sanitize(e.AgentID), sanitize(oneLine(clip(e.Prompt, maxShownArg))))
	case "thought-stream":
		if !f.s.opts.NoThoughts && e.Content != "" {
			p.line(styleDim, "%s(thinking) %s", pre, sanitize(oneLine(e.Content)))
		}
	case "warning":
		p.line(styleAsk, "%swarning: %s", pre, sanitize(fmt.Sprintf("%s %s", e.Code, e.Message)))
	case "task-complete":
		if e.TaskID == f.root {
			f.once.Do(func() { close(f.rootUp) })
		}
	}
}

// artifactEvent is a Looopy artifact event in its A2A form (as the host
// maps it on its A2A stream), so that both streams draw artifacts alike.
func artifactEvent(e looopyEvent) *a2a.TaskArtifactUpdateEvent {
	art := &a2a.Artifact{ID: a2a.ArtifactID(e.ArtifactID), Name: e.Name, Description: e.Description}
	ev := &a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(e.TaskID), Artifact: art, Append: e.Index > 0, LastChunk: e.Complete}
	if e.Error != "" {
		art.Metadata = map[string]any{"status": "failed", "error": e.Error}
	}
	switch e.Kind {
	case "file-write":
		var data string
		if json.Unmarshal(e.Data, &data) != nil {
			return nil
		}
		var part *a2a.Part
		switch e.Encoding {
		case "":
			part = a2a.NewTextPart(data)
		case "base64":
			raw, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				return nil
			}
			part = a2a.NewRawPart(raw)
		default:
			return nil
		}
		part.MediaType, part.Filename = e.MimeType, e.Name
		art.Parts = a2a.ContentParts{part}
	case "data-write":
		if e.Error != "" {
			return nil
		}
		var data map[string]any
		if json.Unmarshal(e.Data, &data) != nil {
			return nil
		}
		ev.Append, ev.LastChunk = false, true
		art.Parts = a2a.ContentParts{a2a.NewDataPart(data)}
	case "dataset-write":
		rows := e.Rows
		if rows == nil {
			rows = []any{}
		}
		art.Parts = a2a.ContentParts{a2a.NewDataPart(map[string]any{"rows": rows})}
	}
	return ev
}
