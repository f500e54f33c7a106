package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/host/remote"
	"github.com/looopy-go/looopy/host/taskrt"
	"github.com/looopy-go/looopy/loop"
)

// Main is the program: flags and environment over a config file, the
// stores, the plugins, the server. cmd/host runs it; end-to-end tests run it
// too, in process.
type Main struct {
	Config Config
	// Stdout receives the logs (default os.Stderr).
	Stdout io.Writer
	// Model, when set, replaces the model the configuration selects
	// (tests and embedders).
	Model loop.Model
	// SpanExporter, when set, receives every span as it ends, besides the
	// exporter the OTEL_* environment selects (tests and embedders).
	SpanExporter sdktrace.SpanExporter

	log       *slog.Logger
	tel       *telemetry
	store     backend
	server    *Server
	ln        net.Listener
	artifacts *artifactBridge
	served    chan error
	serveDone chan struct{} // closed when the server stopped
	serveErr  error
	maxConns  int
	closers   []func() error
	closeMu   sync.Mutex // serializes Close
	// configFile is the config file ParseFlags read: no plugin is granted
	// the folder holding it.
	configFile string
	// pluginDir is the plugin folder in use (absolute), once loaded.
	pluginDir string
}

// NewMain returns a Main with the default configuration.
func NewMain() *Main { return &Main{Stdout: os.Stderr} }

// ParseFlags reads -config, then the environment, then the other flags, in
// rising order of precedence.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("looopy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("config", os.Getenv("LOOOPY_CONFIG"), "JSON config file (env LOOOPY_CONFIG)")
	addr := fs.String("addr", "", "listen address (env LOOOPY_ADDR, default "+DefaultAddr+")")
	data := fs.String("data", "", "data directory (env LOOOPY_DATA, default "+DefaultDataDir+")")
	plugins := fs.String("plugins", "", "plugin folder (env LOOOPY_PLUGINS, default "+DefaultPluginDir+" when it exists)")
	model := fs.String("model", "", "model plugin (env LOOOPY_MODEL, default "+DefaultModelPlugin+")")
	publicURL := fs.String("public-url", "", "base URL on the agent card (env LOOOPY_PUBLIC_URL)")
	authOn := fs.Bool("auth", false, "require an API key (env LOOOPY_AUTH=1); keys come from the config file")
	logFormat := fs.String("log-format", "", "json or text (env LOOOPY_LOG_FORMAT; default text in a terminal)")
	logLevel := fs.String("log-level", "", "debug, info, warn, error (env LOOOPY_LOG_LEVEL)")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			var sb strings.Builder
			fs.SetOutput(&sb)
			fs.PrintDefaults()
			return &usageError{text: "Usage: looopy [command] [flags]; \"looopy help\" lists the commands.\nFlags of the server (looopy with no command):\n" + strings.TrimRight(sb.String(), "\n")}
		}
		return fmt.Errorf("flags: %w%s", err, flagHint(fs, err))
	}
	if *version {
		return ErrVersion
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("flags: unexpected argument %q", fs.Arg(0))
	}
	cfg := m.Config
	if *configPath != "" {
		c, err := LoadConfig(*configPath)
		if err != nil {
			return err
		}
		m.configFile = *configPath
		cfg = c
	}
	set := func(dst *string, flagVal, env string) {
		if v := os.Getenv(env); v != "" {
			*dst = v
		}
		if flagVal != "" {
			*dst = flagVal
		}
	}
	set(&cfg.Addr, *addr, "LOOOPY_ADDR")
	set(&cfg.DataDir, *data, "LOOOPY_DATA")
	set(&cfg.PluginDir, *plugins, "LOOOPY_PLUGINS")
	set(&cfg.Model.Plugin, *model, "LOOOPY_MODEL")
	set(&cfg.PublicURL, *publicURL, "LOOOPY_PUBLIC_URL")
	set(&cfg.LogFormat, *logFormat, "LOOOPY_LOG_FORMAT")
	set(&cfg.LogLevel, *logLevel, "LOOOPY_LOG_LEVEL")
	if v := os.Getenv("LOOOPY_AUTH"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("LOOOPY_AUTH=%q: want true or false", v)
		}
		cfg.Auth.Enabled = on
	}
	if *authOn {
		cfg.Auth.Enabled = true
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	m.Config = cfg
	return nil
}

// Logger returns the logger Run set up (nil before).
func (m *Main) Logger() *slog.Logger { return m.log }

