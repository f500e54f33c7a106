// Package remote runs remote A2A agents as sub-agents: each configured agent
// is a tool of the parent's model, described by its agent card's skills, and
// each call of it is a sub-task of the calling task whose events are the
// remote task's, streamed through the official a2a-go client.
package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/errordetails"
	"go.opentelemetry.io/otel/propagation"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/loop/jsonlimit"
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
	// Fetches run in the background: Tools never waits for one.
	CardTimeout time.Duration
	RetryCard   time.Duration
	// Reconnect is how long a call keeps trying to reach the agent again
	// when its stream broke or the parent restarted (default 60s): an
	// agent that restarts within it resumes its task and the call gets
	// its answer; one silent for longer is an error result.
	Reconnect time.Duration
	// InputTimeout, when set, is how long a request of the remote task
	// passed up to the parent's client waits there (the parent's own
	// inputTimeout): the request expires then, or when the remote agent
	// said, whichever comes first, and the parent's onTimeout applies.
	InputTimeout time.Duration
	// Crashpoint, when set, is called at PointAcknowledged (the crash
	// tests kill the process there); nil in production.
	Crashpoint func(point string)

	// EventsPerCall bounds the events one call forwards into the
	// sub-task (default 1000), EventBytesPerCall their bytes (default
	// 4 MiB): every event is kept in the durable log. A call past either
	// ends, its remote task is canceled, and the model reads an error.
	// EventBytesPerCall (plus 64 KiB) also bounds each answer that is not
	// a stream (GetTask's task, ListTasks), read before it is decoded.
	EventsPerCall     int
	EventBytesPerCall int64
	// MaxCardBytes bounds the agent card's body (default 1 MiB);
	// MaxSkills the skills it may list (default 128) and
	// MaxDescriptionBytes the tool description made of it (default
	// 64 KiB), which every turn shows the model. A card past a bound
	// leaves the agent out (a clear error, tried again later); the other
	// tools and turns are not touched.
	MaxCardBytes        int64
	MaxSkills           int
	MaxDescriptionBytes int
	// InterfaceOrigins are origins ("https://host:port") besides the
	// configured URL's that the card's interfaces may name. An interface
	// on any other origin is refused: a card must not aim the host's
	// requests elsewhere than where the operator pointed it.
	InterfaceOrigins []string
	// ChainID is the calling host's id in call chains (loop.CallChainKey):
	// every message sent to the agent carries the chain of the calling
	// turn, this id included, and one level more of depth.
	ChainID string
	// BusyRetry is how long a call keeps sending its message (or its
	// answer to a paused remote task) again while the remote host refuses
	// it for now: HOST_BUSY (its turn limit) or QUOTA_EXCEEDED (this
	// host's turns there), default 30s; negative: never. BusyPause is the
	// first pause between tries (default 500ms), doubled after each
	// refusal up to 10s, and never shorter than the Retry-After the
	// remote host asks: a refusal asking for longer than what is left of
	// BusyRetry ends the call at once. Cancelling the call stops the
	// waiting; a call out of budget is an error result naming the refusal.
	BusyRetry time.Duration
	BusyPause time.Duration
	// WatchEvery is how often a remote task whose request a paused parent
	// passed up is read (GetTask) to see whether it moved on without the
	// parent's answer (RemoteTaskMovedOn; default 2s); while the agent
	// does not answer the pause doubles, up to a minute.
	WatchEvery time.Duration
}

// Defaults of Config's bounds.
const (
	DefaultEventsPerCall       = 1000
	DefaultEventBytesPerCall   = 4 << 20
	DefaultMaxCardBytes        = 1 << 20
	DefaultMaxSkills           = 128
	DefaultMaxDescriptionBytes = 64 << 10
	DefaultBusyRetry           = 30 * time.Second
	DefaultBusyPause           = 500 * time.Millisecond
	DefaultWatchEvery          = 2 * time.Second
	// maxBusyPause bounds the pause between two tries of a busy remote
	// host, past a longer Retry-After.
	maxBusyPause = 10 * time.Second
)

// bound returns v, def when v is zero, or no limit when v is negative.
func bound[T int | int64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return T(math.MaxInt32) << 31 // far past anything one call can reach
	}
	return v
}

// PointAcknowledged is the moment the remote agent has acknowledged the
// message and its task's id is not recorded yet.
const PointAcknowledged = "remote-acknowledged"

// Agent is a remote agent as a toolset of one tool.
type Agent struct {
	cfg  Config
	hc   *http.Client
	prop propagation.TextMapPropagator
	log  *slog.Logger

	cardClient *http.Client
	origins    map[string]bool

	mu      sync.Mutex
	client  *a2aclient.Client
	def     *loop.ToolDefinition
	tried   time.Time
	lastErr error
	// fetching, while a card fetch runs, closes when it ends.
	fetching chan struct{}
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
	if cfg.Reconnect <= 0 {
		cfg.Reconnect = 60 * time.Second
	}
	if cfg.BusyRetry == 0 {
		cfg.BusyRetry = DefaultBusyRetry
	}
	if cfg.BusyPause <= 0 {
		cfg.BusyPause = DefaultBusyPause
	}
	if cfg.WatchEvery <= 0 {
		cfg.WatchEvery = DefaultWatchEvery
	}
	cfg.EventsPerCall = bound(cfg.EventsPerCall, DefaultEventsPerCall)
	cfg.EventBytesPerCall = bound(cfg.EventBytesPerCall, DefaultEventBytesPerCall)
	cfg.MaxCardBytes = bound(cfg.MaxCardBytes, DefaultMaxCardBytes)
	cfg.MaxSkills = bound(cfg.MaxSkills, DefaultMaxSkills)
	cfg.MaxDescriptionBytes = bound(cfg.MaxDescriptionBytes, DefaultMaxDescriptionBytes)
	origins := map[string]bool{originOf(u): true}
	for _, o := range cfg.InterfaceOrigins {
		ou, err := url.Parse(o)
		if err != nil || (ou.Scheme != "http" && ou.Scheme != "https") || ou.Host == "" || (ou.Path != "" && ou.Path != "/") {
			return nil, fmt.Errorf("remote agent %q: %w: interface origin %q is not an origin (http(s)://host[:port])", cfg.Name, loop.ErrInvalid, o)
		}
		origins[originOf(ou)] = true
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, prop: prop, log: log, origins: origins}
	origin := u.Scheme + "://" + u.Host
	a.hc = &http.Client{
		// An answer that is not a stream (GetTask's task, ListTasks, a
		// blocking reply) is read up to the call's event bytes: the remote
		// task's record could otherwise be any size.
		Transport: &capAnswers{base: &transport{base: rt, headers: cfg.Headers, prop: prop, origin: origin},
			max: cfg.EventBytesPerCall + answerEnvelope, name: cfg.Name},
		// A redirect elsewhere would take the credentials along (or the
		// request where the operator did not point it): refused.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if originOf(req.URL) != originOf(via[0].URL) {
				return fmt.Errorf("remote agent %q redirects to another origin (%s): refused", cfg.Name, req.URL.Host)
			}
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return nil
		},
	}
	// The card is read through a client whose responses stop at
	// MaxCardBytes.
	a.cardClient = &http.Client{Transport: &capBody{base: a.hc.Transport, max: cfg.MaxCardBytes, name: cfg.Name},
		CheckRedirect: a.hc.CheckRedirect}
	return a, nil
}

