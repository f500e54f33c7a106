package host

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/host/mcp"
	"github.com/looopy-go/looopy/host/taskrt"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// Options are the parts a Server is built from. Main builds them from the
// configuration; tests may build them by hand.
type Options struct {
	Stores   Stores
	Model    loop.Model
	Toolsets []loop.Toolset
	// Plugins, when set, is served by the admin API.
	Plugins PluginAdmin
	// Tracer, when set, makes the spans of every request and turn.
	Tracer trace.Tracer
	// Meter, when set, records the metrics GET /metrics serves besides
	// the server's own. Nil: the server's own meter provider.
	Meter metric.Meter
	// Artifacts, when set, is served at GET /artifacts/{id}.
	Artifacts *artifacts.DB
	// ChainID is this host's id in call chains (loop.CallChainKey); by
	// default one made of limits.hostId.
	ChainID string
	Logger  *slog.Logger
	// MCPTools, when set, are served to MCP clients at /mcp: the host's
	// Wasm-sandboxed tools (never an outside MCP server's).
	MCPTools loop.Toolset

	tel *telemetry // Main's; nil: the server makes its own from the environment
	// crashpoint is Main's crash hook for the crash tests (see
	// crashpointFromEnv); nil in production.
	crashpoint func(point string)
	// onSuspend is Main's hook for the stop tests (a crash point held
	// until the shutdown suspends the turns); nil in production.
	onSuspend func()
}

// Server is the Looopy HTTP server: A2A 1.0 and 0.3, the Looopy event
// stream, health and admin routes, over one task manager.
type Server struct {
	cfg       Config
	app       *fiber.App
	stores    Stores
	hub       *sse.Hub
	tasks     *taskrt.Runtime
	auth      *authenticator
	toolsets  []loop.Toolset
	plugins   PluginAdmin
	artifacts *artifacts.DB
	log       *slog.Logger
	ready     atomic.Bool
	mcp       *mcp.Server
	browser   *browserGuard

	// lnMu guards ln and stopping: Shutdown closes the listener Serve was
	// given itself, since Fiber's shutdown misses one whose Serve had not
	// yet begun (the server then served on, after its shutdown).
	lnMu     sync.Mutex
	ln       net.Listener
	stopping bool

	tel          *telemetry
	ownTel       bool // tel was made here: Shutdown stops it
	metrics      hostMetrics
	usage        *taskrt.Usage
	metricsToken []byte // sha256 of the /metrics token; nil: open
	openStreams  atomic.Int64
	streamSlots  *streamSlots // live streams per principal and per event stream

	// Streams are served on streamsCtx, which ends after the turns have
	// (so that a stream still delivers its task's final status).
	streamsCtx    context.Context
	cancelStreams context.CancelFunc
	// Requests served by a net/http handler (/mcp, through Fiber's
	// adaptor) run on a context derived from requestsCtx, never from the
	// fasthttp request: it ends when Shutdown begins.
	requestsCtx context.Context
	endRequests context.CancelFunc
	taskStreams atomic.Int64 // A2A task streams open now

	// creds are the credentials clients supplied for their tasks, in
	// memory only (docs/A2A_EXTENSION.md section 6).
	creds *loop.Credentials

	// chainID is this host's id in call chains (chainIDOf).
	chainID string
}

