package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/looopy-go/looopy/loop"
)

// DefaultAgentTool is the name of the tool that asks the agent itself.
const DefaultAgentTool = "ask_agent"

// Agent is the host's agent, offered to MCP clients as one tool.
type Agent interface {
	// Ask runs one turn of the agent for auth in the conversation
	// contextID ("" starts a new one) and returns the answer, the context and
	// the task it ran as. progress, when not nil, is called with each piece
	// of text or tool activity as the turn goes. Cancelling ctx cancels the
	// turn.
	Ask(ctx context.Context, auth *loop.AuthContext, contextID, prompt string, progress func(message string)) (AgentAnswer, error)
}

// AgentAnswer is the outcome of one turn asked over MCP.
type AgentAnswer struct {
	Text      string `json:"text"`
	ContextID string `json:"contextId"`
	TaskID    string `json:"taskId"`
	State     string `json:"state"` // the task's final state: completed, failed, canceled, input-required, …
}

// ServerConfig configures a Server. A zero field means its default.
type ServerConfig struct {
	// Name and Version are the server's implementation info (default
	// "looopy", "dev").
	Name, Version string
	// Instructions are shown to clients on initialize.
	Instructions string
	// Tools are the tools offered (required). The list is read again
	// before each tools/list and tools/call, so hot-loaded plugins appear and
	// disappear without a reconnect (clients are told: tools/list_changed).
	Tools loop.Toolset
	// Model is lent to tools that run sub-agents (agent plugins); nil: such
	// tools answer that no model is available.
	Model loop.Model
	// Agent, when set, is offered as one more tool, AgentTool.
	Agent Agent
	// AgentTool names the agent's tool (default DefaultAgentTool).
	AgentTool string
	// Principal is who a call runs as when the transport authenticates no
	// one (stdio, or HTTP with auth off). Default "local".
	Principal string
	// MaxMessageBytes bounds one message a client sends over stdio
	// (ServeStdio); default DefaultMaxMessageBytes. Over HTTP the body
	// limit (HTTPOptions.MaxBodyBytes) bounds it.
	MaxMessageBytes int
	Logger          *slog.Logger // nil: discard
}

// Server serves a toolset (and optionally the agent) over MCP. Safe for
// concurrent use; one Server serves any number of sessions.
type Server struct {
	cfg ServerConfig
	log *slog.Logger
	srv *sdk.Server

	mu    sync.Mutex
	known map[string]string // tool name -> fingerprint of its definition
}

// NewServer returns a server of cfg.Tools.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Tools == nil {
		return nil, fmt.Errorf("mcp: %w: a server needs a toolset", loop.ErrInvalid)
	}
	if cfg.Name == "" {
		cfg.Name = "looopy"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.AgentTool == "" {
		cfg.AgentTool = DefaultAgentTool
	}
	if cfg.Principal == "" {
		cfg.Principal = "local"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, known: map[string]string{}}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: cfg.Name, Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: cfg.Instructions,
		Logger:       log,
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
	})
	s.srv.AddReceivingMiddleware(s.refreshBefore)
	if err := s.Refresh(context.Background()); err != nil {
		log.Warn("mcp: first tool listing failed", "error", err.Error())
	}
	return s, nil
}

// refreshBefore brings the tool list up to date before the methods that
// read it.
func (s *Server) refreshBefore(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if method == "tools/list" || method == "tools/call" {
			if err := s.Refresh(ctx); err != nil {
				s.log.WarnContext(ctx, "mcp: tool listing failed; serving the last list", "error", err.Error())
			}
		}
		return next(ctx, method, req)
	}
}

// Refresh reads the toolset's tools and updates what clients see: new and
// changed tools are added, gone ones removed. Sessions are told when the
// list changed.
func (s *Server) Refresh(ctx context.Context) error {
	defs, err := s.cfg.Tools.Tools(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range defs {
		if d.Client || (s.cfg.Agent != nil && d.Name == s.cfg.AgentTool) {
			continue
		}
		schema, err := objectSchema(d.Parameters)
		if err != nil {
			s.log.Warn("mcp: tool left out", "tool", d.Name, "error", err.Error())
			continue
		}
		seen[d.Name] = true
		fp := fingerprint(d.Description, schema, d.Idempotent)
		if s.known[d.Name] == fp {
			continue
		}
		s.known[d.Name] = fp
		s.srv.AddTool(&sdk.Tool{
			Name: d.Name, Description: d.Description, InputSchema: schema,
			Annotations: &sdk.ToolAnnotations{IdempotentHint: d.Idempotent, OpenWorldHint: ptr(false)},
		}, s.toolHandler(d.Name))
	}
	if s.cfg.Agent != nil {
		seen[s.cfg.AgentTool] = true
		if _, ok := s.known[s.cfg.AgentTool]; !ok {
			s.known[s.cfg.AgentTool] = "agent"
			s.srv.AddTool(&sdk.Tool{
				Name:        s.cfg.AgentTool,
				Description: "Ask the agent: runs one turn of the agent (its model, tools and sub-agents) and returns its answer. Pass contextId to continue a conversation.",
				InputSchema: json.RawMessage(agentSchema),
			}, s.agentHandler)
		}
	}
	var gone []string
	for name := range s.known {
		if !seen[name] {
			gone = append(gone, name)
			delete(s.known, name)
		}
	}
	if len(gone) > 0 {
		s.srv.RemoveTools(gone...)
	}
	return nil
}

const agentSchema = `{"type":"object","properties":{` +
	`"prompt":{"type":"string","description":"what to ask the agent"},` +
	`"contextId":{"type":"string","description":"the conversation to continue (from an earlier answer); omit to start one"}},` +
	`"required":["prompt"],"additionalProperties":false}`

func ptr[T any](v T) *T { return &v }

func fingerprint(desc string, schema json.RawMessage, idem bool) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %t ", desc, idem)
	h.Write(schema)
	return hex.EncodeToString(h.Sum(nil))
}