// originOf is the scheme and host of u, in lower case.
func originOf(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}

// answerEnvelope is what an answer may hold past the call's event bytes:
// the JSON-RPC envelope, the task's ids, status and metadata.
const answerEnvelope = 64 << 10

// capAnswers reads a response that is not an event stream (a task record,
// a list, a blocking reply) up to max bytes: past it the read fails with
// errEventBudget (eventBytesPerCall), before anything is decoded. Event
// streams are bounded event by event by the call's budget instead.
type capAnswers struct {
	base http.RoundTripper
	max  int64
	name string
}

func (c *capAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := c.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if mt, _, _ := strings.Cut(res.Header.Get("Content-Type"), ";"); strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
		return res, nil
	}
	over := fmt.Errorf("%w: an answer of remote agent %q is over %d bytes (eventBytesPerCall and its envelope)", errEventBudget, c.name, c.max)
	if res.ContentLength > c.max {
		res.Body.Close()
		return nil, over
	}
	res.Body = &overReader{rc: res.Body, left: c.max, over: over}
	return res, nil
}

// overReader reads up to left bytes; one more is the error over.
type overReader struct {
	rc   io.ReadCloser
	left int64
	over error
}

func (o *overReader) Read(p []byte) (int, error) {
	if o.left <= 0 {
		var one [1]byte
		n, err := o.rc.Read(one[:])
		if n > 0 {
			return 0, o.over
		}
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > o.left {
		p = p[:o.left]
	}
	n, err := o.rc.Read(p)
	o.left -= int64(n)
	return n, err
}

func (o *overReader) Close() error { return o.rc.Close() }

// capBody cuts responses at max bytes: reading past it is an error.
type capBody struct {
	base http.RoundTripper
	max  int64
	name string
}

func (c *capBody) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := c.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if res.ContentLength > c.max {
		res.Body.Close()
		return nil, fmt.Errorf("the card of remote agent %q is %d bytes, over the bound of %d (maxCardBytes)", c.name, res.ContentLength, c.max)
	}
	res.Body = &overReader{rc: res.Body, left: c.max,
		over: fmt.Errorf("the card of remote agent %q is over the bound of %d bytes (maxCardBytes)", c.name, c.max)}
	return res, nil
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
	res, err := t.base.RoundTrip(r)
	if box, ok := r.Context().Value(retryAfterKey{}).(*retryAfterBox); ok && res != nil {
		box.set(parseRetryAfter(res.Header.Get("Retry-After"), time.Now()))
	}
	return res, err
}

// retryAfterKey carries, in a request's context, the box the transport
// puts the answer's Retry-After in: the SDK's clients hand over an
// error's code, message and details, never the HTTP headers.
type retryAfterKey struct{}

type retryAfterBox struct {
	mu sync.Mutex
	d  time.Duration
}

func (b *retryAfterBox) set(d time.Duration) {
	b.mu.Lock()
	b.d = max(b.d, d)
	b.mu.Unlock()
}

func (b *retryAfterBox) get() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.d
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date
// (0 when absent, malformed or past).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 32); err == nil {
		return time.Duration(max(n, 0)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// ready returns the agent's client and tool once its card is fetched: it
// starts a fetch when none was made or the last failed more than
// RetryCard ago, and waits for the fetch under way (each bounded by
// CardTimeout) or for ctx. A card that could not be fetched is the
// fetch's error.
func (a *Agent) ready(ctx context.Context) (*a2aclient.Client, *loop.ToolDefinition, error) {
	return a.readyOr(ctx, false)
}

// readyOr is ready; with now set it tries the card again at once, however
// recently it failed.
func (a *Agent) readyOr(ctx context.Context, now bool) (*a2aclient.Client, *loop.ToolDefinition, error) {
	c, def, wait, err := a.kick(now)
	if wait == nil {
		return c, def, err
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		return a.client, a.def, nil
	}
	return nil, nil, a.lastErr
}

// kick returns the client and tool when the card is fetched; else the
// fetch under way (wait closes when it ends), starting one in the
// background when none was made, or now is set, or the last failed more
// than RetryCard ago; else the last fetch's error. It never waits for the
// network: the host's own card and the turns that list this agent's tool
// go on while its card is fetched (or hangs).
func (a *Agent) kick(now bool) (*a2aclient.Client, *loop.ToolDefinition, <-chan struct{}, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		return a.client, a.def, nil, nil
	}
	if a.fetching != nil {
		return nil, nil, a.fetching, nil
	}
	if !now && !a.tried.IsZero() && time.Since(a.tried) < a.cfg.RetryCard {
		return nil, nil, nil, a.lastErr
	}
	a.tried = time.Now()
	done := make(chan struct{})
	a.fetching = done
	go a.fetch(done)
	return nil, nil, done, nil
}

// fetch reads the card (within CardTimeout) and makes the client, then
// closes done.
func (a *Agent) fetch(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.CardTimeout)
	defer cancel()
	card, err := (&agentcard.Resolver{Client: a.cardClient, CardParser: parseCard}).Resolve(ctx, a.cfg.URL)
	var def *loop.ToolDefinition
	if err == nil {
		def, err = a.admit(card)
	}
	var c *a2aclient.Client
	if err == nil {
		// A2A 1.0 when the card offers it, else 0.3 through the SDK's
		// compatibility transport.
		c, err = a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(a.hc),
			a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: a.hc}))
	}
	a.mu.Lock()
	defer func() {
		a.fetching = nil
		a.mu.Unlock()
		close(done)
	}()
	if err == nil {
		a.client, a.def = c, def
		a.lastErr = nil
		a.log.LogAttrs(ctx, slog.LevelInfo, "remote agent ready", slog.String("agent", a.cfg.Name),
			slog.String("url", a.cfg.URL), slog.String("card", card.Name))
		return
	}
	// The first failure is a warning; the tries after it (a call waiting
	// for the agent to come back tries every 2 s) are logged at debug
	// until the agent answers again.
	level := slog.LevelWarn
	if a.lastErr != nil {
		level = slog.LevelDebug
	}
	a.lastErr = fmt.Errorf("remote agent %q (%s): %w", a.cfg.Name, a.cfg.URL, err)
	a.log.LogAttrs(ctx, level, "remote agent not reachable", slog.String("agent", a.cfg.Name),
		slog.String("error", err.Error()))
}