// NewServer builds a server. It does not listen: call Serve.
func NewServer(cfg Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	st := opts.Stores
	if st.Messages == nil || st.Agents == nil || st.Tasks == nil || st.Events == nil {
		return nil, fmt.Errorf("new server: %w: every store is required", loop.ErrInvalid)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	auth, err := newAuthenticator(cfg.Auth, cfg.Admin)
	if err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	tel, ownTel := opts.tel, false
	if tel == nil {
		if tel, err = newTelemetry(context.Background(), telemetryOptions{Log: log}); err != nil {
			return nil, fmt.Errorf("new server: %w", err)
		}
		ownTel = true
		if opts.Tracer != nil {
			tel.tracer = opts.Tracer
		}
	}
	meter := opts.Meter
	if meter == nil {
		meter = tel.meter
	}
	var usage *taskrt.Usage
	if st.Counters != nil {
		usage, err = taskrt.NewSharedUsage(st.Counters, cfg.Observability.UsageLimits, meter, log)
	} else {
		usage, err = taskrt.NewUsage(st.KV, cfg.Observability.UsageLimits, meter, log)
	}
	if err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	// A model call's token reservation outlives no turn: one left by a
	// host that died lapses after a turn's bound.
	usage.ReserveTTL = time.Duration(cfg.Limits.TurnTimeout)
	creds := loop.NewCredentials()
	lp, err := loop.New(loop.Config{Model: opts.Model, Credentials: creds, Toolsets: opts.Toolsets, SystemPrompt: cfg.Agent.SystemPrompt,
		MaxIterations: cfg.Agent.MaxIterations, Tracer: tel.tracer, Logger: log,
		Params:      loop.ModelParams{Model: cfg.Model.Name, Temperature: cfg.Model.Temperature, MaxTokens: cfg.Model.MaxTokens},
		Checkpoints: st.Checkpoints, Journal: st.Journal, Meter: meter, Budget: usage.Budget,
		Approval:       (&Server{cfg: cfg, toolsets: opts.Toolsets, plugins: opts.Plugins}).approvalGate(),
		CheckArguments: validateJSON, Subtasks: st.Tasks, SubtaskTTL: time.Duration(cfg.Limits.TaskTTL),
		ThoughtLevel: cfg.Thoughts.Record, DebugThoughts: cfg.Thoughts.Debug})
	if err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	hub, err := sse.New(sse.Config{Log: st.Events, Retention: time.Duration(cfg.Limits.TaskTTL), Logger: log, Follow: st.Shared,
		MaxPendingBytes: cfg.Limits.StreamQueueBytes, TailBytes: cfg.Limits.StreamTailBytes})
	if err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	s := &Server{cfg: cfg, stores: st, hub: hub, auth: auth,
		toolsets: opts.Toolsets, plugins: opts.Plugins, artifacts: opts.Artifacts, log: log,
		tel: tel, ownTel: ownTel, usage: usage, creds: creds, browser: newBrowserGuard(cfg),
		chainID:     opts.ChainID,
		streamSlots: newStreamSlots(cfg.Limits.MaxStreams, cfg.Limits.MaxStreamsPerPrincipal, cfg.Limits.MaxStreamsPerStream)}
	if s.chainID == "" {
		s.chainID = chainIDOf(cfg.Limits.HostID)
	}
	if tok := cfg.Observability.MetricsToken; tok != "" {
		v, err := resolveSecret(tok)
		if err != nil {
			return nil, fmt.Errorf("new server: metrics token: %w", err)
		}
		sum := sha256.Sum256([]byte(v))
		s.metricsToken = sum[:]
	}
	s.streamsCtx, s.cancelStreams = context.WithCancel(context.Background())
	s.requestsCtx, s.endRequests = context.WithCancel(context.Background())
	rtc := taskrt.Config{Loop: lp, Stores: st.runtime(), Events: hubEvents{hub: hub, log: st.Events},
		Owner: cfg.Limits.HostID, LeaseTTL: time.Duration(cfg.Limits.LeaseTTL),
		TurnTimeout: time.Duration(cfg.Limits.TurnTimeout), TaskTTL: time.Duration(cfg.Limits.TaskTTL),
		ConversationTTL: time.Duration(cfg.Limits.ConversationTTL),
		HistoryLimit:    cfg.Agent.HistoryLimit, HistoryBytes: max(cfg.Agent.HistoryBytes, 0),
		MaxAgents: cfg.Limits.MaxAgents, MaxAgentBytes: max(cfg.Limits.MaxAgentBytes, 0),
		ResumeConcurrency: cfg.Limits.ResumeConcurrency, MaxRemoteWatches: cfg.Limits.MaxRemoteWatches, MaxRunningPerPrincipal: max(cfg.Limits.MaxRunningPerPrincipal, 0),
		MaxRunning:  max(cfg.Limits.MaxRunning, 0),
		TurnContext: turnContext, Crashpoint: opts.crashpoint, OnSuspend: opts.onSuspend, Logger: log,
		OnTimeout: cfg.Interaction.onTimeout(), ExpireEvery: cfg.Interaction.expireEvery(),
		KeepDebugThoughts: cfg.Thoughts.Debug, Credentials: creds, Usage: usage}
	if w := st.Space; w != nil {
		// New tasks are refused while the store's disk is nearly full
		// or its folder at its cap (store.minFreeBytes, store.maxBytes).
		rtc.Admit = w.Admit
		// A turn that ended while the store refused its writes left its
		// task working: once writes are taken again, recover it.
		var seen int64
		rtc.RecoverWhen = func() bool {
			n := w.RefusedWrites()
			if n == seen || w.Writable() != nil {
				return false
			}
			seen = n
			return true
		}
	}
	if st.Shared {
		// Other hosts may die with tasks in flight: look for lapsed
		// leases as often as one can lapse.
		rtc.TakeoverEvery = rtc.LeaseTTL
		rtc.Shared = true
		if rtc.TakeoverEvery <= 0 {
			rtc.TakeoverEvery = 30 * time.Second
		}
	}
	if opts.Artifacts != nil {
		rtc.Artifacts = opts.Artifacts
	}
	if s.tasks, err = taskrt.New(rtc); err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	if err := s.registerMetrics(meter); err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	if err := s.tasks.Recover(context.Background()); err != nil {
		return nil, fmt.Errorf("new server: %w", err)
	}
	// Before anything is served: conversations whose deletion a stopped
	// host left halfway are deleted whole (none of their tasks, artifacts
	// or streams is served again). One that cannot be finished now (a
	// full disk) is finished by the periodic cleanup.
	if n, err := s.tasks.FinishConversationDeletes(context.Background()); err != nil {
		log.Warn("deletions of conversations not all finished", "error", err.Error())
	} else if n > 0 {
		log.Info("deletions of conversations finished", "conversations", n)
	}
	s.tasks.StartBackground()
	if !cfg.MCP.Disabled {
		if s.mcp, err = s.newMCPServer(opts.MCPTools, opts.Model); err != nil {
			return nil, fmt.Errorf("new server: %w", err)
		}
	}
	s.app = fiber.New(fiber.Config{
		AppName:      "looopy",
		BodyLimit:    cfg.Limits.MaxBodyBytes,
		ErrorHandler: s.errorHandler,
		// The deadline of a request's line and headers; the body's is
		// set once they are in (HeaderReceived below).
		ReadTimeout: time.Duration(cfg.Limits.HeaderTimeout),
		IdleTimeout: 2 * time.Minute,
		// The listener holds the connections to the cap; the server's own
		// bound leaves room for those it closed and the server still lets
		// go (concurrencyCap).
		Concurrency:           concurrencyCap(cfg.Limits.MaxConnections),
		DisableStartupMessage: true,
		// Every string a handler reads from the request (route parameters,
		// query values, headers) is a copy: fasthttp reuses the request's
		// memory once the handler returns, and event streams keep such
		// values in callbacks that run after that.
		Immutable: true,
	})
	// A request's body has its own deadline, set once its head is in.
	s.app.Server().HeaderReceived = func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
		return fasthttp.RequestConfig{ReadTimeout: bodyReadTimeout}
	}
	// A connection's request is in flight from its handler's start to
	// its response's end: the listener never closes such a connection for
	// a new one (listener.go).
	s.app.Server().ConnState = func(c net.Conn, st fasthttp.ConnState) {
		if cc, ok := c.(*countedConn); ok && st == fasthttp.StateIdle {
			cc.requestEnded()
		}
	}
	s.app.Use(func(c *fiber.Ctx) error {
		if cc, ok := c.Context().Conn().(*countedConn); ok && !cc.requestStarted() {
			return nil // closed for a newer connection: do nothing for it
		}
		return c.Next()
	})
	s.routes()
	s.ready.Store(true)
	return s, nil
}