// objectSchema returns the tool's argument schema as MCP wants it: a JSON
// object of type "object". A tool with no schema takes any object.
func objectSchema(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("argument schema is not a JSON object: %w", err)
	}
	if t, ok := m["type"]; !ok {
		m["type"] = "object"
		return json.Marshal(m)
	} else if t != "object" {
		return nil, fmt.Errorf("argument schema has type %v, MCP needs \"object\"", t)
	}
	return raw, nil
}

// principalOf returns who made a request: the principal the HTTP
// authentication found, or the configured one.
func (s *Server) principalOf(extra *sdk.RequestExtra) *loop.AuthContext {
	if extra != nil && extra.TokenInfo != nil && extra.TokenInfo.UserID != "" {
		return &loop.AuthContext{Principal: extra.TokenInfo.UserID, Scopes: slices.Clone(extra.TokenInfo.Scopes)}
	}
	return &loop.AuthContext{Principal: s.cfg.Principal}
}

// progress forwards progress to the client when it asked for it (a
// progress token on the call). Notifications go out in order, with rising
// progress, and never block the tool: a client that reads slowly loses
// intermediate ones.
type progress struct {
	ctx   context.Context
	req   *sdk.CallToolRequest
	token any
	log   *slog.Logger

	mu    sync.Mutex
	n     float64 // notifications sent; the progress value when no fraction is known
	last  float64 // the last fraction sent
	queue chan *sdk.ProgressNotificationParams
	done  chan struct{}
}

func newProgress(ctx context.Context, req *sdk.CallToolRequest, log *slog.Logger) *progress {
	p := &progress{ctx: ctx, req: req, log: log}
	if req.Params != nil {
		p.token = req.Params.GetProgressToken()
	}
	if p.token == nil {
		return p
	}
	q := make(chan *sdk.ProgressNotificationParams, 64)
	p.queue, p.done = q, make(chan struct{})
	go func() {
		defer close(p.done)
		for n := range q {
			if err := req.Session.NotifyProgress(ctx, n); err != nil {
				log.DebugContext(ctx, "mcp: progress notification not sent", "error", err.Error())
			}
		}
	}()
	return p
}

// send queues one notification. fraction is 0..1, or negative when unknown.
func (p *progress) send(fraction float64, message string) {
	if p.token == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.queue == nil {
		return
	}
	n := &sdk.ProgressNotificationParams{ProgressToken: p.token, Message: message}
	switch {
	case fraction >= 0 && fraction <= 1 && fraction > p.last:
		p.last = fraction
		n.Progress, n.Total = fraction, 1
	case p.last > 0:
		return // progress must rise; a fraction going back is not news
	default:
		p.n++
		n.Progress = p.n
	}
	select {
	case p.queue <- n:
	default: // the client is behind: drop, never block the tool
	}
}

// close flushes what is queued; the result goes out after the progress.
func (p *progress) close() {
	if p.token == nil {
		return
	}
	p.mu.Lock()
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	close(q)
	<-p.done
}

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}