// admit checks a card against the agent's bounds and returns its tool: a
// card listing too many skills, or making too long a description, is
// refused; so are its interfaces on another origin than the configured
// URL's (or an allowed one), and the card when none is left.
func (a *Agent) admit(card *a2a.AgentCard) (*loop.ToolDefinition, error) {
	if n := len(card.Skills); n > a.cfg.MaxSkills {
		return nil, fmt.Errorf("its card lists %d skills, over the bound of %d (maxSkills)", n, a.cfg.MaxSkills)
	}
	var kept []*a2a.AgentInterface
	var refused []string
	for _, in := range card.SupportedInterfaces {
		if in == nil {
			continue
		}
		u, err := url.Parse(in.URL)
		if err != nil || !a.origins[originOf(u)] {
			refused = append(refused, in.URL)
			continue
		}
		kept = append(kept, in)
	}
	if len(refused) > 0 {
		a.log.LogAttrs(context.Background(), slog.LevelWarn, "remote agent's card names interfaces on another origin: refused",
			slog.String("agent", a.cfg.Name), slog.String("url", a.cfg.URL), slog.Any("refused", refused))
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("its card names no interface on the configured origin (refused: %s; list another origin in interfaceOrigins to allow it)",
			strings.Join(refused, ", "))
	}
	card.SupportedInterfaces = kept
	def := toolDef(a.cfg.Name, card)
	if n := len(def.Description); n > a.cfg.MaxDescriptionBytes {
		return nil, fmt.Errorf("its card makes a tool description of %d bytes, over the bound of %d (maxDescriptionBytes)", n, a.cfg.MaxDescriptionBytes)
	}
	return def, nil
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

// Tools offers the agent's tool once its card was fetched. It never waits
// for the card: while the first fetch runs the tool is offered with a
// description saying so (a call waits for the fetch, bounded by
// CardTimeout, and an agent that did not answer is the call's error);
// an agent whose card could not be fetched offers nothing (and is tried
// again in the background later), so the turn goes on without it.
func (a *Agent) Tools(ctx context.Context) ([]loop.ToolDefinition, error) {
	_, def, wait, err := a.kick(false)
	switch {
	case def != nil:
		return []loop.ToolDefinition{*def}, nil
	case wait != nil && err == nil && a.neverFetched():
		return []loop.ToolDefinition{a.pendingDef()}, nil
	}
	return nil, nil
}

// neverFetched says no fetch of the card ended yet.
func (a *Agent) neverFetched() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.client == nil && a.lastErr == nil
}

// pendingDef is the agent's tool while its card is first fetched.
func (a *Agent) pendingDef() loop.ToolDefinition {
	return loop.ToolDefinition{Name: a.cfg.Name,
		Description: "Ask the remote agent " + a.cfg.Name + " (its description is being fetched)",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string","description":"what to ask the agent"}},"required":["prompt"]}`)}
}

// ResumesCalls says the agent's calls survive a restart of the parent
// (loop.CallResumer): a resumed turn takes up the remote task the cut-off
// call started instead of reporting the call interrupted.
func (a *Agent) ResumesCalls(tool string) bool { return tool == a.cfg.Name }

// Call asks the remote agent, streaming: a sub-task of the calling task
// whose events are the remote task's. Cancelling ctx cancels the remote
// task. A remote agent that fails, or whose task cannot be followed to its
// end, is an error result the parent's model reads.
//
// The remote task's id is recorded in the sub-task's record (Subtask.Note,
// a synced write) as soon as the remote agent acknowledges the message. A
// stream that breaks is followed again (GetTask, SubscribeToTask) until
// the task ends or the agent stays unreachable for Config.Reconnect; a
// call the parent's restart cut off (env.Resumed) subscribes to the
// recorded task and never sends the message again.
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
	if err != nil && env.Resumed {
		// Both hosts went down: the agent is waited for, as a broken
		// stream is, before the call is given up as interrupted.
		client, err = a.awaitCard(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return loop.ToolResult{}, ctx.Err()
		}
		if env.Resumed {
			return loop.InterruptedResult(call), nil
		}
		return errResult("agent %q not reachable: %v", a.cfg.Name, err)
	}
	st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: a.cfg.Name, Prompt: args.Prompt, CallID: call.ID,
		Metadata: map[string]any{"remoteAgent": a.cfg.URL}})
	if err != nil {
		return errResult("agent %q not run: %v", a.cfg.Name, err)
	}
	r := &run{a: a, st: st, client: client, completes: map[string]bool{}, depth: max(env.Depth, loop.CallChainFrom(ctx).Depth)}
	var content string
	var status loop.TaskStatus
	switch rt := env.Routed; {
	case env.Resumed:
		content, status, err = r.resume(ctx)
	case rt != nil && rt.Request.Route != nil && rt.Request.Route.RemoteTaskID != "":
		// The parent's client answered the remote task's request: the
		// answer goes to that task, which goes on.
		r.remoteID = a2a.TaskID(rt.Request.Route.RemoteTaskID)
		if rt.Answer.AgentID == loop.AnswerWithdrawn && rt.Answer.ProvidedBy == "agent" {
			// The host saw the remote task move on without an answer
			// (RemoteTaskMovedOn): nothing is sent, its outcome is taken.
			content, status, err = r.movedOn(ctx)
			break
		}
		var msg *a2a.Message
		if msg, err = r.answerMessage(rt.Request, rt.Answer, env); err == nil {
			content, status, err = r.answer(ctx, msg)
		}
	default:
		content, status, err = r.stream(ctx, args.Prompt)
	}
	// A remote task that asks for input: a person's answer is asked of
	// the parent's client (the parent pauses, and this call runs again
	// with it); one an agent may give, the parent's model gives.
	for err == nil && ctx.Err() == nil && (status == loop.TaskWaitingInput || status == loop.TaskWaitingAuth) {
		req := r.request(status, content)
		if req.InputType == loop.InputAuth || req.RequireUser {
			if a.cfg.InputTimeout > 0 {
				exp := time.Now().UTC().Add(a.cfg.InputTimeout).Truncate(time.Second)
				if req.ExpiresAt.IsZero() || exp.Before(req.ExpiresAt) {
					req.ExpiresAt = exp
				}
			}
			return loop.ToolResult{}, st.PassUp(ctx, req, string(r.remoteID), "agent:"+a.cfg.Name)
		}
		var ans loop.InputAnswer
		if ans, err = st.AnswerByModel(ctx, req); err != nil {
			break
		}
		var msg *a2a.Message
		if msg, err = r.answerMessage(loop.InputRequest{Route: &loop.InputRoute{InputID: req.InputID}, InputType: req.InputType,
			RequireUser: req.RequireUser}, ans, env); err != nil {
			break
		}
		content, status, err = r.answer(ctx, msg)
	}
	if loop.Suspended(ctx) {
		// The host hands the parent's turn on (its shutdown): the remote
		// task goes on, and the resumed call follows it by its recorded
		// id, as after a crash.
		return loop.ToolResult{}, ctx.Err()
	}
	if ctx.Err() != nil {
		r.cancelRemote()
		st.Finish(ctx, loop.TaskCanceled, "", ctx.Err())
		return loop.ToolResult{}, ctx.Err()
	}
	if errors.Is(err, errUnknownOutcome) {
		res := loop.InterruptedResult(call)
		st.Finish(ctx, loop.TaskFailed, "", errors.New(res.Content))
		return res, nil
	}
	if err != nil {
		if errors.Is(err, errEventBudget) {
			// Its task is stopped: nothing more of it is wanted.
			a.log.LogAttrs(ctx, slog.LevelWarn, "remote agent call stopped", slog.String("agent", a.cfg.Name),
				slog.String("task_id", string(r.remoteID)), slog.String("error", err.Error()))
			r.cancelRemote()
		} else if status == loop.TaskWaitingInput || status == loop.TaskWaitingAuth {
			r.cancelRemote() // its request could not be answered
		}
		st.Finish(ctx, loop.TaskFailed, "", err)
		return errResult("agent %q failed: %v", a.cfg.Name, err)
	}
	switch status {
	case loop.TaskCompleted:
		st.Finish(ctx, loop.TaskCompleted, content, nil)
		return loop.ToolResult{ToolCallID: call.ID, Content: content}, nil
	}
	err = fmt.Errorf("the remote task ended %s: %s", status, content)
	st.Finish(ctx, status, "", err)
	return errResult("agent %q: %v", a.cfg.Name, err)
}