func (s *Server) routes() { s.register(s.app, false) }

// Register adds the host's routes to r, a router of the caller's own Fiber
// v2 application (the app itself, or a group to serve the host under a
// prefix): A2A 1.0 at "" and "/a2a/v1", A2A 0.3 at "/a2a/v0.3", the agent
// card, /events, /artifacts, /healthz, /readyz, /metrics and /admin.
// Errors are answered by the host's own rules, whatever the application's
// error handler; request bodies are held to Limits.MaxBodyBytes, and the
// browser guard (Origin, Host, JSON bodies; docs/SECURITY.md, "Browsers")
// holds on every route, judging Host by Addr and Server.AllowedHosts. The
// caller's application keeps its own settings: the handlers copy whatever
// they keep past their return. Start the host with Main.Start (or
// NewServer) and stop it with Close (or Shutdown), not the application.
func (s *Server) Register(r fiber.Router) { s.register(r, true) }

func (s *Server) register(r fiber.Router, mounted bool) {
	// Every route is behind the browser guard (browserguard.go); rpc is
	// the route's JSON-RPC version, for the form of a refusal.
	route := func(rpc int, json bool, fn fiber.Handler) fiber.Handler {
		fn = s.guard(rpc, json, fn)
		if !mounted {
			return fn
		}
		return func(c *fiber.Ctx) error {
			if err := fn(c); err != nil {
				return s.errorHandler(c, err)
			}
			return nil
		}
	}
	h := func(fn fiber.Handler) fiber.Handler { return route(0, false, fn) }
	root := "/"
	if mounted {
		root = ""
	}
	r.Post(root, route(10, true, s.limitBody(mounted, false, s.handleRPC10)))
	r.Post("/a2a/v1", route(10, true, s.limitBody(mounted, false, s.handleRPC10)))
	r.Post("/a2a/v0.3", route(3, true, s.limitBody(mounted, true, s.handleRPC03)))
	r.Get("/.well-known/agent-card.json", h(s.handleCard))
	if !s.cfg.Web.Disabled {
		r.Get(root, h(s.handlePage))
		r.Get("/ui/*", h(s.handlePageFile))
	}
	r.Get("/events/:contextId", h(s.handleEvents))
	r.Get("/artifacts/:id", h(s.handleArtifact))
	r.Get("/healthz", h(func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) }))
	r.Get("/readyz", h(s.handleReady))
	r.Get("/metrics", h(s.handleMetrics))
	if s.mcp != nil {
		mh := s.mcpHandler()
		r.All("/mcp", s.guard(10, true, mh))
	}
	admin := r.Group("/admin")
	if mounted {
		admin.Use(func(c *fiber.Ctx) error {
			if err := c.Next(); err != nil {
				return s.errorHandler(c, err)
			}
			return nil
		})
	}
	admin.Use(s.guard(0, false, func(c *fiber.Ctx) error { return c.Next() }))
	s.adminRoutes(admin)
}

