// Package remote runs remote A2A agents as sub-agents: each configured agent
// is a tool of the parent's model, described by its agent card's skills, and
// each call of it is a sub-task of the calling task whose events are the
// remote task's, streamed through the official a2a-go client.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"go.opentelemetry.io/otel/propagation"

	"github.com/looopy-go/looopy/loop"
)

// Config is one remote agent.
type Config struct {
	// Name is the tool the parent's model sees.
	Name string
	// URL is the agent's base URL: its card is at
	// /.well-known/agent-card.json under it.
	URL string
	// Headers are sent with every request to the agent (its credentials,
	// from the operator's configuration; a caller's never are).
	Headers map[string]string
	// CardTimeout bounds fetching the card (default 5s); a card that
	// could not be fetched is fetched again after RetryCard (default 30s).
	CardTimeout time.Duration
	RetryCard   time.Duration
}

// Agent is a remote agent as a toolset of one tool.
type Agent struct {
	cfg  Config
	hc   *http.Client
	prop propagation.TextMapPropagator
	log  *slog.Logger

	mu      sync.Mutex
	client  *a2aclient.Client
	def     *loop.ToolDefinition
	tried   time.Time
	lastErr error
}

var _ loop.Toolset = (*Agent)(nil)

// New returns the remote agent of cfg. rt carries its requests (the host's
// egress rules: which addresses may be reached); prop, when set, injects
// the caller's trace context (traceparent) into every request.
func New(cfg Config, rt http.RoundTripper, prop propagation.TextMapPropagator, log *slog.Logger) (*Agent, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("remote agent: %w: no name", loop.ErrInvalid)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("remote agent %q: %w: url %q is not an http(s) URL", cfg.Name, loop.ErrInvalid, cfg.URL)
	}
	if cfg.CardTimeout <= 0 {
		cfg.CardTimeout = 5 * time.Second
	}
	if cfg.RetryCard <= 0 {
		cfg.RetryCard = 30 * time.Second
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, prop: prop, log: log}
	origin := u.Scheme + "://" + u.Host
	a.hc = &http.Client{
		Transport: &transport{base: rt, headers: cfg.Headers, prop: prop, origin: origin},
		// A redirect elsewhere would take the credentials along: refused.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme+"://"+req.URL.Host != origin {
				return fmt.Errorf("remote agent %q redirects to another origin (%s): refused", cfg.Name, req.URL.Host)
			}
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return nil
		},
	}
	return a, nil
}

// transport adds the configured headers and the trace context, and only
// toward the agent's own origin.
type transport struct {
	base    http.RoundTripper
	headers map[string]string
	prop    propagation.TextMapPropagator
	origin  string
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if r.URL.Scheme+"://"+r.URL.Host == t.origin {
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	if t.prop != nil {
		t.prop.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	}
	return t.base.RoundTrip(r)
}

// Card fetches the agent card (if it was not yet) and makes the client.
func (a *Agent) ready(ctx context.Context) (*a2aclient.Client, *loop.ToolDefinition, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		return a.client, a.def, nil
	}
	if !a.tried.IsZero() && time.Since(a.tried) < a.cfg.RetryCard {
		return nil, nil, a.lastErr
	}
	a.tried = time.Now()
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CardTimeout)
	defer cancel()
	card, err := (&agentcard.Resolver{Client: a.hc, CardParser: parseCard}).Resolve(cctx, a.cfg.URL)
	if err == nil {
		// A2A 1.0 when the card offers it, else 0.3 through the SDK's
		// compatibility transport.
		var c *a2aclient.Client
		c, err = a2aclient.NewFromCard(cctx, card, a2aclient.WithJSONRPCTransport(a.hc),
			a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: a.hc}))
		if err == nil {
			a.client, a.def = c, toolDef(a.cfg.Name, card)
			a.lastErr = nil
			a.log.LogAttrs(ctx, slog.LevelInfo, "remote agent ready", slog.String("agent", a.cfg.Name),
				slog.String("url", a.cfg.URL), slog.String("card", card.Name))
			return a.client, a.def, nil
		}
	}
	a.lastErr = fmt.Errorf("remote agent %q (%s): %w", a.cfg.Name, a.cfg.URL, err)
	a.log.LogAttrs(ctx, slog.LevelWarn, "remote agent not reachable", slog.String("agent", a.cfg.Name),
		slog.String("error", err.Error()))
	return nil, nil, a.lastErr
}

// parseCard reads a 1.0 card, or a 0.3 one (which names no
// supportedInterfaces).
func parseCard(b []byte) (*a2a.AgentCard, error) {
	card, err := agentcard.DefaultCardParser(b)
	if err == nil && len(card.SupportedInterfaces) > 0 {
		return card, nil
	}
	return a2av0.NewAgentCardParser()(b)
}