// awaitCard tries the agent's card with a growing pause (0.1s to 2s) for
// Config.Reconnect.
func (a *Agent) awaitCard(ctx context.Context) (*a2aclient.Client, error) {
	pause := 100 * time.Millisecond
	deadline := time.Now().Add(a.cfg.Reconnect)
	for {
		client, _, err := a.readyOr(ctx, true)
		if err == nil || time.Now().After(deadline) {
			return client, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// errUnknownOutcome: a resumed call whose remote task cannot be found
// (the message may or may not have reached the agent). It is reported
// interrupted, never sent again.
var errUnknownOutcome = errors.New("the remote task of the interrupted call is not known")

// RemoteTaskKey is the sub-task metadata key that records the remote
// task's id once the remote agent acknowledged the message.
const RemoteTaskKey = loop.RemoteTaskKey

// run is one call of a remote agent.
type run struct {
	a        *Agent
	st       *loop.Subtask
	client   *a2aclient.Client
	remoteID a2a.TaskID
	// depth is the calling turn's sub-agent depth.
	depth int
	// per response artifact of the remote task: deltas forwarded, text
	deltas    map[string]int
	texts     map[string]*strings.Builder
	order     []string
	completes map[string]bool
	// last is the status message of the paused remote task (it says what
	// the task needs).
	last *a2a.Message
	// events and eventBytes are what the call forwarded so far; over is
	// set once it went past a bound (nothing more is forwarded, and the
	// call ends with it).
	events     int
	eventBytes int64
	over       error
}

// noHistory asks GetTask for the task without its history: the call
// reads its status and artifacts only.
var noHistory = 0

// errEventBudget: a remote agent sent more events, or more bytes of them,
// in one call than its bounds allow.
var errEventBudget = errors.New("remote agent over its event budget")

// emit forwards ev, n bytes of text, into the sub-task, within the call's
// budget. Past it nothing more is forwarded and r.over says why.
func (r *run) emit(ev loop.Event, n int) {
	if r.over != nil {
		return
	}
	n += 64 // an event's own fields
	cfg := &r.a.cfg
	switch {
	case r.events+1 > cfg.EventsPerCall:
		r.over = fmt.Errorf("%w: more than %d events in one call (eventsPerCall)", errEventBudget, cfg.EventsPerCall)
	case r.eventBytes+int64(n) > cfg.EventBytesPerCall:
		r.over = fmt.Errorf("%w: more than %d bytes of events in one call (eventBytesPerCall)", errEventBudget, cfg.EventBytesPerCall)
	default:
		r.events++
		r.eventBytes += int64(n)
		r.st.Emit(ev)
	}
}

// callKey is the deterministic id of a call's message and context on the
// remote agent, derived from the sub-task (so from the parent task and the
// tool call): a resumed call finds the task it started by its context
// (ListTasks) when the kill came before its id was recorded.
func callKey(subtaskID string) string {
	sum := sha256.Sum256([]byte(subtaskID))
	return "looopy-sub-" + hex.EncodeToString(sum[:16])
}

// key is the call's callKey: a call that started over as a new call under
// its id (Subtask.Attempt) gets its own, so that its remote task is in a
// context of its own, without the abandoned call's history, and a resumed
// call finds only its own task there.
func (r *run) key() string {
	if r.st.Attempt == 0 {
		return callKey(r.st.ID)
	}
	return callKey(r.st.ID + "#" + strconv.Itoa(r.st.Attempt))
}

// stream sends the prompt and forwards the remote task's events as the
// sub-task's until the task ends or pauses. It returns the answer (or the
// status message of a task that did not complete) and the final status.
func (r *run) stream(ctx context.Context, prompt string) (string, loop.TaskStatus, error) {
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(prompt))
	key := r.key()
	msg.ID, msg.ContextID = key, key
	// The remote task's thoughts come along, every level it records: the
	// parent's readers choose theirs.
	msg.Metadata = map[string]any{loop.ThoughtVerbosityKey: "detailed", loop.CallChainKey: r.chain(ctx).Value()}
	status, message, final, err := r.send(ctx, msg)
	if final {
		return message, status, nil
	}
	if ctx.Err() != nil {
		return "", loop.TaskCanceled, ctx.Err()
	}
	if r.over != nil {
		return "", "", r.over
	}
	if errors.Is(err, errRemoteBusy) {
		return "", "", err
	}
	if r.remoteID == "" {
		if err == nil {
			err = errors.New("its stream ended before it named a task")
		}
		if errors.Is(err, a2a.ErrInvalidParams) || errors.Is(err, a2a.ErrInvalidRequest) {
			return "", "", fmt.Errorf("the remote agent refused the message: %w", err)
		}
		return "", "", fmt.Errorf("the remote agent died: %w", err)
	}
	return r.follow(ctx)
}

// chain is the call chain the message of this call carries: the calling
// turn's, this host in it, one level deeper than the calling turn.
func (r *run) chain(ctx context.Context) loop.CallChain {
	c := loop.CallChainFrom(ctx)
	c.Hosts = append([]string(nil), c.Hosts...)
	if id := r.a.cfg.ChainID; id != "" && !c.Has(id) {
		c.Hosts = append(c.Hosts, id)
	}
	c.Depth = r.depth + 1
	return c
}

// resume takes up a call a restart of the parent cut off: the remote task
// it started (recorded, or found by the call's context), followed to its
// end. The message is never sent again.
func (r *run) resume(ctx context.Context) (string, loop.TaskStatus, error) {
	var id string
	if p := r.st.Previous; p != nil {
		id, _ = p.Metadata[RemoteTaskKey].(string)
	}
	if id == "" {
		// Killed between sending and recording: the task, if the agent
		// took it, is the one in the call's context.
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		list, err := r.client.ListTasks(lctx, &a2a.ListTasksRequest{ContextID: r.key()})
		cancel()
		if err != nil || len(list.Tasks) != 1 {
			return "", "", errUnknownOutcome
		}
		id = string(list.Tasks[0].ID)
	}
	r.noteRemote(ctx, a2a.TaskID(id), "the parent host restarted: following the remote task again")
	return r.follow(ctx)
}

// follow reads the remote task until it ends or pauses, subscribing to it
// while it runs. An agent that does not answer is tried again with a
// growing pause, for Config.Reconnect; a task the agent no longer knows,
// or an agent silent for longer, is an error.
func (r *run) follow(ctx context.Context) (string, loop.TaskStatus, error) {
	var downSince time.Time
	pause := 100 * time.Millisecond
	wait := func() error {
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
		return nil
	}
	for {
		task, err := r.client.GetTask(ctx, &a2a.GetTaskRequest{ID: r.remoteID, HistoryLength: &noHistory})
		if ctx.Err() != nil {
			return "", loop.TaskCanceled, ctx.Err()
		}
		if errors.Is(err, a2a.ErrTaskNotFound) {
			return "", "", fmt.Errorf("the remote agent no longer knows its task %s", r.remoteID)
		}
		if errors.Is(err, errEventBudget) {
			r.over = err // an answer past the bound: not asked again
			return "", "", err
		}
		if err != nil {
			if downSince.IsZero() {
				downSince = time.Now()
				r.emit(&loop.TaskStatusEvent{Header: loop.Header{Kind: loop.KindTaskStatus}, Status: loop.TaskWorking,
					Message: "the remote agent does not answer: trying again", Metadata: map[string]any{RemoteTaskKey: string(r.remoteID)}}, 64)
			}
			if time.Since(downSince) > r.a.cfg.Reconnect {
				return "", "", fmt.Errorf("the remote agent died: no answer for %s: %w", r.a.cfg.Reconnect, err)
			}
			if err := wait(); err != nil {
				return "", loop.TaskCanceled, err
			}
			continue
		}
		downSince = time.Time{}
		status := fromState(task.Status.State)
		if status.Terminal() || status == loop.TaskWaitingInput || status == loop.TaskWaitingAuth {
			content, st, err := r.final(ctx, task)
			if err == nil && r.over != nil {
				return "", "", r.over
			}
			return content, st, err
		}
		// Still running: its events, live, until it ends or the stream
		// breaks; then its record again.
		_, _, final, _ := r.forward(ctx, r.client.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: r.remoteID}))
		if r.over != nil {
			return "", "", r.over
		}
		if !final {
			if err := wait(); err != nil {
				return "", loop.TaskCanceled, err
			}
		}
	}
}