// limitBody holds a mounted route's request body to Limits.MaxBodyBytes
// (the host's own application does it in Fiber's config), answering as
// JSON-RPC in the version of the route.
func (s *Server) limitBody(mounted, v03 bool, fn fiber.Handler) fiber.Handler {
	if !mounted {
		return fn
	}
	return func(c *fiber.Ctx) error {
		if len(c.Request().Body()) > s.cfg.Limits.MaxBodyBytes {
			return s.rpcErrorAnswer(c, v03, fiber.StatusRequestEntityTooLarge, s.tooLarge())
		}
		return fn(c)
	}
}

func (s *Server) tooLarge() error {
	return fmt.Errorf("%w: the limit is %d bytes", ErrBodyTooLarge, s.cfg.Limits.MaxBodyBytes)
}

// rpcErrorAnswer answers a JSON-RPC route with an error and no request id.
func (s *Server) rpcErrorAnswer(c *fiber.Ctx, v03 bool, status int, err error) error {
	e := toRPCError10(err)
	if v03 {
		e = toRPCError03(err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(status).Send(marshalResponse(nullID, nil, e))
}

// Serve answers requests on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.lnMu.Lock()
	if s.stopping {
		s.lnMu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.ln = ln
	s.lnMu.Unlock()
	return s.app.Listener(ln)
}

// Shutdown stops taking requests and turns, lets running turns go on until
// ctx ends, hands the rest on (taskrt.Runtime.Shutdown), ends the open
// streams (one whose task did not end with SHUTTING_DOWN: subscribe again)
// and waits for the connections to close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	s.lnMu.Lock()
	s.stopping = true
	ln := s.ln
	s.lnMu.Unlock()
	// The requests of net/http handlers (an MCP client's stream, a call)
	// end now, so that their connections close.
	s.endRequests()
	httpDone := make(chan error, 1)
	go func() {
		err := s.app.ShutdownWithContext(context.WithoutCancel(ctx))
		if ln != nil {
			// Fiber closed it unless its Serve had not registered it yet:
			// closing it here ends that Serve too (a second close is a no-op).
			_ = ln.Close()
		}
		httpDone <- err
	}()
	s.tasks.Shutdown(ctx)
	// The turns have ended and their last events are in the log: let the
	// task streams deliver them (briefly), then end every stream.
	for deadline := time.Now().Add(2 * time.Second); s.taskStreams.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	s.cancelStreams()
	_ = s.hub.Close()
	var telErr error
	if s.ownTel {
		telErr = s.tel.Shutdown(context.WithoutCancel(ctx))
	}
	select {
	case err := <-httpDone:
		return errors.Join(err, telErr)
	case <-time.After(5 * time.Second):
		return errors.New("shutdown: connections still open after the turns ended")
	}
}

func (s *Server) handleReady(c *fiber.Ctx) error {
	if !s.ready.Load() {
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"status": "shutting down"})
	}
	return c.JSON(fiber.Map{"status": "ready"})
}