// toolDef is the tool of a remote agent: its card's description and skills.
func toolDef(name string, card *a2a.AgentCard) *loop.ToolDefinition {
	var sb strings.Builder
	sb.WriteString("Ask the remote agent ")
	sb.WriteString(card.Name)
	if card.Description != "" {
		sb.WriteString(": ")
		sb.WriteString(card.Description)
	}
	if len(card.Skills) > 0 {
		sb.WriteString("\nSkills:")
		for _, s := range card.Skills {
			sb.WriteString("\n- ")
			sb.WriteString(s.Name)
			if s.Description != "" {
				sb.WriteString(": ")
				sb.WriteString(s.Description)
			}
		}
	}
	return &loop.ToolDefinition{Name: name, Description: sb.String(),
		Parameters: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string","description":"what to ask the agent"}},"required":["prompt"]}`)}
}

// Tools offers the agent's tool once its card was fetched; an agent not
// reachable offers nothing (and is tried again later), so the turn goes on
// without it.
func (a *Agent) Tools(ctx context.Context) ([]loop.ToolDefinition, error) {
	_, def, err := a.ready(ctx)
	if err != nil {
		return nil, nil
	}
	return []loop.ToolDefinition{*def}, nil
}

// Call asks the remote agent, streaming: a sub-task of the calling task
// whose events are the remote task's. Cancelling ctx cancels the remote
// task. A remote agent that fails, or whose stream ends before the task
// does, is an error result the parent's model reads.
func (a *Agent) Call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	errResult := func(format string, args ...any) (loop.ToolResult, error) {
		return loop.ToolResult{ToolCallID: call.ID, IsError: true, Content: fmt.Sprintf(format, args...)}, nil
	}
	if env == nil {
		env = &loop.ToolEnv{}
	}
	if env.Depth >= loop.MaxSubAgentDepth {
		return errResult("agent %q not run: sub-agents nest at most %d deep", a.cfg.Name, loop.MaxSubAgentDepth)
	}
	var args struct {
		Prompt string `json:"prompt"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil || strings.TrimSpace(args.Prompt) == "" {
		return errResult("agent %q: arguments must be {\"prompt\": \"...\"}", a.cfg.Name)
	}
	client, _, err := a.ready(ctx)
	if err != nil {
		return errResult("agent %q not reachable: %v", a.cfg.Name, err)
	}
	st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: a.cfg.Name, Prompt: args.Prompt, CallID: call.ID,
		Metadata: map[string]any{"remoteAgent": a.cfg.URL}})
	if err != nil {
		return errResult("agent %q not run: %v", a.cfg.Name, err)
	}
	r := &run{a: a, st: st, client: client}
	content, status, err := r.stream(ctx, args.Prompt)
	if ctx.Err() != nil {
		r.cancelRemote()
		st.Finish(ctx, loop.TaskCanceled, "", ctx.Err())
		return loop.ToolResult{}, ctx.Err()
	}
	if err != nil {
		st.Finish(ctx, loop.TaskFailed, "", err)
		return errResult("agent %q failed: %v", a.cfg.Name, err)
	}
	switch status {
	case loop.TaskCompleted:
		st.Finish(ctx, loop.TaskCompleted, content, nil)
		return loop.ToolResult{ToolCallID: call.ID, Content: content}, nil
	case loop.TaskWaitingInput, loop.TaskWaitingAuth:
		// Not passed up to the parent's client (yet): the remote task is
		// canceled, and the model told why.
		r.cancelRemote()
		err := fmt.Errorf("the remote agent asks for %s, which a sub-agent call cannot give: %s", status, content)
		st.Finish(ctx, loop.TaskFailed, "", err)
		return errResult("agent %q: %v", a.cfg.Name, err)
	}
	err = fmt.Errorf("the remote task ended %s: %s", status, content)
	st.Finish(ctx, status, "", err)
	return errResult("agent %q: %v", a.cfg.Name, err)
}

// run is one call of a remote agent.
type run struct {
	a        *Agent
	st       *loop.Subtask
	client   *a2aclient.Client
	remoteID a2a.TaskID
	deltas   int
}

// stream sends the prompt and forwards the remote task's events as the
// sub-task's until the task ends or pauses. It returns the answer (or the
// status message of a task that did not complete) and the final status.
func (r *run) stream(ctx context.Context, prompt string) (string, loop.TaskStatus, error) {
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(prompt))
	var status loop.TaskStatus
	var message string
	var text strings.Builder
	for ev, err := range r.client.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: msg}) {
		if err != nil {
			return "", "", r.died(ctx, err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			r.noteRemote(e.ID)
			status, message = fromState(e.Status.State), statusText(e.Status.Message)
		case *a2a.TaskStatusUpdateEvent:
			r.noteRemote(e.TaskID)
			status, message = fromState(e.Status.State), statusText(e.Status.Message)
			if status == loop.TaskWorking && message != "" {
				r.st.Emit(&loop.TaskStatusEvent{Header: loop.Header{Kind: loop.KindTaskStatus}, Status: loop.TaskWorking,
					Message: message, Metadata: map[string]any{"remoteTaskId": string(r.remoteID)}})
			}
		case *a2a.TaskArtifactUpdateEvent:
			r.noteRemote(e.TaskID)
			chunk := partsText(e.Artifact.Parts)
			if !e.Append {
				text.Reset()
			}
			text.WriteString(chunk)
			if chunk != "" {
				r.st.Emit(&loop.ContentDelta{Header: loop.Header{Kind: loop.KindContentDelta}, Delta: chunk, Index: r.deltas})
				r.deltas++
			}
		case *a2a.Message:
			return partsText(e.Parts), loop.TaskCompleted, nil
		}
		if status.Terminal() || status == loop.TaskWaitingInput || status == loop.TaskWaitingAuth {
			break
		}
	}
	if ctx.Err() != nil {
		return "", loop.TaskCanceled, ctx.Err()
	}
	if status != loop.TaskCompleted {
		if status == "" || !(status.Terminal() || status.Interrupted()) {
			return "", "", r.died(ctx, errors.New("its stream ended before the task did"))
		}
		return message, status, nil
	}
	// The final record: its answer and what it used.
	task, err := r.client.GetTask(ctx, &a2a.GetTaskRequest{ID: r.remoteID})
	if err != nil {
		return text.String(), status, nil
	}
	if u := usageOf(task.Metadata); u != (loop.Usage{}) {
		if err := r.st.AddUsage(ctx, u); err != nil {
			r.a.log.LogAttrs(ctx, slog.LevelInfo, "remote agent's usage over the parent's budget",
				slog.String("agent", r.a.cfg.Name), slog.String("error", err.Error()))
		}
	}
	answer := ""
	for _, art := range task.Artifacts {
		answer += partsText(art.Parts)
	}
	if answer == "" {
		answer = text.String()
	}
	r.st.Emit(&loop.ContentComplete{Header: loop.Header{Kind: loop.KindContentComplete}, Content: answer})
	return answer, status, nil
}

// died explains a stream that broke: the remote task's state when it can
// still be read, or the error.
func (r *run) died(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if r.remoteID != "" {
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if t, gerr := r.client.GetTask(gctx, &a2a.GetTaskRequest{ID: r.remoteID}); gerr == nil {
			return fmt.Errorf("its stream broke (%v); the remote task is %s", err, t.Status.State)
		}
	}
	return fmt.Errorf("the remote agent died: %w", err)
}

func (r *run) noteRemote(id a2a.TaskID) {
	if r.remoteID != "" || id == "" {
		return
	}
	r.remoteID = id
	r.st.Emit(&loop.TaskStatusEvent{Header: loop.Header{Kind: loop.KindTaskStatus}, Status: loop.TaskWorking,
		Message: "the remote agent took the task", Metadata: map[string]any{"remoteTaskId": string(id), "remoteAgent": r.a.cfg.URL}})
}

// cancelRemote cancels the remote task (the parent was canceled).
func (r *run) cancelRemote() {
	if r.remoteID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.client.CancelTask(ctx, &a2a.CancelTaskRequest{ID: r.remoteID}); err != nil {
		r.a.log.LogAttrs(ctx, slog.LevelWarn, "remote task not canceled", slog.String("agent", r.a.cfg.Name),
			slog.String("task_id", string(r.remoteID)), slog.String("error", err.Error()))
	}
}

func fromState(s a2a.TaskState) loop.TaskStatus {
	switch s {
	case a2a.TaskStateSubmitted, a2a.TaskStateWorking:
		return loop.TaskWorking
	case a2a.TaskStateInputRequired:
		return loop.TaskWaitingInput
	case a2a.TaskStateAuthRequired:
		return loop.TaskWaitingAuth
	case a2a.TaskStateCompleted:
		return loop.TaskCompleted
	case a2a.TaskStateFailed:
		return loop.TaskFailed
	case a2a.TaskStateCanceled:
		return loop.TaskCanceled
	case a2a.TaskStateRejected:
		return loop.TaskRejected
	}
	return loop.TaskWorking
}

func statusText(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	return partsText(m.Parts)
}

func partsText(ps a2a.ContentParts) string {
	var sb strings.Builder
	for _, p := range ps {
		sb.WriteString(p.Text())
	}
	return sb.String()
}

// usageOf reads the usage a Looopy host puts in a task's metadata.
func usageOf(md map[string]any) loop.Usage {
	u, _ := md["usage"].(map[string]any)
	n := func(k string) int {
		f, _ := u[k].(float64)
		return int(f)
	}
	return loop.Usage{PromptTokens: n("promptTokens"), CompletionTokens: n("completionTokens"), TotalTokens: n("totalTokens")}
}