// forward reads a stream of the remote task and forwards its events as the
// sub-task's. final is set when the stream said how the call ends (an
// answer message, or the task's end or pause, read back by final()).
func (r *run) forward(ctx context.Context, events iter.Seq2[a2a.Event, error]) (status loop.TaskStatus, message string, final bool, err error) {
	for ev, err := range events {
		if err != nil {
			return "", "", false, err
		}
		switch e := ev.(type) {
		case *a2a.Task:
			r.noteRemote(ctx, e.ID, tookTask)
			status = fromState(e.Status.State)
		case *a2a.TaskStatusUpdateEvent:
			r.noteRemote(ctx, e.TaskID, tookTask)
			status = fromState(e.Status.State)
			if th := thoughtOf(e); th != nil && status == loop.TaskWorking {
				r.emit(th, len(th.Content)+len(th.ThoughtID)+len(th.ThoughtType)+len(th.Verbosity))
			} else if m := statusText(e.Status.Message); status == loop.TaskWorking && m != "" {
				r.emit(&loop.TaskStatusEvent{Header: loop.Header{Kind: loop.KindTaskStatus}, Status: loop.TaskWorking,
					Message: m, Metadata: map[string]any{RemoteTaskKey: string(r.remoteID)}}, len(m))
			}
		case *a2a.TaskArtifactUpdateEvent:
			r.noteRemote(ctx, e.TaskID, tookTask)
			r.artifact(e)
		case *a2a.Message:
			return loop.TaskCompleted, partsText(e.Parts), true, nil
		}
		if r.over != nil {
			return "", "", false, r.over
		}
		if status.Terminal() || status == loop.TaskWaitingInput || status == loop.TaskWaitingAuth {
			if r.remoteID == "" {
				return "", "", false, errors.New("the remote task ended before it was named")
			}
			task, gerr := r.client.GetTask(ctx, &a2a.GetTaskRequest{ID: r.remoteID, HistoryLength: &noHistory})
			if errors.Is(gerr, errEventBudget) {
				r.over = gerr
			}
			if gerr != nil {
				return "", "", false, gerr
			}
			content, st, ferr := r.final(ctx, task)
			if ferr == nil {
				ferr = r.over
			}
			if ferr != nil {
				return "", "", false, ferr
			}
			return st, content, true, nil
		}
	}
	return status, "", false, nil
}

// artifact forwards a chunk of one of the remote task's text artifacts:
// each of its responses (one artifact per model response on a Looopy host)
// is a response of the sub-task, its complete text sent when its last
// chunk comes.
func (r *run) artifact(e *a2a.TaskArtifactUpdateEvent) {
	if r.deltas == nil {
		r.deltas, r.texts = map[string]int{}, map[string]*strings.Builder{}
	}
	resp := string(e.Artifact.ID)
	if rest, ok := strings.CutPrefix(resp, "content-"+string(e.TaskID)+"-"); ok {
		resp = rest
	}
	tb := r.texts[resp]
	if tb == nil {
		tb = &strings.Builder{}
		r.texts[resp] = tb
		r.order = append(r.order, resp)
	}
	if !e.Append {
		tb.Reset()
	}
	chunk := partsText(e.Artifact.Parts)
	if chunk != "" {
		r.emit(&loop.ContentDelta{Header: loop.Header{Kind: loop.KindContentDelta}, Delta: chunk,
			Index: r.deltas[resp], Response: resp}, len(chunk)+len(resp))
		if r.over != nil {
			return // the text kept is bounded by the budget too
		}
		tb.WriteString(chunk)
		r.deltas[resp]++
	}
	if e.LastChunk && tb.Len() > 0 && !r.completes[resp] {
		r.completes[resp] = true
		r.emit(&loop.ContentComplete{Header: loop.Header{Kind: loop.KindContentComplete}, Content: tb.String(),
			Response: resp, Deltas: r.deltas[resp]}, tb.Len()+len(resp))
	}
}