// errorHandler answers errors that reach Fiber (a body over the limit, an
// unknown route) as JSON.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	var fe *fiber.Error
	status := HTTPStatus(err)
	if errors.As(err, &fe) {
		status = fe.Code
		if fe.Code == fiber.StatusRequestEntityTooLarge {
			err = s.tooLarge()
		}
	}
	setRetryAfter(c, err)
	setSafeHeaders(c)
	// An error is never reused for a later request: a 410 or 404 kept by
	// a browser's cache (both are cacheable by default) would answer the
	// read that the error asked for (the events from their start, a
	// context that exists since).
	c.Set(fiber.HeaderCacheControl, "no-store")
	if c.Method() == fiber.MethodPost && (c.Path() == "/" || c.Path() == "/a2a/v1" || c.Path() == "/a2a/v0.3") {
		return s.rpcErrorAnswer(c, c.Path() == "/a2a/v0.3", status, err)
	}
	return c.Status(status).JSON(fiber.Map{"error": err.Error()})
}

// principal authenticates the request.
func (s *Server) principal(c *fiber.Ctx) (*loop.AuthContext, error) {
	return s.auth.principal(credential(c.Get(fiber.HeaderAuthorization), c.Get("X-API-Key")))
}

// rpcCall is one JSON-RPC call in progress, whatever the A2A version.
type rpcCall struct {
	req     rpcRequest
	auth    *loop.AuthContext
	toError func(error) *rpcError
	err     error // the error answered, for the request's span
}

func (s *Server) handleRPC10(c *fiber.Ctx) error { return s.handleRPC(c, false) }
func (s *Server) handleRPC03(c *fiber.Ctx) error { return s.handleRPC(c, true) }