// Addr is the address the server listens on, once Run has returned.
func (m *Main) Addr() string {
	if m.ln == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// URL is the base URL of the running server.
func (m *Main) URL() string { return "http://" + m.Addr() }

// Run opens the stores, loads the plugins, starts listening and returns;
// the server answers in the background until Close. ctx bounds the start.
func (m *Main) Run(ctx context.Context) error { return m.start(ctx, true) }

// Start opens the stores and loads the plugins like Run, but listens on
// nothing: the caller serves the host from its own Fiber application
// through Server().Register. Config.PublicURL should then be the URL the
// routes are reachable at (it goes on the agent card). Close stops it.
func (m *Main) Start(ctx context.Context) error { return m.start(ctx, false) }

// Server is the server Run or Start built (nil before).
func (m *Main) Server() *Server { return m.server }

func (m *Main) start(ctx context.Context, listen bool) (err error) {
	defer func() {
		if err != nil {
			_ = m.closeAll()
		}
	}()
	cfg := m.Config
	if err := cfg.Validate(); err != nil {
		return err
	}
	m.log = newLogger(m.Stdout, cfg.LogFormat, cfg.LogLevel, configSecrets(cfg))
	memLimit := setMemoryLimit()
	dc := cfg.withDefaults()
	memCtx, stopMem := context.WithCancel(context.Background())
	memDone := make(chan struct{})
	go func() {
		defer close(memDone)
		returnFreeMemoryEvery(memCtx, freeMemoryEvery, FreeMemoryThreshold, m.log)
	}()
	m.closers = append(m.closers, func() error { stopMem(); <-memDone; return nil })
	tel, err := newTelemetry(ctx, telemetryOptions{LogSpans: cfg.TraceSpans, Exporter: m.SpanExporter, Log: m.log})
	if err != nil {
		return err
	}
	m.tel = tel
	m.closers = append(m.closers, func() error {
		// Flush what is left, but never hang the exit on a collector.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return tel.Shutdown(ctx)
	})

	if err := os.MkdirAll(dc.DataDir, 0o750); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	st, events, arts, shared, err := m.openBackend(ctx, cfg, dc.DataDir)
	if err != nil {
		return err
	}
	m.store = st

	m.artifacts = &artifactBridge{db: arts, tasks: st, ttl: time.Duration(cfg.Limits.TaskTTL)}
	// Before anything runs: the artifacts a stopped process left building.
	abandonArtifacts(ctx, arts, st, !shared, m.log)
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		_ = arts.SweepEvery(sweepCtx, time.Minute)
	}()
	abandonDone := make(chan struct{})
	go func() {
		defer close(abandonDone)
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-sweepCtx.Done():
				return
			case <-t.C:
				abandonArtifacts(sweepCtx, arts, st, false, m.log)
			}
		}
	}()
	m.closers = append(m.closers, func() error { stopSweep(); <-abandonDone; return nil })
	m.closers = append(m.closers, func() error { stopSweep(); <-sweepDone; return nil })
	model, toolsets, admin, err := m.loadPlugins(ctx, cfg)
	if err != nil {
		return err
	}
	sandboxed := loop.Toolset(nil)
	if len(toolsets) > 0 {
		sandboxed = toolsets[0] // the plugin registry: what /mcp serves
	}
	mcpTools, err := m.startMCPClients(ctx, cfg)
	if err != nil {
		return err
	}
	for _, t := range mcpTools {
		toolsets = append(toolsets, t)
	}
	if admin, ok := admin.(*pluginAdmin); ok {
		admin.mcp = mcpTools
	}
	if cfg.Limits.HostID == "" && !cfg.InMemory {
		cfg.Limits.HostID = hostID(dc.DataDir)
	}
	// The id this host gives itself in call chains: remote agents' calls
	// send it, and a message whose chain names it is refused.
	chainID := chainIDOf(cfg.Limits.HostID)
	remotes, err := m.remoteAgents(cfg, chainID)
	if err != nil {
		return err
	}
	for _, r := range remotes {
		toolsets = append(toolsets, r)
	}
	// Listen once the plugins are loaded (each load is bounded by its
	// timeout): until then a client is refused at once rather than left
	// hanging, and /readyz answering means the host is ready.
	if listen {
		ln, err := net.Listen("tcp", dc.Addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", dc.Addr, err)
		}
		limit, nofile := connectionCap(cfg.Limits.MaxConnections)
		m.log.Info("connection cap", "max_connections", limit, "open_file_limit", nofile, "max_streams", dc.Limits.MaxStreams, "header_timeout", time.Duration(dc.Limits.HeaderTimeout).String())
		m.ln = newConnListener(ln, limit, m.log)
		m.maxConns = limit
		m.closers = append(m.closers, func() error { return ignoreClosed(ln.Close()) })
		if cfg.PublicURL == "" {
			cfg.PublicURL = "http://" + ln.Addr().String()
		}
	}

	if cfg.Agent.ArtifactTools {
		toolsets = append(toolsets, artifacts.NewTools(arts))
	}
	// The turn's commit and checkpoints get spans and a latency histogram.
	ts, err := newTracedStore(st, tel)
	if err != nil {
		return err
	}
	cp, hold, err := crashpointFromEnv(os.Getenv(crashpointEnv))
	if err != nil {
		return err
	}
	stores := Stores{Messages: ts, Agents: ts, Tasks: ts, Events: events, Commit: ts, Checkpoints: ts,
		Journal: ts, Durable: st, Leases: st, KV: st, Shared: shared}
	// The backend holds the tasks and the leases: a starting task and its
	// lease are one write where it can.
	stores.TaskLeases, _ = st.(loop.LeasedTaskSaver)
	stores.Space, _ = st.(StoreSpace)
	stores.Conversations, _ = st.(taskrt.ConversationExpirer)
	if shared {
		// Cancels and usage counters reach every host (the Redis backend
		// has both).
		stores.Cancels, _ = st.(loop.CancelSignals)
		stores.Counters, _ = st.(taskrt.UsageCounters)
	}
	srv, err := NewServer(cfg, Options{ChainID: chainID,
		crashpoint: cp,
		onSuspend:  hold,
		tel:        tel,
		Stores:     stores,
		Model:      model,
		Toolsets:   toolsets,
		Plugins:    admin,
		Artifacts:  arts,
		Logger:     m.log,
		MCPTools:   sandboxed,
	})
	if err != nil {
		return err
	}
	m.server = srv
	if !listen {
		m.log.Info("looopy started", "public_url", cfg.PublicURL, "data", dc.DataDir,
			"plugins", m.pluginDir, "model", dc.Model.Plugin, "auth", cfg.Auth.Enabled)
		return nil
	}
	m.served = make(chan error, 1)
	m.serveDone = make(chan struct{})
	go func() {
		err := srv.Serve(m.ln)
		m.serveErr = err
		close(m.serveDone)
		m.served <- err
		close(m.served) // Done answers nil once the error was taken
	}()
	m.log.Info("looopy serving", "addr", m.ln.Addr().String(), "data", dc.DataDir,
		"plugins", m.pluginDir, "model", dc.Model.Plugin, "auth", cfg.Auth.Enabled,
		"max_running", dc.Limits.MaxRunning, "max_running_per_principal", dc.Limits.MaxRunningPerPrincipal,
		"memory_limit", memLimit)
	return nil
}