// final reads how the remote task ended: its answer (its text artifacts)
// and usage for a completed task, its status message otherwise.
func (r *run) final(ctx context.Context, task *a2a.Task) (string, loop.TaskStatus, error) {
	status := fromState(task.Status.State)
	if status != loop.TaskCompleted {
		r.last = task.Status.Message
		return statusText(task.Status.Message), status, nil
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
		for _, resp := range r.order {
			answer += r.texts[resp].String()
		}
	}
	if len(r.completes) == 0 && answer != "" {
		// No response came whole through the stream (a resumed call, a
		// stream that broke): the answer is sent complete now.
		r.emit(&loop.ContentComplete{Header: loop.Header{Kind: loop.KindContentComplete}, Content: answer,
			Response: "answer"}, len(answer))
	}
	return answer, status, nil
}

const tookTask = "the remote agent took the task"

// noteRemote records the remote task's id the first time it is seen: in
// the sub-task's record (durably, before anything else of the call goes
// on, so a restart finds it) and in an event.
func (r *run) noteRemote(ctx context.Context, id a2a.TaskID, why string) {
	if r.remoteID != "" || id == "" {
		return
	}
	r.remoteID = id
	if cp := r.a.cfg.Crashpoint; cp != nil && why == tookTask {
		cp(PointAcknowledged)
	}
	if err := r.st.Note(ctx, map[string]any{RemoteTaskKey: string(id)}); err != nil {
		r.a.log.LogAttrs(ctx, slog.LevelWarn, "remote task id not recorded: a restart now reports the call interrupted",
			slog.String("agent", r.a.cfg.Name), slog.String("task_id", string(id)), slog.String("error", err.Error()))
	}
	r.emit(&loop.TaskStatusEvent{Header: loop.Header{Kind: loop.KindTaskStatus}, Status: loop.TaskWorking,
		Message: why, Metadata: map[string]any{RemoteTaskKey: string(id), "remoteAgent": r.a.cfg.URL}}, len(why)+len(id)+len(r.a.cfg.URL))
}

