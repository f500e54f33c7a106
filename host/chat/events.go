package chat

import (
	"bufio"
	"context"
	"encoding/json"
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

// The kinds of Looopy's event stream the chat reads: what A2A has no form
// for, and task-complete, which says the turn's events are all there.
const feedKinds = "tool-start,tool-complete,tool-progress,subtask-created,thought-stream,warning,task-complete"

// feedCatchUp bounds how long the end of a turn waits for the event
// stream to deliver the turn's last events.
const feedCatchUp = 15 * time.Second

// eventFeed reads a Looopy host's /events stream of the conversation for
// one leg of a turn, from the last event the chat saw, and shows the
// events of the turn's task and its sub-tasks.
type eventFeed struct {
	s      *session
	root   string
	cancel context.CancelFunc
	done   chan struct{} // closed when the stream ends
	rootUp chan struct{} // closed at the root task's task-complete
	once   sync.Once
	last   atomic.Int64
	mu     sync.Mutex
	tasks  map[string]string // task id → the sub-agent it runs ("" for the root)
	tools  map[string]string // tool call id → tool name
}

func (s *session) follow(ctx context.Context, taskID a2a.TaskID) *eventFeed {
	fctx, cancel := context.WithCancel(ctx)
	f := &eventFeed{s: s, root: string(taskID), cancel: cancel, done: make(chan struct{}), rootUp: make(chan struct{}),
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

func (f *eventFeed) stop() {
	f.cancel()
	<-f.done
	if l := f.last.Load(); l > f.s.lastEvent {
		f.s.lastEvent = l
	}
}

func (f *eventFeed) run(ctx context.Context, contextID string) {
	defer close(f.done)
	u := f.s.opts.URL + "/events/" + url.PathEscape(contextID) + "?kinds=" + feedKinds
	if l := f.last.Load(); l > 0 {
		u += "&lastEventId=" + strconv.FormatInt(l, 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := f.s.hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			f.s.p.line(styleDim, "(no tool calls shown: the host's event stream: %s)", sanitize(err.Error()))
		}
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		f.s.p.line(styleDim, "(no tool calls shown: the host's event stream answered %s)", resp.Status)
		return
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
		if e.Message == "" && e.Progress > 0 { // with a message it comes over A2A
			p.line(styleDim, "%s  … %s %.0f%%", pre, sanitize(tool), e.Progress*100)
		}
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