// Done receives the error the server stopped with (nil after Close).
func (m *Main) Done() <-chan error { return m.served }

// Close shuts down gracefully: no new requests or turns, running turns get
// Limits.ShutdownGrace to finish and are then handed on (left working, as
// a crash leaves them, for the next start or another host), open streams end,
// plugins are closed and Badger is closed cleanly. Every wait is bounded:
// a part that does not stop in time is named in the error and left behind.
func (m *Main) Close() error {
	// One Close at a time: a second (a signal handler's and a deferred
	// one, say) waits for the first and finds nothing left to close.
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	var errs []error
	if m.server != nil {
		grace := time.Duration(m.Config.withDefaults().Limits.ShutdownGrace)
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		errs = append(errs, boundedStep("the HTTP server and the running turns", grace+closeStepTimeout, func() error {
			return m.server.Shutdown(ctx)
		}))
		cancel()
		if m.serveDone != nil {
			select {
			case <-m.serveDone:
				if m.serveErr != nil {
					errs = append(errs, m.serveErr)
				}
			case <-time.After(closeStepTimeout):
				errs = append(errs, fmt.Errorf("shutdown: the HTTP server did not stop within %s", closeStepTimeout))
			}
		}
		m.server = nil
	}
	errs = append(errs, m.closeAll())
	return errors.Join(errs...)
}

// closeStepTimeout bounds each step of Close past the turns' grace (longer
// than the store's own bound on closing Badger, a minute).
var closeStepTimeout = 90 * time.Second

// boundedStep runs fn and waits for it at most d: past it, the error names
// what did not stop (fn goes on in the background; the process is exiting).
func boundedStep(what string, d time.Duration, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("shutdown: %s did not stop within %s", what, d)
	}
}

func (m *Main) closeAll() error {
	var errs []error
	for i := len(m.closers) - 1; i >= 0; i-- {
		errs = append(errs, boundedStep(fmt.Sprintf("closer %d of %d", i+1, len(m.closers)), closeStepTimeout, m.closers[i]))
	}
	m.closers = nil
	return errors.Join(errs...)
}

func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// newLogger returns a JSON logger, or a text one when format says so or,
// with no format, when out is a terminal.
func newLogger(out io.Writer, format, level string, secrets []string) *slog.Logger {
	if out == nil {
		out = os.Stderr
	}
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: lv}
	text := format == "text"
	if format == "" {
		if f, ok := out.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			text = true
		}
	}
	var h slog.Handler = slog.NewJSONHandler(out, opts)
	if text {
		h = slog.NewTextHandler(out, opts)
	}
	return slog.New(newLogHandler(h, secrets))
}