// CancelRemoteTask cancels the task remoteTaskID of this agent (agentID
// its name; another name is not this agent's: handled false). The parent
// ended (canceled, or its passed-up request expired) while the remote task
// waited for an answer it will not get (loop.RemoteTaskCanceler). A task
// that has ended already is left as it is.
func (a *Agent) CancelRemoteTask(ctx context.Context, agentID, remoteTaskID string) (bool, error) {
	if agentID != a.cfg.Name {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	client, _, err := a.ready(ctx)
	if err != nil {
		return true, fmt.Errorf("agent %q not reachable: %w", a.cfg.Name, err)
	}
	if _, err := client.CancelTask(ctx, &a2a.CancelTaskRequest{ID: a2a.TaskID(remoteTaskID)}); err != nil &&
		!errors.Is(err, a2a.ErrTaskNotCancelable) {
		return true, fmt.Errorf("agent %q: cancel task %q: %w", a.cfg.Name, remoteTaskID, err)
	}
	return true, nil
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

// thoughtOf reads a thought a Looopy host sends as a working status update
// (metadata "thought": its id, type, verbosity, index; the message its
// text).
func thoughtOf(e *a2a.TaskStatusUpdateEvent) *loop.ThoughtStream {
	md, ok := e.Metadata["thought"].(map[string]any)
	if !ok {
		return nil
	}
	text := statusText(e.Status.Message)
	if text == "" {
		return nil
	}
	str := func(k string) string { v, _ := md[k].(string); return v }
	idx, _ := md["index"].(float64)
	th := &loop.ThoughtStream{Header: loop.Header{Kind: loop.KindThoughtStream}, ThoughtID: str("thoughtId"),
		ThoughtType: str("thoughtType"), Verbosity: str("verbosity"), Content: text, Index: int(idx),
		Metadata: map[string]any{"source": "remote"}}
	if th.ThoughtType == "" {
		th.ThoughtType = "reasoning"
	}
	if _, err := loop.ParseVerbosity(th.Verbosity); err != nil || th.Verbosity == "" {
		th.Verbosity = "normal"
	}
	return th
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

// IsBusy reports whether err is a remote Looopy host's refusal because the
// context runs a turn (loop.ErrBusy on its side): over A2A 1.0 the reason
// in the A2A error's ErrorInfo metadata, as the client SDK hands it over.
// A 0.3 error keeps only its code and message through the SDK: a Looopy
// host leads the message of a -32000 error with its reason
// ("CONTEXT_BUSY: ..."), which is matched with the server-error code and
// nothing else of the message.
func IsBusy(err error) bool { return reasonOf(err) == loop.ReasonBusy }

// Reasons of a remote Looopy host's refusals for now: its turn limit, or
// the turns this host (its principal there) may run at once.
const (
	ReasonHostBusy = "HOST_BUSY"
	ReasonQuota    = "QUOTA_EXCEEDED"
)

// IsHostBusy reports whether err is a remote host's refusal to start a
// turn for now (HOST_BUSY or QUOTA_EXCEEDED), read as IsBusy reads its
// reason: a message sent again later may be taken.
func IsHostBusy(err error) bool {
	r := reasonOf(err)
	return r == ReasonHostBusy || r == ReasonQuota
}

// reasonOf is the reason a remote Looopy host gave for refusing: the
// ErrorInfo metadata's (A2A 1.0), or the one leading the message of a 0.3
// server error; "" when err says none.
func reasonOf(err error) string {
	var ae *a2a.Error
	if !errors.As(err, &ae) {
		return ""
	}
	for _, d := range ae.TypedDetails {
		if d == nil || d.TypeURL != errordetails.ErrorInfoType {
			continue
		}
		switch m := d.Value["metadata"].(type) {
		case map[string]string:
			if r := m["reason"]; r != "" {
				return r
			}
		case map[string]any:
			if r, _ := m["reason"].(string); r != "" {
				return r
			}
		}
	}
	if errors.Is(ae.Err, a2a.ErrServerError) {
		if r, _, ok := strings.Cut(ae.Message, ": "); ok && isReason(r) {
			return r
		}
	}
	return ""
}

// isReason says s looks like a reason: upper-case letters and
// underscores.
func isReason(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < 'A' || c > 'Z') && c != '_' {
			return false
		}
	}
	return true
}

// retryDelayOf is the delay a google.rpc.RetryInfo detail of err asks
// (A2A 1.0), 0 when it has none.
func retryDelayOf(err error) time.Duration {
	var ae *a2a.Error
	if !errors.As(err, &ae) {
		return 0
	}
	var out time.Duration
	for _, d := range ae.TypedDetails {
		if d == nil || !strings.HasSuffix(d.TypeURL, "google.rpc.RetryInfo") {
			continue
		}
		if s, ok := d.Value["retryDelay"].(string); ok {
			if v, err := time.ParseDuration(s); err == nil && v > 0 {
				out = max(out, v)
			}
		}
	}
	return out
}

// errRemoteBusy: the remote host refused the call's message for now for
// longer than Config.BusyRetry allows.
var errRemoteBusy = errors.New("the remote host stayed busy")

// send sends msg and forwards the remote task's events (forward). A
// refusal for now (IsHostBusy) is tried again after a pause, doubled from
// Config.BusyPause and never shorter than the Retry-After the remote host
// asks, for Config.BusyRetry; a refusal asking for longer than what is
// left ends at once. Each refusal is announced on the sub-task. ctx ends
// the waiting at once.
func (r *run) send(ctx context.Context, msg *a2a.Message) (loop.TaskStatus, string, bool, error) {
	cfg := &r.a.cfg
	var start, deadline time.Time
	pause := cfg.BusyPause
	for tries := 1; ; tries++ {
		box := &retryAfterBox{}
		sctx := context.WithValue(ctx, retryAfterKey{}, box)
		status, message, final, err := r.forward(ctx, r.client.SendStreamingMessage(sctx, &a2a.SendMessageRequest{Message: msg}))
		if final || err == nil || ctx.Err() != nil || r.over != nil || !IsHostBusy(err) {
			return status, message, final, err
		}
		reason := reasonOf(err)
		if cfg.BusyRetry < 0 {
			r.a.log.LogAttrs(ctx, slog.LevelWarn, "remote host busy: the call gives up (busyRetry off)", slog.String("agent", cfg.Name),
				slog.String("reason", reason))
			return "", "", false, fmt.Errorf("%w (%s): 1 refusal(s), not sent again (busyRetry off): %w", errRemoteBusy, reason, err)
		}
		now := time.Now()
		if start.IsZero() {
			start, deadline = now, now.Add(cfg.BusyRetry)
		}
		asked := max(box.get(), retryDelayOf(err))
		left := deadline.Sub(now)
		if left <= 0 || asked > left {
			why := fmt.Sprintf("%d refusal(s) over %s (busyRetry %s)", tries, now.Sub(start).Round(time.Millisecond), cfg.BusyRetry)
			if left > 0 {
				why = fmt.Sprintf("%d refusal(s); it asks to wait %s, past what is left of busyRetry (%s)", tries, asked, cfg.BusyRetry)
			}
			r.a.log.LogAttrs(ctx, slog.LevelWarn, "remote host busy: the call gives up", slog.String("agent", cfg.Name),
				slog.String("reason", reason), slog.Int("tries", tries))
			return "", "", false, fmt.Errorf("%w (%s): %s: %w", errRemoteBusy, reason, why, err)
		}
		wait := min(max(pause, asked), left)
		r.a.log.LogAttrs(ctx, slog.LevelInfo, "remote host busy: trying again", slog.String("agent", cfg.Name),
			slog.String("reason", reason), slog.Int("tries", tries), slog.Duration("wait", wait))
		m := fmt.Sprintf("the remote host is busy (%s): trying again in %s", reason, wait.Round(time.Millisecond))
		r.emit(&loop.TaskStatusEvent{Header: loop.Header{Kind: loop.KindTaskStatus}, Status: loop.TaskWorking,
			Message: m, Metadata: map[string]any{"remoteBusy": reason}}, len(m))
		if r.over != nil {
			return "", "", false, r.over
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return loop.TaskCanceled, "", false, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, maxBusyPause)
	}
}

// answer sends msg, an answer to the paused remote task's request, and
// follows the task as stream does. An answer that meets the task's paused
// turn still winding down (busy) is sent again, a few times.
func (r *run) answer(ctx context.Context, msg *a2a.Message) (string, loop.TaskStatus, error) {
	for attempt := 0; ; attempt++ {
		status, message, final, err := r.send(ctx, msg)
		if final {
			return message, status, nil
		}
		if ctx.Err() != nil {
			return "", loop.TaskCanceled, ctx.Err()
		}
		if r.over != nil {
			return "", "", r.over
		}
		if errors.Is(err, errRemoteBusy) {
			// The answer did not get through: the remote task would wait
			// for it in vain.
			r.cancelRemote()
			return "", "", err
		}
		if err != nil && attempt < 50 && IsBusy(err) {
			t := time.NewTimer(time.Duration(20*(attempt+1)) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return "", loop.TaskCanceled, ctx.Err()
			case <-t.C:
			}
			continue
		}
		if err != nil && status == "" {
			return r.refused(ctx, msg, fmt.Errorf("the remote agent refused the answer: %w", err))
		}
		return r.follow(ctx)
	}
}

// refused is the call's outcome when the remote agent refused the answer
// to its task's request (refusal): the task may have moved on without it
// (answered on the remote host directly, expired there, canceled,
// completed). The task is read back: when it ended, or waits for another
// request, the answered request was stale: an event of the sub-task says
// so and the call takes the task's actual outcome (its answer, its end, or
// its new request, passed up again). A task still waiting for the same
// request refused the answer itself: that is the call's error.
func (r *run) refused(ctx context.Context, msg *a2a.Message, refusal error) (string, loop.TaskStatus, error) {
	answered := answeredInputIDs(msg)
	content, status, err := r.follow(ctx)
	if err != nil || ctx.Err() != nil {
		return "", "", refusal
	}
	if status == loop.TaskWaitingInput || status == loop.TaskWaitingAuth {
		if req := r.request(status, content); len(answered) == 0 || answered[req.InputID] {
			return "", "", refusal
		}
	}
	r.a.log.LogAttrs(ctx, slog.LevelInfo, "remote task moved on before the answer: its outcome is taken",
		slog.String("agent", r.a.cfg.Name), slog.String("task_id", string(r.remoteID)), slog.String("status", string(status)))
	r.st.Emit(&loop.TaskStatusEvent{Header: loop.Header{Kind: loop.KindTaskStatus}, Status: loop.TaskWorking,
		Message:  fmt.Sprintf("the request passed up is withdrawn: the remote task moved on without this answer (it is %s now); the call takes its outcome", status),
		Metadata: map[string]any{RemoteTaskKey: string(r.remoteID), "withdrawn": true}})
	return content, status, nil
}

// movedOn takes the outcome of the remote task that moved on without the
// answer its parent's client was asked for (its request withdrawn): the
// task is followed to its end or its next pause, and an event of the
// sub-task says the request is withdrawn.
func (r *run) movedOn(ctx context.Context) (string, loop.TaskStatus, error) {
	content, status, err := r.follow(ctx)
	if err != nil || ctx.Err() != nil {
		return content, status, err
	}
	r.a.log.LogAttrs(ctx, slog.LevelInfo, "remote task moved on without the parent's answer: its outcome is taken",
		slog.String("agent", r.a.cfg.Name), slog.String("task_id", string(r.remoteID)), slog.String("status", string(status)))
	r.st.Emit(&loop.TaskStatusEvent{Header: loop.Header{Kind: loop.KindTaskStatus}, Status: loop.TaskWorking,
		Message:  fmt.Sprintf("the request passed up is withdrawn: the remote task moved on without an answer from here (it is %s now); the call takes its outcome", status),
		Metadata: map[string]any{RemoteTaskKey: string(r.remoteID), "withdrawn": true}})
	return content, status, nil
}

// RemoteWatchEvery is how often a watched task of this agent (agentID its
// name; another name is not this agent's: handled false) is read
// (loop.RemoteTaskWatcher): Config.WatchEvery.
func (a *Agent) RemoteWatchEvery(agentID string) (time.Duration, bool) {
	if agentID != a.cfg.Name {
		return 0, false
	}
	return a.cfg.WatchEvery, true
}

// RemoteTaskMovedOn reads the task remoteTaskID of this agent once
// (loop.RemoteTaskWatcher) and says whether it no longer waits for its
// request inputID: it is not paused any more (answered on its host
// directly, canceled, failed, completed), it asks for another request, or
// the agent no longer knows it. An error: the task was not read (the
// agent does not answer, its card is not fetched, ctx ended).
func (a *Agent) RemoteTaskMovedOn(ctx context.Context, agentID, remoteTaskID, inputID string) (bool, error) {
	if agentID != a.cfg.Name {
		return false, fmt.Errorf("remote agent %q: the task of agent %q is not this agent's", a.cfg.Name, agentID)
	}
	client, _, err := a.ready(ctx)
	if err != nil {
		return false, err
	}
	task, err := client.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(remoteTaskID), HistoryLength: &noHistory})
	switch {
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, a2a.ErrTaskNotFound):
		return true, nil
	case err != nil:
		a.log.LogAttrs(ctx, slog.LevelDebug, "watched remote task not read", slog.String("agent", a.cfg.Name),
			slog.String("task_id", remoteTaskID), slog.String("error", err.Error()))
		return false, err
	}
	return a.movedOnFrom(task, inputID), nil
}