// toolHandler runs one tool of the toolset.
func (s *Server) toolHandler(name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		args := json.RawMessage(`{}`)
		if req.Params != nil && len(bytes.TrimSpace(req.Params.Arguments)) > 0 && string(req.Params.Arguments) != "null" {
			args = req.Params.Arguments
		}
		who := s.principalOf(req.Extra)
		callID := newCallID()
		pr := newProgress(ctx, req, s.log)
		env := &loop.ToolEnv{
			ContextID: "mcp-" + sessionID(req.Session),
			TaskID:    callID,
			Auth:      who,
			CallID:    callID,
			Model:     s.cfg.Model,
			Tools:     s.cfg.Tools,
			Emit: func(e loop.Event) {
				if tp, ok := e.(*loop.ToolProgress); ok {
					f := tp.Progress
					if f == 0 {
						f = -1
					}
					pr.send(f, tp.Message)
				}
			},
		}
		start := time.Now()
		res, err := s.cfg.Tools.Call(ctx, loop.ToolCall{ID: callID, Name: name, Arguments: args}, env)
		pr.close()
		s.log.InfoContext(ctx, "mcp tool call", "tool", name, "principal", who.Principal,
			"took", time.Since(start).String(), "error", errText(err, res))
		if err != nil {
			// The call could not be made (unknown tool, plugin gone, …): a
			// tool error the model can read, as for a failing tool.
			return errorResult(err.Error()), nil
		}
		out := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: res.Content}}, IsError: res.IsError}
		if len(res.Data) > 0 && json.Valid(res.Data) {
			out.StructuredContent = res.Data
		}
		return out, nil
	}
}

func errText(err error, res loop.ToolResult) string {
	switch {
	case err != nil:
		return err.Error()
	case res.IsError:
		return res.Content
	}
	return ""
}

func errorResult(msg string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: msg}}, IsError: true}
}

func sessionID(ss *sdk.ServerSession) string {
	if ss != nil && ss.ID() != "" {
		return ss.ID()
	}
	return "stdio"
}

// agentHandler asks the agent.
func (s *Server) agentHandler(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	var in struct {
		Prompt    string `json:"prompt"`
		ContextID string `json:"contextId"`
	}
	dec := json.NewDecoder(bytes.NewReader(req.Params.Arguments))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return errorResult("invalid arguments: " + err.Error()), nil
	}
	if strings.TrimSpace(in.Prompt) == "" {
		return errorResult("invalid arguments: prompt is empty"), nil
	}
	pr := newProgress(ctx, req, s.log)
	ans, err := s.cfg.Agent.Ask(ctx, s.principalOf(req.Extra), in.ContextID, in.Prompt, func(m string) { pr.send(-1, m) })
	pr.close()
	if err != nil {
		return errorResult(err.Error()), nil
	}
	out := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: ans.Text}}, StructuredContent: ans}
	out.IsError = ans.State != "" && ans.State != "completed"
	return out, nil
}

// HTTPOptions configures the streamable HTTP handler.
type HTTPOptions struct {
	// Authenticate maps a credential (a bearer token or an X-API-Key) to
	// its principal; nil serves every request as the configured principal.
	// A session is bound to the principal that opened it: another
	// credential cannot use it.
	Authenticate func(token string) (*loop.AuthContext, error)
	// SessionTimeout closes sessions idle for that long (default 30m).
	SessionTimeout time.Duration
	// MaxBodyBytes bounds a request (default 4 MiB).
	MaxBodyBytes int64
	// MaxSessions bounds the sessions open at once (default 1024): past
	// it a new session is refused with 503 and Retry-After.
	MaxSessions int
	// MaxSessionsPerPrincipal bounds one principal's (default 64): a new
	// session past it ends that principal's oldest.
	MaxSessionsPerPrincipal int
}

// Handler serves MCP over streamable HTTP (one endpoint: POST for
// requests, GET for the server's stream, DELETE to end a session).
func (s *Server) Handler(opts HTTPOptions) http.Handler {
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	var h http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		Logger:              s.log,
		SessionTimeout:      opts.SessionTimeout,
		MaxRequestBodyBytes: opts.MaxBodyBytes,
		// The host's browser guard (host/browserguard.go) checks Host and
		// Origin on every route, /mcp included, against the names the
		// operator configured; the SDK's check knows none of them.
		DisableLocalhostProtection: true,
	})
	h = newSessionLimiter(s.srv, opts.MaxSessions, opts.MaxSessionsPerPrincipal, opts.MaxBodyBytes).wrap(h)
	if opts.Authenticate == nil {
		return h
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		a, err := opts.Authenticate(token)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		return &auth.TokenInfo{UserID: a.Principal, Scopes: a.Scopes}, nil
	}
	h = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// X-API-Key is accepted as on the rest of the host.
		if k := r.Header.Get("X-API-Key"); k != "" && r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+k)
		}
		h.ServeHTTP(w, r)
	})
}

// ServeStdio serves one session over r and w (newline-delimited JSON-RPC)
// until the client closes r or ctx ends.
func (s *Server) ServeStdio(ctx context.Context, r io.ReadCloser, w io.WriteCloser) error {
	limit := s.cfg.MaxMessageBytes
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	err := s.srv.Run(ctx, &sdk.IOTransport{Reader: r, Writer: w, MaxLineLength: limit})
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) || errors.Is(err, sdk.ErrConnectionClosed) {
		return nil
	}
	return fmt.Errorf("mcp: stdio: %w", err)
}
