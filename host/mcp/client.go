package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/loop/jsonlimit"
)

// Defaults of a ClientConfig.
const (
	DefaultCallTimeout    = 60 * time.Second
	DefaultStartTimeout   = 30 * time.Second
	DefaultMaxResultBytes = 1 << 20
	// DefaultMaxMessageBytes bounds one message read from a server (an
	// HTTP answer's body, one SSE event, one stdio line) before it is
	// decoded.
	DefaultMaxMessageBytes = 8 << 20
	DefaultMinBackoff      = time.Second
	DefaultMaxBackoff      = time.Minute
	// hangLimit consecutive timed-out calls make the server count as hung:
	// it is restarted.
	hangLimit = 2
)

// Restart policies.
const (
	RestartOnFailure = "on-failure" // default: a server that exits or hangs is started again, with backoff
	RestartNever     = "never"      // a server that exits stays down; its tools answer errors
)

// ClientConfig is one outside MCP server whose tools the agent may use.
// Exactly one of Command and URL is set.
type ClientConfig struct {
	// Name names the server in logs, errors and the admin API; its tools are
	// offered as Prefix + the tool's own name.
	Name string
	// Command runs a server over stdio: the program and its arguments.
	Command []string
	// Env is the child's environment, besides PATH, HOME, LANG and TMPDIR:
	// the host's own environment (its API keys) is not passed on.
	Env map[string]string
	// Dir is the child's working folder (default: the host's).
	Dir string
	// URL reaches a server over streamable HTTP.
	URL string
	// Headers are sent with every HTTP request (e.g. Authorization).
	Headers map[string]string
	// Allow lists the server's tools the agent may use (path.Match
	// patterns; empty: all). Deny removes tools, and wins over Allow.
	Allow, Deny []string
	// Prefix is put before each tool's name (default Name + "_").
	Prefix string
	// CallTimeout bounds one call (default 60s). Two calls in a row that
	// time out make the server count as hung: it is restarted.
	CallTimeout time.Duration
	// StartTimeout bounds starting, initializing and listing (default 30s).
	StartTimeout time.Duration
	// Restart is RestartOnFailure (default) or RestartNever.
	Restart string
	// MaxRestarts bounds restarts in a row that do not come up (0: no bound).
	MaxRestarts int
	// MaxResultBytes bounds a result's text (default 1 MiB; more is cut).
	MaxResultBytes int
	// MaxMessageBytes bounds one message the server sends (an HTTP answer's
	// body, one event of its SSE stream, one line over stdio), counted as
	// it is read, before anything is decoded (default 8 MiB). A server
	// that sends more is cut off: the call fails saying so, and the server
	// is restarted like one that exited.
	MaxMessageBytes int
	Logger          *slog.Logger
	// HTTPClient for URL servers (default: one with no overall timeout;
	// calls are bounded by CallTimeout).
	HTTPClient *http.Client
}

var serverNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,31}$`)

// Validate reports the first problem of c.
func (c ClientConfig) Validate() error {
	if !serverNameRE.MatchString(c.Name) {
		return fmt.Errorf("mcp server %q: name: want 1-32 letters, digits, '_' or '-'", c.Name)
	}
	if (len(c.Command) == 0) == (c.URL == "") {
		return fmt.Errorf("mcp server %q: set exactly one of command and url", c.Name)
	}
	if len(c.Command) > 0 && c.Command[0] == "" {
		return fmt.Errorf("mcp server %q: empty command", c.Name)
	}
	if c.URL != "" && !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
		return fmt.Errorf("mcp server %q: url %q: want http:// or https://", c.Name, c.URL)
	}
	for _, p := range append(slices.Clone(c.Allow), c.Deny...) {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("mcp server %q: tool pattern %q: %w", c.Name, p, err)
		}
	}
	switch c.Restart {
	case "", RestartOnFailure, RestartNever:
	default:
		return fmt.Errorf("mcp server %q: restart %q: want %s or %s", c.Name, c.Restart, RestartOnFailure, RestartNever)
	}
	if c.CallTimeout < 0 || c.StartTimeout < 0 || c.MaxRestarts < 0 || c.MaxResultBytes < 0 || c.MaxMessageBytes < 0 {
		return fmt.Errorf("mcp server %q: negative limit", c.Name)
	}
	return nil
}

// Status describes a server for the admin API.
type Status struct {
	Name      string    `json:"name"`
	Transport string    `json:"transport"` // stdio, http
	Target    string    `json:"target"`    // the command or the URL
	Sandboxed bool      `json:"sandboxed"` // always false: the server runs outside the Wasm sandbox
	State     string    `json:"state"`     // starting, serving, restarting, down, closed
	Tools     []string  `json:"tools,omitempty"`
	Restarts  int       `json:"restarts"`
	LastError string    `json:"lastError,omitempty"`
	Since     time.Time `json:"since,omitzero"`
}

// Toolset offers the tools of one outside MCP server to the agent. It keeps
// the server running: one that exits or hangs is restarted with backoff
// (RestartOnFailure), and while it is down its tools answer a clear error at
// once. No call waits longer than CallTimeout. Safe for concurrent use.
type Toolset struct {
	cfg ClientConfig
	log *slog.Logger

	mu       sync.Mutex
	session  *sdk.ClientSession
	gen      int // incremented per connection
	lostGen  int // the last connection known lost
	tools    []loop.ToolDefinition
	names    map[string]string                                // offered name -> server's name
	progress map[string]func(*sdk.ProgressNotificationParams) // by progress token (the call's id)
	state    string
	lastErr  string
	since    time.Time
	restarts int // restarts that did not come up, in a row
	total    int // all restarts
	timeouts int // calls in a row that timed out
	backoff  time.Duration
	retry    *time.Timer
	starting bool
	closed   bool
	wg       sync.WaitGroup
	// tooLarge is set when the server sent a message past
	// MaxMessageBytes: the call that fails with it says so.
	tooLarge atomic.Bool
}

var _ loop.Toolset = (*Toolset)(nil)

// NewToolset checks cfg and returns a toolset that is not started: Start
// connects.
func NewToolset(cfg ClientConfig) (*Toolset, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Prefix == "" {
		cfg.Prefix = cfg.Name + "_"
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.MaxResultBytes == 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.Restart == "" {
		cfg.Restart = RestartOnFailure
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Toolset{cfg: cfg, log: log.With("mcp_server", cfg.Name), state: "starting",
		names: map[string]string{}, progress: map[string]func(*sdk.ProgressNotificationParams){}}, nil
}

// Sandboxed reports false: an MCP server's tools run outside the Wasm
// sandbox, with whatever its process or service can do.
func (t *Toolset) Sandboxed() bool { return false }

// Name is the server's configured name.
func (t *Toolset) Name() string { return t.cfg.Name }

// Start starts the server and lists its tools, within StartTimeout. When
// that fails the error is returned and, with RestartOnFailure, the toolset
// keeps trying in the background: the host serves meanwhile.
func (t *Toolset) Start(ctx context.Context) error {
	t.mu.Lock()
	if t.closed || t.starting {
		t.mu.Unlock()
		return nil
	}
	t.starting = true
	t.mu.Unlock()
	err := t.connect(ctx)
	if err != nil {
		t.failed(err)
	}
	return err
}

// connect runs one attempt: start or reach the server, initialize, list.
func (t *Toolset) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.StartTimeout)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "looopy", Version: "dev"}, &sdk.ClientOptions{
		Logger:                 t.log,
		Capabilities:           &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { t.relist() },
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			tok, _ := r.Params.ProgressToken.(string)
			t.mu.Lock()
			fn := t.progress[tok]
			t.mu.Unlock()
			if fn != nil {
				fn(r.Params)
			}
		},
	})
	tr, err := t.transport()
	if err != nil {
		return err
	}
	cs, err := client.Connect(ctx, tr, nil)
	if err != nil {
		return fmt.Errorf("start: %w", startErr(ctx, err, t.cfg.StartTimeout))
	}
	tools, names, err := t.list(ctx, cs)
	if err != nil {
		_ = cs.Close()
		return fmt.Errorf("list tools: %w", startErr(ctx, err, t.cfg.StartTimeout))
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = cs.Close()
		return errors.New("closed")
	}
	t.gen++
	gen := t.gen
	t.session, t.tools, t.names = cs, tools, names
	t.state, t.since, t.lastErr = "serving", time.Now(), ""
	t.restarts, t.timeouts, t.backoff, t.starting = 0, 0, 0, false
	t.mu.Unlock()
	t.log.Info("mcp server serving", "tools", len(tools))
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		err := cs.Wait()
		t.lost(gen, err)
	}()
	return nil
}

func startErr(ctx context.Context, err error, limit time.Duration) error {
	if ctx.Err() != nil {
		return fmt.Errorf("no answer within %s: %w", limit, err)
	}
	return err
}

func (t *Toolset) transport() (sdk.Transport, error) {
	if t.cfg.URL != "" {
		hc := t.cfg.HTTPClient
		if hc == nil {
			hc = &http.Client{}
		}
		hc = &http.Client{Transport: headerTransport{base: hc.Transport, headers: t.cfg.Headers, limit: t.cfg.MaxMessageBytes, over: t.over},
			Jar: hc.Jar, CheckRedirect: hc.CheckRedirect, Timeout: hc.Timeout}
		return &sdk.StreamableClientTransport{Endpoint: t.cfg.URL, HTTPClient: hc, MaxRetries: 1, MaxEventSize: 2*t.cfg.MaxMessageBytes + 4096}, nil
	}
	cmd := exec.Command(t.cfg.Command[0], t.cfg.Command[1:]...)
	cmd.Dir = t.cfg.Dir
	cmd.Env = childEnv(t.cfg.Env)
	cmd.Stderr = &lineLogger{log: t.log}
	cmd.WaitDelay = 2 * time.Second // a grandchild holding the pipes does not hold us
	return &stdioTransport{cmd: cmd, terminate: 2 * time.Second, limit: t.cfg.MaxMessageBytes, over: t.over}, nil
}

// over records that the server sent a message past the limit.
func (t *Toolset) over() {
	t.tooLarge.Store(true)
	t.log.Warn("mcp server sent a message past the size limit; cutting it off", "limit", t.cfg.MaxMessageBytes)
}

// errTooLarge ends the reading of a message past MaxMessageBytes.
var errTooLarge = errors.New("mcp: the server's message is larger than the limit of one message")

// limitedBody reads an HTTP answer's body up to limit bytes; past it the
// read fails and the rest is never read.
type limitedBody struct {
	body  io.ReadCloser
	left  int64
	over  func()
	count bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if b.count {
			b.count = false
			b.over()
		}
		return 0, errTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	if b.left <= 0 && err == nil {
		// One byte more tells a body of exactly limit bytes from a longer one.
		var one [1]byte
		if m, _ := b.body.Read(one[:]); m == 0 {
			return n, io.EOF
		}
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.body.Close() }

// eventLimit reads an SSE stream, failing once one event (the lines up to
// an empty one) holds more than limit bytes.
type eventLimit struct {
	body    io.ReadCloser
	limit   int
	event   int // bytes of the event so far
	lineLen int
	failed  bool
	over    func()
}

func (e *eventLimit) Read(p []byte) (int, error) {
	if e.failed {
		return 0, errTooLarge
	}
	n, err := e.body.Read(p)
	for i := range n {
		switch p[i] {
		case '\n':
			if e.lineLen == 0 {
				e.event = 0
			}
			e.lineLen = 0
		case '\r':
		default:
			e.lineLen++
			e.event++
			if e.event > e.limit {
				e.failed = true
				e.over()
				return i, errTooLarge
			}
		}
	}
	return n, err
}

func (e *eventLimit) Close() error { return e.body.Close() }

// stdioTransport runs the server as a child and speaks to it over its
// stdin and stdout, one JSON-RPC message a line, each line bounded by
// limit before it is decoded. Closing closes the child's stdin, then
// terminates and kills it if it does not exit.
type stdioTransport struct {
	cmd       *exec.Cmd
	terminate time.Duration
	limit     int
	over      func()
}

func (s *stdioTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	r := &lineLimit{r: stdout, limit: s.limit, over: s.over}
	tr := &sdk.IOTransport{Reader: r, Writer: &childStdin{WriteCloser: stdin, cmd: s.cmd, terminate: s.terminate},
		MaxLineLength: s.limit + 1}
	return tr.Connect(ctx)
}

// lineLimit passes the child's stdout through, failing once one line is
// longer than limit bytes. Closing it does nothing: the connection ends by
// closing the child's stdin.
type lineLimit struct {
	r     io.Reader
	limit int
	line  int
	over  func()
}

func (l *lineLimit) Read(p []byte) (int, error) {
	if l.line > l.limit {
		return 0, errTooLarge
	}
	n, err := l.r.Read(p)
	for i := range n {
		if p[i] == '\n' {
			l.line = 0
			continue
		}
		l.line++
		if l.line > l.limit {
			l.over()
			// Hand on what came before the line; the decoder stops at
			// the error.
			return i, errTooLarge
		}
	}
	return n, err
}

func (l *lineLimit) Close() error { return nil }

// childStdin closes the child's stdin, then waits for it to exit,
// terminating and then killing it when it does not.
type childStdin struct {
	io.WriteCloser
	cmd       *exec.Cmd
	terminate time.Duration
}

func (c *childStdin) Close() error {
	_ = c.WriteCloser.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(c.terminate):
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(c.terminate):
	}
	_ = c.cmd.Process.Kill()
	return <-done
}

// childEnv is the little of the host's environment a server needs to run,
// and what its configuration adds.
func childEnv(extra map[string]string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// headerTransport sets the configured headers on every request and bounds
// every answer's body that is not an event stream (whose events the SDK
// bounds one by one) at limit bytes.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
	limit   int
	over    func()
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	base := h.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream") {
		resp.Body = &eventLimit{body: resp.Body, limit: h.limit, over: h.over}
	} else {
		resp.Body = &limitedBody{body: resp.Body, left: int64(h.limit), over: h.over, count: true}
	}
	return resp, nil
}

// lineLogger logs a child's stderr line by line, each line cut at 1 KiB.
type lineLogger struct {
	log *slog.Logger
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) > 1024 {
				l.log.Info("mcp server stderr", "line", string(l.buf[:1024]))
				l.buf = l.buf[:0]
			}
			return len(p), nil
		}
		line := l.buf[:min(i, 1024)]
		l.log.Info("mcp server stderr", "line", string(line))
		l.buf = l.buf[i+1:]
	}
}

// list reads the server's tools through the allow and deny lists.
func (t *Toolset) list(ctx context.Context, cs *sdk.ClientSession) ([]loop.ToolDefinition, map[string]string, error) {
	var defs []loop.ToolDefinition
	names := map[string]string{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, nil, err
		}
		if !t.allowed(tool.Name) {
			continue
		}
		schema, err := json.Marshal(tool.InputSchema)
		if err != nil || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		if jsonlimit.CheckSchema(schema) != nil {
			continue // a schema nested past the bound is not offered (nor compiled)
		}
		name := t.cfg.Prefix + tool.Name
		if _, dup := names[name]; dup {
			continue
		}
		names[name] = tool.Name
		idem := tool.Annotations != nil && tool.Annotations.IdempotentHint
		defs = append(defs, loop.ToolDefinition{Name: name, Description: tool.Description, Parameters: schema, Idempotent: idem})
		if len(defs) >= 512 {
			break // a server listing without end does not fill the host
		}
	}
	slices.SortFunc(defs, func(a, b loop.ToolDefinition) int { return strings.Compare(a.Name, b.Name) })
	return defs, names, nil
}

func (t *Toolset) allowed(name string) bool {
	for _, p := range t.cfg.Deny {
		if ok, _ := path.Match(p, name); ok {
			return false
		}
	}
	if len(t.cfg.Allow) == 0 {
		return true
	}
	for _, p := range t.cfg.Allow {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// relist reads the tools again after the server said they changed.
func (t *Toolset) relist() {
	t.mu.Lock()
	cs, gen := t.session, t.gen
	t.mu.Unlock()
	if cs == nil {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.StartTimeout)
		defer cancel()
		tools, names, err := t.list(ctx, cs)
		if err != nil {
			t.log.Warn("mcp server: listing changed tools failed", "error", err.Error())
			return
		}
		t.mu.Lock()
		if t.gen == gen {
			t.tools, t.names = tools, names
		}
		t.mu.Unlock()
	}()
}

// lost is told that connection gen ended.
func (t *Toolset) lost(gen int, err error) {
	t.mu.Lock()
	if t.gen != gen || t.closed || t.lostGen == gen {
		t.mu.Unlock()
		return
	}
	t.lostGen = gen
	t.session = nil
	t.mu.Unlock()
	msg := "the server closed the connection"
	if err != nil {
		msg = err.Error()
	}
	t.failed(errors.New(msg))
}

// failed records a failure and schedules the next attempt.
func (t *Toolset) failed(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.starting = false
	if t.closed {
		return
	}
	t.lastErr, t.since = err.Error(), time.Now()
	if t.cfg.Restart == RestartNever || (t.cfg.MaxRestarts > 0 && t.restarts >= t.cfg.MaxRestarts) {
		t.state = "down"
		t.log.Error("mcp server down", "error", err.Error(), "restarts", t.total)
		return
	}
	t.state = "restarting"
	if t.backoff == 0 {
		t.backoff = DefaultMinBackoff
	} else {
		t.backoff = min(2*t.backoff, DefaultMaxBackoff)
	}
	t.log.Warn("mcp server failed; restarting", "error", err.Error(), "in", t.backoff.String())
	if t.retry != nil {
		t.retry.Stop()
	}
	t.retry = time.AfterFunc(t.backoff, t.restart)
}

func (t *Toolset) restart() {
	t.mu.Lock()
	if t.closed || t.session != nil || t.starting {
		t.mu.Unlock()
		return
	}
	t.starting = true
	t.restarts++
	t.total++
	t.wg.Add(1)
	t.mu.Unlock()
	defer t.wg.Done()
	if err := t.connect(context.Background()); err != nil {
		t.failed(err)
	}
}

// kill ends a connection (a hung server, one past the size limit); its
// Wait then reports the loss. why is the status's last error.
func (t *Toolset) kill(gen int, why string) {
	t.mu.Lock()
	cs := t.session
	if t.gen != gen || cs == nil {
		t.mu.Unlock()
		return
	}
	t.session = nil // no call goes to it any more; its Wait reports the loss
	t.state, t.lastErr = "restarting", why
	t.mu.Unlock()
	t.log.Warn("mcp server cut off; restarting it", "why", why)
	t.wg.Add(1)
	go func() { defer t.wg.Done(); _ = cs.Close() }()
}

// Tools lists the server's allowed tools, as of its last listing. While
// the server is down its tools stay listed, and answer errors.
func (t *Toolset) Tools(ctx context.Context) ([]loop.ToolDefinition, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.tools), nil
}

var _ loop.SelfTimed = (*Toolset)(nil)

// TimesCalls reports true: a call is bounded by CallTimeout (and counted
// toward taking the server for hung), not by the loop's tool timeout.
func (t *Toolset) TimesCalls(string) bool { return true }

// Call calls a tool on the server, within CallTimeout. A server that is
// down, exits during the call, or does not answer in time gives a tool
// error (IsError) that says so; the call never waits for a restart.
func (t *Toolset) Call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	t.mu.Lock()
	cs, gen, state, lastErr := t.session, t.gen, t.state, t.lastErr
	name, ok := t.names[call.Name]
	t.mu.Unlock()
	if !ok {
		return loop.ToolResult{}, fmt.Errorf("mcp server %q: %w", t.cfg.Name, &loop.NotFoundError{What: "tool", ID: call.Name})
	}
	fail := func(msg string) (loop.ToolResult, error) {
		return loop.ToolResult{ToolCallID: call.ID, IsError: true, Content: fmt.Sprintf("MCP server %q: %s", t.cfg.Name, msg)}, nil
	}
	if cs == nil {
		if state == "down" {
			return fail("is down (" + lastErr + ")")
		}
		return fail("is not running; restarting (" + lastErr + ")")
	}
	var args map[string]any
	if len(call.Arguments) > 0 && string(call.Arguments) != "null" {
		if err := json.Unmarshal(call.Arguments, &args); err != nil {
			return fail("arguments are not a JSON object: " + err.Error())
		}
	}
	cctx, cancel := context.WithTimeout(ctx, t.cfg.CallTimeout)
	defer cancel()
	params := &sdk.CallToolParams{Name: name, Arguments: args}
	if env != nil && env.Emit != nil {
		params.SetProgressToken(call.ID)
	}
	res, err := t.callWithProgress(cctx, cs, params, call, env)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return loop.ToolResult{}, ctx.Err()
		case cctx.Err() != nil:
			t.mu.Lock()
			t.timeouts++
			hung := t.timeouts >= hangLimit
			t.mu.Unlock()
			if hung {
				t.kill(gen, fmt.Sprintf("hung: %d calls in a row timed out", hangLimit))
			}
			return fail(fmt.Sprintf("no answer within %s", t.cfg.CallTimeout))
		case t.tooLarge.Swap(false):
			t.kill(gen, fmt.Sprintf("sent a message larger than %d bytes", t.cfg.MaxMessageBytes))
			return fail(fmt.Sprintf("answered a message larger than %d bytes (the limit of one message); restarting it", t.cfg.MaxMessageBytes))
		case errors.Is(err, sdk.ErrConnectionClosed):
			t.lost(gen, err)
			return fail("the server exited during the call; restarting")
		}
		return fail(err.Error())
	}
	t.mu.Lock()
	t.timeouts = 0
	t.mu.Unlock()
	return t.result(call.ID, res), nil
}

// callWithProgress makes the call; progress the server reports becomes
// tool-progress events of the turn.
func (t *Toolset) callWithProgress(ctx context.Context, cs *sdk.ClientSession, p *sdk.CallToolParams, call loop.ToolCall, env *loop.ToolEnv) (*sdk.CallToolResult, error) {
	if env == nil || env.Emit == nil {
		return cs.CallTool(ctx, p)
	}
	t.mu.Lock()
	t.progress[call.ID] = func(n *sdk.ProgressNotificationParams) {
		ev := &loop.ToolProgress{ToolCallID: call.ID, Message: n.Message}
		if n.Total > 0 {
			ev.Progress = min(n.Progress/n.Total, 1)
		}
		env.Emit(ev)
	}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.progress, call.ID)
		t.mu.Unlock()
	}()
	return cs.CallTool(ctx, p)
}

// result turns an MCP result into a tool result: text parts joined, other
// parts named, structured content as Data, the whole cut at MaxResultBytes.
func (t *Toolset) result(id string, r *sdk.CallToolResult) loop.ToolResult {
	var sb strings.Builder
	for i, c := range r.Content {
		if i > 0 {
			sb.WriteString("\n")
		}
		switch c := c.(type) {
		case *sdk.TextContent:
			sb.WriteString(c.Text)
		case *sdk.ImageContent:
			fmt.Fprintf(&sb, "[image %s, %d bytes]", c.MIMEType, len(c.Data))
		case *sdk.AudioContent:
			fmt.Fprintf(&sb, "[audio %s, %d bytes]", c.MIMEType, len(c.Data))
		case *sdk.ResourceLink:
			fmt.Fprintf(&sb, "[resource %s %s]", c.Name, c.URI)
		case *sdk.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				sb.WriteString(c.Resource.Text)
			} else if c.Resource != nil {
				fmt.Fprintf(&sb, "[resource %s]", c.Resource.URI)
			}
		default:
			sb.WriteString("[content of an unknown kind]")
		}
		if sb.Len() > t.cfg.MaxResultBytes {
			break
		}
	}
	text := sb.String()
	if len(text) > t.cfg.MaxResultBytes {
		text = text[:t.cfg.MaxResultBytes] + fmt.Sprintf("\n[cut at %d bytes]", t.cfg.MaxResultBytes)
	}
	out := loop.ToolResult{ToolCallID: id, Content: text, IsError: r.IsError}
	if r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil && len(b) <= t.cfg.MaxResultBytes &&
			jsonlimit.Check(b, jsonlimit.MaxDepth) == nil {
			out.Data = b
		}
	}
	return out
}

// Status describes the server now.
func (t *Toolset) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := Status{Name: t.cfg.Name, Transport: "stdio", Target: strings.Join(t.cfg.Command, " "),
		State: t.state, Restarts: t.total, LastError: t.lastErr, Since: t.since}
	if t.cfg.URL != "" {
		st.Transport, st.Target = "http", t.cfg.URL
	}
	for _, d := range t.tools {
		st.Tools = append(st.Tools, d.Name)
	}
	return st
}

// Close stops the server (a child process gets its stdin closed, then
// SIGTERM, then SIGKILL) and waits for the toolset's goroutines.
func (t *Toolset) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.state = "closed"
	cs := t.session
	t.session = nil
	if t.retry != nil {
		t.retry.Stop()
	}
	t.mu.Unlock()
	var err error
	if cs != nil {
		err = cs.Close()
	}
	t.wg.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil // a child stopped by a signal on the way out
	}
	return err
}