// movedOnFrom says the remote task no longer waits for its request
// inputID: it is not paused, or its open request is another one.
func (a *Agent) movedOnFrom(task *a2a.Task, inputID string) bool {
	status := fromState(task.Status.State)
	if status != loop.TaskWaitingInput && status != loop.TaskWaitingAuth {
		return true
	}
	r := &run{a: a, remoteID: task.ID, last: task.Status.Message}
	return r.request(status, statusText(task.Status.Message)).InputID != inputID
}

// answeredInputIDs are the inputIds msg answers (the extension's
// responses part).
func answeredInputIDs(msg *a2a.Message) map[string]bool {
	out := map[string]bool{}
	if msg == nil {
		return out
	}
	for _, p := range msg.Parts {
		if p == nil || p.Metadata[loop.InteractionURI] != "responses" {
			continue
		}
		d, ok := p.Content.(a2a.Data)
		if !ok {
			continue
		}
		b, _ := json.Marshal(d.Value)
		var body struct {
			Responses []struct {
				InputID string `json:"inputId"`
			} `json:"responses"`
		}
		if json.Unmarshal(b, &body) == nil {
			for _, r := range body.Responses {
				out[r.InputID] = true
			}
		}
	}
	return out
}

// request is what the paused remote task asks for: the first open request
// of the humans-in-the-loop extension in its status message, or, from an
// agent that does not speak it, a text request for its status text (a
// person answers it: nothing says an agent may).
func (r *run) request(status loop.TaskStatus, text string) loop.InputRequest {
	if r.last != nil {
		for _, p := range r.last.Parts {
			if p == nil || p.Metadata[loop.InteractionURI] != "requests" {
				continue
			}
			d, ok := p.Content.(a2a.Data)
			if !ok {
				continue
			}
			b, _ := json.Marshal(d.Value)
			var body struct {
				Requests []loop.InputRequest `json:"requests"`
			}
			// The request is stored on the parent task: one nested past
			// the bound is not taken (the task is paused on the text).
			if jsonlimit.Check(b, jsonlimit.MaxDepth) == nil && json.Unmarshal(b, &body) == nil {
				for _, q := range body.Requests {
					if q.InputID != "" && q.Answer == nil {
						// Its route, if any, is the remote host's own:
						// nothing here follows it.
						q.Route = nil
						return q
					}
				}
			}
		}
	}
	req := loop.InputRequest{InputType: loop.InputText, RequireUser: true, Prompt: text}
	if status == loop.TaskWaitingAuth {
		req.InputType = loop.InputAuth
		req.Auth = &loop.AuthNeed{Provider: "remote:" + r.a.cfg.Name}
	}
	req.InputID = "remote:" + string(r.remoteID)
	if req.Prompt == "" {
		req.Prompt = fmt.Sprintf("the remote agent %s asks for input", r.a.cfg.Name)
	}
	return req
}

// answerMessage is the message that answers the remote task's request
// req: the extension's responses part (with the credential the parent's
// client supplied, for an auth request), or the text alone for an agent
// that did not ask through the extension.
func (r *run) answerMessage(req loop.InputRequest, a loop.InputAnswer, env *loop.ToolEnv) (*a2a.Message, error) {
	childID := ""
	if req.Route != nil {
		childID = req.Route.InputID
	}
	var msg *a2a.Message
	if strings.HasPrefix(childID, "remote:") || childID == "" {
		text := a.Text
		if text == "" && a.Result != nil {
			text = a.Result.Content
		}
		if text == "" && a.Decision != "" {
			text = a.Decision
			if a.Reason != "" {
				text += ": " + a.Reason
			}
		}
		if req.InputType == loop.InputAuth {
			return nil, fmt.Errorf("the remote agent asked for a credential without the humans-in-the-loop extension: there is no way to send it")
		}
		msg = a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
	} else {
		resp := map[string]any{"inputId": childID}
		if a.ProvidedBy != "" {
			resp["providedBy"] = a.ProvidedBy
		}
		if a.UserID != "" {
			resp["userId"] = a.UserID
		}
		if a.AgentID != "" {
			resp["agentId"] = a.AgentID
		}
		if a.Decision != "" {
			resp["decision"] = a.Decision
		}
		if a.Reason != "" {
			resp["reason"] = a.Reason
		}
		if len(a.Arguments) > 0 {
			resp["arguments"] = a.Arguments
		}
		if a.Text != "" {
			resp["text"] = a.Text
		}
		if a.Result != nil {
			res := map[string]any{"content": a.Result.Content}
			if a.Result.IsError {
				res["isError"] = true
			}
			if len(a.Result.Data) > 0 {
				res["data"] = a.Result.Data
			}
			resp["result"] = res
		}
		if req.InputType == loop.InputAuth && req.Auth != nil && req.Auth.Provider != loop.ProviderCaller {
			tok, ok := env.Credentials.Get(r.st.ID, req.Auth.Holder, req.Auth.Provider)
			if !ok {
				return nil, fmt.Errorf("the credential for the remote agent's request %q is no longer held", childID)
			}
			resp["credential"] = map[string]any{"token": tok}
		}
		b, err := json.Marshal(map[string]any{"responses": []any{resp}})
		if err != nil {
			return nil, err
		}
		var data map[string]any
		_ = json.Unmarshal(b, &data)
		dp := a2a.NewDataPart(data)
		dp.Metadata = map[string]any{loop.InteractionURI: "responses"}
		msg = a2a.NewMessage(a2a.MessageRoleUser, dp)
		msg.Extensions = []string{loop.InteractionURI}
	}
	msg.TaskID = r.remoteID
	return msg, nil
}