// hostID is the default name of this host in leases: the machine's name and
// the data directory, so that a host restarted on its data takes its own
// tasks back at once (Badger lets one process at a time open a directory).
func hostID(dataDir string) string {
	name, _ := os.Hostname()
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	sum := sha256.Sum256([]byte(dataDir))
	return name + "/" + hex.EncodeToString(sum[:6])
}

// crashpointEnv names a point between two writes of a task's life where
// the process kills itself (SIGKILL), for the crash tests:
// LOOOPY_CRASHPOINT=turn-ending:3 dies the third time a turn is about to
// write its commit with its final events. The points are taskrt's
// Point constants and remote.PointAcknowledged (a remote agent's
// acknowledgement read, its task's id not recorded yet).
//
// With ":term" after the count (turn-ending:1:term, a runtime's point
// only) the process stops gracefully there instead: it sends itself
// SIGTERM and holds the turn at that point until the shutdown's grace
// (limits.shutdownGrace) has run out and the running turns are suspended,
// for the stop tests.
const crashpointEnv = "LOOOPY_CRASHPOINT"

// crashpointFromEnv reads crashpointEnv: the hook for the crash points,
// and, for a stop point (":term"), the hook the runtime calls once it
// suspends the turns (nil otherwise).
func crashpointFromEnv(v string) (func(string), func(), error) {
	if v == "" {
		return nil, nil, nil
	}
	point, rest, _ := strings.Cut(v, ":")
	nth, mode, _ := strings.Cut(rest, ":")
	n := 1
	if nth != "" {
		var err error
		if n, err = strconv.Atoi(nth); err != nil || n < 1 {
			return nil, nil, fmt.Errorf("%s=%q: the count after ':' must be a positive number", crashpointEnv, v)
		}
	}
	switch point {
	case taskrt.PointTaskStarting, taskrt.PointLeaseTaken, taskrt.PointTaskSaved, taskrt.PointTurnEnding, taskrt.PointTurnCommitted,
		taskrt.PointTurnSettled, taskrt.PointEndSaved, taskrt.PointConversationPurging:
	case remote.PointAcknowledged:
		if mode != "" {
			return nil, nil, fmt.Errorf("%s=%q: %q has no stop mode", crashpointEnv, v, point)
		}
	default:
		return nil, nil, fmt.Errorf("%s=%q: unknown point %q", crashpointEnv, v, point)
	}
	var seen atomic.Int64
	switch mode {
	case "":
		return func(p string) {
			if p == point && seen.Add(1) == int64(n) {
				killSelf()
			}
		}, nil, nil
	case "term":
		suspended := make(chan struct{})
		var once sync.Once
		return func(p string) {
				if p != point || seen.Add(1) != int64(n) {
					return
				}
				termSelf()
				select {
				case <-suspended:
				case <-time.After(10 * time.Minute):
					// A hang guard: the shutdown never suspended the turns.
					fmt.Fprintln(os.Stderr, "crashpoint: the shutdown did not suspend the turns")
				}
			}, func() {
				once.Do(func() { close(suspended) })
			}, nil
	}
	return nil, nil, fmt.Errorf("%s=%q: unknown mode %q (want term)", crashpointEnv, v, mode)
}

// ErrVersion is returned by ParseFlags for -version: print Version and exit.
var ErrVersion = errors.New("version asked for")

// usageError is ParseFlags' answer to -h: the usage, which is no failure
// (errors.Is(err, flag.ErrHelp)).
type usageError struct{ text string }

func (e *usageError) Error() string        { return e.text }
func (e *usageError) Is(target error) bool { return target == flag.ErrHelp }

// flagHint suggests the flag an unknown one was probably meant to be, and
// where the flags are listed.
func flagHint(fs *flag.FlagSet, err error) string {
	const list = "; \"looopy -h\" lists the flags"
	_, name, ok := strings.Cut(err.Error(), "flag provided but not defined: -")
	if !ok {
		return list
	}
	name = strings.TrimPrefix(name, "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	best, bestD := "", 3 // suggest only what is at most two edits away
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" && name != "" {
		fs.VisitAll(func(f *flag.Flag) {
			if best == "" && strings.HasPrefix(f.Name, name) {
				best = f.Name
			}
		})
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean -%s?)%s", best, list)
	}
	return list
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// version is set at build time (make build: -ldflags "-X ...host.version=...").
var version = ""

// Version is the host's version: the one the build set, else the module's
// version or the commit it was built from, else "devel".
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}