func (s *Server) handleRPC(c *fiber.Ctx, v03 bool) error {
	call := rpcCall{toError: toRPCError10}
	if v03 {
		call.toError = toRPCError03
	}
	activateExtensions(c, v03)
	answered := false
	answer := func(result any, err error) (*taskStream, error) {
		answered = true
		call.err = err
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		setRetryAfter(c, err)
		if err != nil {
			if lookupError(err).code == internalRow.code {
				s.log.LogAttrs(c.UserContext(), slog.LevelError, "request failed",
					slog.String("method", call.req.Method), slog.String("error", err.Error()))
			}
			return nil, c.Send(marshalResponse(call.req.ID, nil, call.toError(err)))
		}
		return nil, c.Send(marshalResponse(call.req.ID, result, nil))
	}
	err := checkContentEncoding(c.Get(fiber.HeaderContentEncoding))
	var req rpcRequest
	if err == nil {
		req, err = decodeRPCRequest(c.Request().Body())
	} else {
		req.ID = nullID
	}
	call.req = req
	// One span per call, named after the A2A method, continuing the
	// client's trace (W3C traceparent).
	ctx := s.tel.propagator.Extract(c.UserContext(), fiberCarrier{c})
	ctx, span := s.tel.startSpan(ctx, spanName(req.Method), trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	defer func() { s.endRPCSpan(ctx, span, &call, v03) }()
	if err != nil {
		_, err = answer(nil, err)
		return err
	}
	call.auth, err = s.principal(c)
	if err != nil && !streamingMethod(req.Method) {
		_, err = answer(nil, err)
		return err
	}
	var stream *taskStream
	if err == nil {
		// A refused streaming call is answered as a stream (below): a
		// client reading events would take a JSON body for an empty stream.
		if span.IsRecording() {
			span.SetAttributes(attribute.String("enduser.id", call.auth.Principal))
		}
		// A principal at its bound of live streams is refused before a
		// streaming message starts a turn it could not follow.
		if streamingMethod(req.Method) {
			err = s.streamSlots.room(call.auth.Principal)
		}
		if err == nil && v03 {
			stream, err = s.rpc03(ctx, c, &call, answer)
		} else if err == nil {
			stream, err = s.rpc10(ctx, c, &call, answer)
		}
	}
	if err != nil {
		call.err = err
	}
	if answered {
		return err
	}
	// A streaming method: answered as Server-Sent Events, errors included,
	// since a client reading a stream reads only events.
	var enc sse.Encoder = sse.A2AEncoder{RequestID: req.ID}
	snapshot := func(t *a2a.Task) any { return a2a.StreamResponse{Event: t} }
	if v03 {
		enc = sse.A2A03Encoder{RequestID: req.ID}
		snapshot = func(t *a2a.Task) any { return a2av0.FromV1Task(t) }
	}
	release := func() {}
	if err == nil && stream.snapshot == nil {
		// Refused past the bounds on live streams: the turn a
		// SendStreamingMessage started runs on (GetTask, or a stream
		// once one is closed, follows it).
		if r, terr := s.streamSlots.take(call.auth.Principal, sse.TaskStream(stream.taskID)); terr != nil {
			err, call.err = terr, terr
		} else {
			release = r
		}
	}
	setRetryAfter(c, err)
	conn := c.Context().Conn()
	s.sendSSE(c, func(w *bufio.Writer) {
		defer release()
		if err == nil && stream.snapshot != nil {
			_ = writeFrame(w, marshalResponse(req.ID, snapshot(stream.snapshot), nil))
			return
		}
		if err == nil {
			err = s.serveStream(w, conn, sse.TaskStream(stream.taskID), stream.after, stream.endAt,
				sse.Filter{Verbosity: a2aThoughts(stream.thoughts)}, enc)
			if err == nil || errors.Is(err, errClientGone) {
				return
			}
			if !errors.Is(err, errStreamShutdown) {
				s.log.LogAttrs(context.Background(), slog.LevelWarn, "stream ended with an error",
					slog.String("task_id", stream.taskID), slog.String("error", err.Error()))
			}
		}
		_ = writeFrame(w, marshalResponse(req.ID, nil, call.toError(err)))
	})
	return nil
}

// serveStream serves the events of a stream after an id until the encoder
// ends it, the client leaves or the host shuts down.
func (s *Server) serveStream(w *bufio.Writer, conn net.Conn, stream string, after, endAt uint64, f sse.Filter, enc sse.Encoder) error {
	ctx := s.streamsCtx
	s.openStreams.Add(1)
	defer s.openStreams.Add(-1)
	if _, ok := enc.(sse.LooopyEncoder); !ok {
		s.taskStreams.Add(1)
		defer s.taskStreams.Add(-1)
	}
	// The stream ends as soon as its client's connection closes (a FIN or
	// a reset), not at the next failed write: its place under the bounds
	// on live streams comes back at once, for the client reconnecting.
	streamCtx, gone := context.WithCancelCause(ctx)
	defer gone(nil)
	probe := make(chan struct{}, 1)
	watchClient(conn, func() { gone(errClientGone) }, probe)
	sub, err := s.hub.Subscribe(streamCtx, stream, after, f)
	if err != nil {
		return err
	}
	defer sub.Close()
	if endAt > 0 {
		sub.StopAt(endAt)
	}
	alive := s.taskAlive(stream)
	err = sse.Serve(streamCtx, w, w.Flush, sub, enc, sse.ServeOptions{
		Heartbeat: time.Duration(s.cfg.Limits.Heartbeat),
		Abort: func() {
			if conn != nil {
				_ = conn.Close()
			}
		},
		Alive: alive,
		Probe: probe,
	})
	if errors.Is(err, sse.ErrExpired) && alive != nil {
		// The events after the cursor are gone under the stream: when
		// what it follows is gone too (its task, its conversation), that
		// is the reason the client is told.
		if aerr := alive(streamCtx); aerr != nil {
			return aerr
		}
	}
	switch {
	case errors.Is(err, context.Canceled) && ctx.Err() == nil && errors.Is(context.Cause(streamCtx), errClientGone):
		return errClientGone
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		// The host shuts down before the stream's end: the client is told
		// to subscribe again (a turn cut by the shutdown resumes on the
		// next start or on another host), never given a final status.
		return errStreamShutdown
	case errors.Is(err, sse.ErrDeleted):
		// Deleted under the stream, by this host: only a conversation's
		// deletion deletes a stream before its expiry.
		return ErrConversationDeleted
	case err == nil, errors.Is(err, sse.ErrFinished), errors.Is(err, sse.ErrClosed), errors.Is(err, context.Canceled):
		return nil
	case errors.Is(err, sse.ErrStalled), errors.Is(err, sse.ErrClientWrite):
		// Fiber streams through a pipe: a client that left shows as
		// "connection closed", not as a network error.
		return errClientGone
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, net.ErrClosed) {
		return errClientGone
	}
	return err
}

// errStreamShutdown ends a stream the host's shutdown cut before its end.
var errStreamShutdown = fmt.Errorf("%w: the stream ended before its task did; subscribe again with Last-Event-ID "+
	"(SubscribeToTask, tasks/resubscribe, /events) to another host or once this one is back: a turn cut by the shutdown resumes there", ErrShuttingDown)

// streamStorageFull ends the stream of a task whose turn was suspended
// because the store refuses writes for want of space.
type streamStorageFull struct{ cause error }

func (e *streamStorageFull) Error() string {
	return e.cause.Error() + ": the task's turn is suspended until the store takes writes again, then it resumes from its last checkpoint; " +
		"subscribe again with Last-Event-ID (SubscribeToTask, tasks/resubscribe, /events) to follow it"
}

func (e *streamStorageFull) Unwrap() error { return e.cause }

// errTaskGone ends the stream of a task whose record the store no longer
// has: no one will write its end.
var errTaskGone = errors.New("the store no longer holds this task (its data was lost or removed); no more events will come")

// taskAlive checks, at an idle stream's heartbeat, that a task stream's
// task is still stored. A turn stopped without its final event (the store
// lost its data and the host running it lost its lease) leaves nothing
// that would end the stream: every stream of it, on any host, ends with a
// clear error instead of waiting for ever. A task that is stored but whose
// turn stopped is taken over by the hosts' periodic recovery, which
// writes its end.
//
// A conversation's stream (/events) is checked for its conversation: one
// deleted meanwhile by another host (or expired) ends the stream with
// ErrConversationDeleted, as this host's delete does at once (Hub.Delete).
func (s *Server) taskAlive(stream string) func(context.Context) error {
	if cid, ok := strings.CutPrefix(stream, sse.ContextStream("")); ok && cid != "" {
		return func(ctx context.Context) error {
			if _, err := s.stores.Agents.LoadAgent(ctx, cid); errors.Is(err, loop.ErrNotFound) {
				return ErrConversationDeleted
			}
			return nil // there, or the store did not answer this time: ask again at the next heartbeat
		}
	}
	id, ok := strings.CutPrefix(stream, sse.TaskStream(""))
	if !ok || id == "" {
		return nil
	}
	exists := func(ctx context.Context) (bool, error) {
		_, err := s.stores.Tasks.LoadTask(ctx, id)
		if errors.Is(err, loop.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	if p, ok := s.stores.Tasks.(loop.TaskPresence); ok {
		// Without reading the record: a client holding many idle streams
		// of a large task would otherwise make the host decode it for each
		// of them at every heartbeat.
		exists = func(ctx context.Context) (bool, error) { return p.TaskExists(ctx, id) }
	}
	return func(ctx context.Context) error {
		if sp := s.stores.Space; sp != nil && s.tasks.Running(id) == nil {
			if full := sp.Writable(); full != nil {
				// The store refuses writes and the task's turn is not
				// running: it was suspended at a refused write (or waits to
				// be resumed), and nothing more comes until space returns.
				// The client is told so, and to subscribe again.
				if rec, err := s.stores.Tasks.LoadTask(ctx, id); err == nil && (rec.Status == loop.TaskWorking || rec.Status == loop.TaskSubmitted) {
					return fmt.Errorf("task %q: %w", id, &streamStorageFull{cause: full})
				}
			}
		}
		if ok, err := exists(ctx); err == nil && !ok {
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "stream of a task the store no longer holds: ended",
				slog.String("task_id", id))
			return fmt.Errorf("task %q: %w: %w", id, loop.ErrNotFound, errTaskGone)
		}
		return nil // found, or the store did not answer this time: ask again at the next heartbeat
	}
}

// writeFrame writes one SSE frame with no id and flushes it.
func writeFrame(w *bufio.Writer, data []byte) error {
	if _, err := w.Write(sse.AppendFrame(nil, 0, "", data)); err != nil {
		return errClientGone
	}
	if err := w.Flush(); err != nil {
		return errClientGone
	}
	return nil
}

// streamingMethod reports whether an A2A method (1.0 or 0.3) answers with
// Server-Sent Events.
func streamingMethod(m string) bool {
	switch m {
	case "SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe":
		return true
	}
	return false
}

// rpc10 serves one A2A 1.0 call. It either answers through answer, or
// returns the stream to serve (or the error to send as the stream).
func (s *Server) rpc10(ctx context.Context, c *fiber.Ctx, call *rpcCall, answer func(any, error) (*taskStream, error)) (*taskStream, error) {
	auth := call.auth
	switch call.req.Method {
	case "SendMessage":
		var p a2a.SendMessageRequest
		if err := decodeParams(call.req, &p); err != nil {
			return answer(nil, err)
		}
		t, err := s.sendMessage(ctx, auth, &p)
		if err != nil {
			return answer(nil, err)
		}
		return answer(a2a.StreamResponse{Event: t}, nil)
	case "SendStreamingMessage":
		var p a2a.SendMessageRequest
		if err := decodeParams(call.req, &p); err != nil {
			return nil, err
		}
		return s.startStream(ctx, auth, &p)
	case "GetTask":
		var p a2a.GetTaskRequest
		if err := decodeParams(call.req, &p); err != nil {
			return answer(nil, err)
		}
		t, err := s.getTask(ctx, auth, &p)
		return answer(t, err)
	case "ListTasks":
		var p a2a.ListTasksRequest
		if call.req.Params != nil {
			if err := decodeParams(call.req, &p); err != nil {
				return answer(nil, err)
			}
		}
		r, err := s.listTasks(ctx, auth, &p)
		return answer(r, err)
	case "CancelTask":
		var p a2a.CancelTaskRequest
		if err := decodeParams(call.req, &p); err != nil {
			return answer(nil, err)
		}
		t, err := s.cancelTask(ctx, auth, &p)
		return answer(t, err)
	case "SubscribeToTask":
		var p a2a.SubscribeToTaskRequest
		if err := decodeParams(call.req, &p); err != nil {
			return nil, err
		}
		header := c.Get("Last-Event-ID")
		last, err := parseLastEventID(header)
		if err != nil {
			return nil, err
		}
		return s.subscribe(ctx, auth, &p, last, header != "")
	case "GetTaskPushNotificationConfig", "CreateTaskPushNotificationConfig",
		"ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig":
		return answer(nil, a2a.ErrPushNotificationNotSupported)
	case "GetExtendedAgentCard":
		return answer(nil, a2a.ErrExtendedCardNotConfigured)
	}
	return answer(nil, fmt.Errorf("%w: %q", a2a.ErrMethodNotFound, call.req.Method))
}

// startStream starts a turn and returns its stream, which opens with the
// submitted task.
func (s *Server) startStream(ctx context.Context, auth *loop.AuthContext, p *a2a.SendMessageRequest) (*taskStream, error) {
	if err := checkSendConfig(p); err != nil {
		return nil, err
	}
	st, err := s.start(ctx, auth, p, false)
	if err != nil {
		return nil, err
	}
	if st.Run == nil {
		// Answers recorded; the task still waits for others: it is sent
		// as it is.
		return &taskStream{taskID: st.Task.ID, snapshot: s.answerTask(st.Task, s.historyLength(-1))}, nil
	}
	level, _ := thoughtChoice(st.Task.Metadata)
	return &taskStream{taskID: st.Run.TaskID, after: st.Run.After, thoughts: level}, nil
}

// checkContentEncoding refuses a compressed request body. The body limit
// counts the bytes on the wire, so a small gzip body could expand to any
// size: the host reads bodies as sent (Fiber's Ctx.Body would inflate them).
func checkContentEncoding(enc string) error {
	if enc == "" || strings.EqualFold(strings.TrimSpace(enc), "identity") {
		return nil
	}
	return fmt.Errorf("%w: Content-Encoding %q: send the request body uncompressed", a2a.ErrInvalidRequest, enc)
}

// errClientGone: the client closed its connection, or a write to it
// failed; it has left.
var errClientGone = errors.New("client gone")

// sendSSE answers with an event stream written by fn after the handler
// returns; a HEAD request gets the head only and fn is never run (a
// caller that took a place for fn takes none for HEAD).
func (s *Server) sendSSE(c *fiber.Ctx, fn func(w *bufio.Writer)) {
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	// The connection ends with the stream: while it streams, watchClient
	// reads from it to see the client leave, so it cannot carry another
	// request after it.
	c.Context().Response.SetConnectionClose()
	if c.Method() == fiber.MethodHead {
		// A HEAD answer has no body: no stream is started (fn would hold
		// what it took until its first write failed).
		return
	}
	c.Context().SetBodyStreamWriter(fn)
}
