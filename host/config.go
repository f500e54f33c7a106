package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/looopy-go/looopy/host/taskrt"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/pdk"
	"github.com/looopy-go/looopy/sse"
)

// Config is the whole configuration of the host. A zero field means its
// default; defaults are applied to a copy, never written back.
//
// It is read from a JSON file (LoadConfig); flags and environment variables
// (Main.ParseFlags) override the file.
type Config struct {
	// Addr is the listen address (default 127.0.0.1:8080).
	Addr string `json:"addr,omitempty"`
	// DataDir holds the Badger database (default ./data).
	DataDir string `json:"dataDir,omitempty"`
	// PluginDir is the folder of plugins to load and watch (default
	// examples/plugins when it exists; empty: no plugins).
	PluginDir string `json:"pluginDir,omitempty"`
	// InMemory keeps everything in memory, in the map store (store.Memory;
	// with store.backend redis, Redis is used): nothing survives a restart.
	// For trials and benchmarks; DataDir then holds only the compile cache.
	InMemory bool `json:"inMemory,omitempty"`
	// PublicURL is the base URL written into the agent card (default
	// http://<Addr>).
	PublicURL string `json:"publicUrl,omitempty"`

	// Server: who may reach the host from a web browser (Host names,
	// origins of other web pages).
	Server ServerConfig `json:"server"`

	// Store selects the engine of the host's state: Badger in DataDir
	// (default) or Redis shared by several hosts, with S3 for artifacts.
	Store StoreConfig `json:"store"`

	Agent   AgentConfig   `json:"agent"`
	Plugins PluginsConfig `json:"plugins"`
	// MCP: the host's tools served over MCP, and outside MCP servers as
	// toolsets of the agent.
	MCP MCPConfig `json:"mcp"`
	// RemoteAgents are remote A2A agents the agent may call as sub-agents.
	RemoteAgents []RemoteAgentConfig `json:"remoteAgents,omitempty"`
	// Web: the chat page served at GET / (on unless disabled).
	Web    WebConfig    `json:"web"`
	Model  ModelConfig  `json:"model"`
	Auth   AuthConfig   `json:"auth"`
	Admin  AdminConfig  `json:"admin"`
	Limits LimitsConfig `json:"limits"`
	// Interaction: humans in the loop (approvals, client tools, timeouts).
	Interaction InteractionConfig `json:"interaction"`
	// Thoughts: the agent's thought-stream events and their verbosity.
	Thoughts ThoughtsConfig `json:"thoughts"`
	// Observability: the /metrics token and usage limits per principal.
	// Spans are exported as the standard OTEL_* environment says.
	Observability ObservabilityConfig `json:"observability"`

	// LogFormat is "json", "text" or "" (text in a terminal, JSON otherwise).
	LogFormat string `json:"logFormat,omitempty"`
	// TraceSpans writes the OpenTelemetry spans of every request and turn
	// (agent turn, model calls, tool calls) to the log, besides any
	// exporter the OTEL_* environment configures.
	TraceSpans bool `json:"traceSpans,omitempty"`
	// LogLevel is debug, info (default), warn or error.
	LogLevel string `json:"logLevel,omitempty"`
}

// AgentConfig describes the agent the host serves.
type AgentConfig struct {
	Name         string `json:"name,omitempty"`        // default "Looopy"
	Description  string `json:"description,omitempty"` // shown on the agent card
	SystemPrompt string `json:"systemPrompt,omitempty"`
	// MaxIterations of one turn (default 10).
	MaxIterations int `json:"maxIterations,omitempty"`
	// HistoryLimit is the number of messages loaded for a turn (0: all).
	HistoryLimit int `json:"historyLimit,omitempty"`
	// HistoryBytes bounds the history handed to the model for a turn by
	// size (loop.MessageSize): the most recent messages up to this many
	// bytes (default 1 MiB; -1: no bound). It also bounds what the host
	// keeps of a conversation in memory.
	HistoryBytes int `json:"historyBytes,omitempty"`
	// ArtifactTools offers the model the nine built-in artifact tools
	// (create_artifact, append_artifact, ..., write_data: about 1,800
	// prompt tokens on every call). Off by default: a small or CPU-served
	// model pays for every tool it is offered.
	ArtifactTools bool `json:"artifactTools,omitempty"`
}

// DefaultHistoryBytes is the default of agent.historyBytes.
const DefaultHistoryBytes = 1 << 20

// DefaultMaxAgentBytes is the default of limits.maxAgentBytes.
const DefaultMaxAgentBytes = 256 << 20

// ModelConfig selects the model and the parameters of every call the
// agent makes. Plugin names a model plugin (default "scripted-model", the
// demo script). The parameters set here reach the plugin in each request
// and win over the plugin's own config; unset, the plugin's apply.
type ModelConfig struct {
	Plugin string `json:"plugin,omitempty"`
	// Name is the model name asked for in each request (the OpenAI
	// adapter's "model"); empty: the plugin's configured model.
	Name string `json:"name,omitempty"`
	// Temperature of sampling, 0 to 2; unset: the plugin's or the
	// server's default.
	Temperature *float64 `json:"temperature,omitempty"`
	// MaxTokens bounds each answer; 0: the plugin's or the server's
	// default.
	MaxTokens int `json:"maxTokens,omitempty"`
}

// AuthConfig turns client authentication on. With Enabled false every
// request is served as the principal "local".
type AuthConfig struct {
	Enabled bool `json:"enabled,omitempty"`
	// Keys maps an API key or bearer token to its principal. A key may be
	// given as "env:NAME" to read it from the environment.
	Keys []APIKey `json:"keys,omitempty"`
}

// APIKey is one credential and the principal it stands for.
type APIKey struct {
	Key       string   `json:"key"`
	Principal string   `json:"principal"`
	Scopes    []string `json:"scopes,omitempty"`
}

// ServerConfig says which browsers' requests the host serves
// (docs/SECURITY.md, "Browsers"). Requests without an Origin header (the
// A2A SDKs, looopy chat, curl) are unaffected by AllowedOrigins.
type ServerConfig struct {
	// AllowedHosts are the host names (the Host header, without the port)
	// the host answers to besides localhost, IP addresses and publicUrl's
	// host. While it is empty the Host is checked only when Addr is a
	// loopback address (the default); set, it is checked whatever Addr.
	// Behind a proxy that passes the public name on, list that name (or
	// set publicUrl to the public URL). "*" answers to any name: only
	// with auth on, since a web page can then reach the host through DNS
	// rebinding.
	AllowedHosts []string `json:"allowedHosts,omitempty"`
	// AllowedOrigins are the origins (scheme://host[:port]) of other web
	// pages that may call the host from a browser, besides its own and
	// publicUrl's. A request from any other origin is refused (HTTP 403).
	// "*" lets every page call it.
	AllowedOrigins []string `json:"allowedOrigins,omitempty"`
}

func (c ServerConfig) validate() error {
	for i, h := range c.AllowedHosts {
		if h == "*" {
			continue
		}
		if h == "" || strings.ContainsAny(h, "/:@ ") && !strings.HasPrefix(h, "[") {
			return fmt.Errorf("config: server.allowedHosts[%d] %q: want a host name without scheme, port or path (or \"*\")", i, h)
		}
	}
	for i, o := range c.AllowedOrigins {
		if o == "*" {
			continue
		}
		if _, ok := normOrigin(o); !ok {
			return fmt.Errorf("config: server.allowedOrigins[%d] %q: want an origin, scheme://host[:port] (or \"*\")", i, o)
		}
	}
	return nil
}

// WebConfig is the web page's: served at GET / and /ui/ unless Disabled.
type WebConfig struct {
	// Disabled turns the page off (GET / then answers 404); the A2A and
	// event routes it uses are unchanged.
	Disabled bool `json:"disabled,omitempty"`
}

// ThoughtsConfig says how much of the agent's thinking is recorded and
// shown. Levels are brief, normal, detailed (and none).
type ThoughtsConfig struct {
	// Verbosity is the level a client sees when it chooses none (the
	// ?verbosity= of /events; A2A streams carry thoughts only when their
	// message asks, see docs/EVENTS.md). Default normal.
	Verbosity string `json:"verbosity,omitempty"`
	// Record is the most detailed level the agent records in the event
	// log (default normal: detailed adds two thoughts per model call and
	// costs a durable host about a third of its tasks/s, docs/PERFORMANCE.md;
	// none records no thoughts). No client sees
	// more than this.
	Record string `json:"record,omitempty"`
	// Debug records internal:thought-process events (the loop's state at
	// each decision point), which only the admin API serves
	// (GET /admin/events/{contextId}). Default off.
	Debug bool `json:"debug,omitempty"`
}

func (c ThoughtsConfig) validate() error {
	if _, err := loop.ParseVerbosity(c.Verbosity); err != nil {
		return fmt.Errorf("config: thoughts.verbosity: %w", err)
	}
	if _, err := loop.ParseVerbosity(c.Record); err != nil {
		return fmt.Errorf("config: thoughts.record: %w", err)
	}
	return nil
}

// AdminConfig guards the /admin API. With no token the admin API is off.
type AdminConfig struct {
	// Token is the admin bearer token, or "env:NAME".
	Token string `json:"token,omitempty"`
}

// LimitsConfig bounds what a client can make the host do.
type LimitsConfig struct {
	// MaxBodyBytes bounds a request body (default 1 MiB).
	MaxBodyBytes int `json:"maxBodyBytes,omitempty"`
	// MaxHistoryLength bounds historyLength in GetTask/ListTasks (default 1000).
	MaxHistoryLength int `json:"maxHistoryLength,omitempty"`
	// MaxAnswerBytes bounds the encoded size of an answer that carries
	// stored tasks (default 4 MiB): a ListTasks page ends when it reaches
	// it, with a nextPageToken; a task that alone passes it is answered
	// (SendMessage, GetTask, CancelTask, ListTasks) with the oldest messages
	// of its history left out, counted in its metadata's historyTrimmed.
	MaxAnswerBytes int `json:"maxAnswerBytes,omitempty"`
	// TurnTimeout bounds one turn (default 10m).
	TurnTimeout Duration `json:"turnTimeout,omitempty"`
	// ShutdownGrace is how long running turns may go on after a shutdown
	// begins (default 10s); those still running then are handed on as a
	// crash leaves them: working, for the next start or another host.
	ShutdownGrace Duration `json:"shutdownGrace,omitempty"`
	// Heartbeat is the interval of SSE comments on idle streams (default
	// 15s). At each, an idle task stream also checks that the store still
	// holds its task, and ends with a task-not-found error when it does not.
	Heartbeat Duration `json:"heartbeat,omitempty"`
	// TaskTTL: finished tasks and their event logs expire after this
	// (default 7 days).
	TaskTTL Duration `json:"taskTTL,omitempty"`
	// ConversationTTL: a conversation idle (no new turn) for longer, with
	// no unfinished task (working, input-required, auth-required), is
	// deleted with its history and agent record (default 30 days, and
	// never less than TaskTTL; "never" keeps conversations for ever).
	ConversationTTL Retention `json:"conversationTTL,omitempty"`
	// MaxPageSize bounds ListTasks pages (default 100).
	MaxPageSize int `json:"maxPageSize,omitempty"`
	// MaxAgents bounds the conversations kept in memory (default 10000);
	// the others are started again from the store when a message comes.
	MaxAgents int `json:"maxAgents,omitempty"`
	// MaxAgentBytes bounds the history all conversations kept in memory
	// hold together (default 256 MiB; -1: no bound): past it the least
	// needed ones are dropped from memory (their history is in the store).
	MaxAgentBytes int64 `json:"maxAgentBytes,omitempty"`
	// StreamQueueBytes bounds, per event stream, the bytes of events
	// waiting to be written to the event log (default 16 MiB), as 4,096
	// events bound their count: a turn emitting large events faster than
	// the log takes them waits there. One event is always taken.
	StreamQueueBytes int64 `json:"streamQueueBytes,omitempty"`
	// StreamTailBytes bounds, per event stream with live readers, the
	// bytes of its recent events kept in memory (default 4 MiB), as 256
	// events bound their count; older events are read back from the log,
	// a client loses none.
	StreamTailBytes int64 `json:"streamTailBytes,omitempty"`
	// MaxConnections bounds the HTTP connections open at once (default 0:
	// three eighths of the process's open-file limit, which is also the
	// most it may be), so that a client opening connections cannot take
	// the descriptors the store and the plugins need. At the cap a new
	// connection takes the place of the oldest idle one (no request in a
	// handler, no response going); it is closed at once only when every
	// connection has a request in flight or an event stream.
	MaxConnections int `json:"maxConnections,omitempty"`
	// HeaderTimeout bounds how long a connection may take to send a
	// request's line and headers, counted from its first byte, or from its
	// connection when it is new (default 10s; at most the 30 s the body
	// then has): a client that connects and sends nothing, or trickles its
	// headers, is closed then. A kept-alive connection may wait 2 minutes
	// for its next request's first byte; event streams are not bounded.
	HeaderTimeout Duration `json:"headerTimeout,omitempty"`
	// ResumeConcurrency bounds how many tasks left working by a crash are
	// resumed at once when the host starts (default 64).
	ResumeConcurrency int `json:"resumeConcurrency,omitempty"`
	// MaxRemoteWatches bounds how many remote tasks are read at once to
	// see whether they moved on without the answer a paused task of this
	// host waits for (remoteAgents[].watchEvery; default 16). More such
	// tasks are read in turn, round robin: each is read again after its
	// agent's watchEvery or after all the others waiting, whichever is
	// later.
	MaxRemoteWatches int `json:"maxRemoteWatches,omitempty"`
	// MaxRunning bounds the turns the host runs at once, all principals
	// together (default: derived from the memory the process may use,
	// DefaultMaxRunning; -1: no bound). Past it a new turn is refused with
	// a clear error (HTTP 429, Retry-After) before anything of it is
	// stored; tasks resumed after a restart are never refused.
	MaxRunning int `json:"maxRunning,omitempty"`
	// MaxRunningPerPrincipal bounds the turns one principal runs at once
	// (default with auth on: a quarter of MaxRunning, at least 1; with auth
	// off, when every client is one principal, MaxRunning; -1: no bound); past
	// it a new turn is refused with a clear error, so that one principal's
	// turns cannot take every turn of the host.
	MaxRunningPerPrincipal int `json:"maxRunningPerPrincipal,omitempty"`
	// MaxStreams bounds the live event streams (/events, A2A
	// SendStreamingMessage and SubscribeToTask, 1.0 and 0.3) open at once
	// on the host, all principals together, with auth on or off (default:
	// half the connection cap, limits.maxConnections or the share of the
	// process's open-file limit it takes, so that streams never hold every
	// connection; -1: no bound). Past it a new stream is refused with a
	// clear error (HTTP 429, or the stream's error frame
	// TOO_MANY_STREAMS for A2A); a stream's place is given back however
	// it ends (its end, the client gone, the host's stop).
	MaxStreams int `json:"maxStreams,omitempty"`
	// MaxStreamsPerPrincipal bounds the live event streams (/events,
	// A2A SendStreamingMessage and SubscribeToTask, 1.0 and 0.3) one
	// principal has open at once (default with auth on: 256; with auth off,
	// when every client is one principal, no bound; -1: no bound). Past it
	// a new stream is refused with a clear error (HTTP 429, or the
	// stream's error frame for A2A).
	MaxStreamsPerPrincipal int `json:"maxStreamsPerPrincipal,omitempty"`
	// MaxStreamsPerStream bounds the live streams of one event stream (a
	// conversation's /events, a task's A2A stream) open at once, all
	// principals together (default 32; -1: no bound), refused as above.
	MaxStreamsPerStream int `json:"maxStreamsPerStream,omitempty"`
	// HostID names this host in the leases of the tasks it runs. Hosts
	// sharing stores must have different ids; a host restarted with its
	// id takes its own tasks back at once. Default: derived from the
	// machine's host name and the data directory.
	HostID string `json:"hostId,omitempty"`
	// LeaseTTL is how long a running task's lease lasts without renewal:
	// how soon another host may take over the tasks of one that died
	// (default 30s).
	LeaseTTL Duration `json:"leaseTTL,omitempty"`
}

// Duration is the one duration format of the config and of plugin
// manifests: a string like "30s" or "1m30s" (see pdk.Duration). A bare
// number is refused with an error that says so.
type Duration = pdk.Duration

// DefaultConversationTTL is limits.conversationTTL's default.
const DefaultConversationTTL = 30 * 24 * time.Hour

// Retention is a duration written as a string with a unit ("720h"), or
// "never" (kept for ever, stored as -1).
type Retention time.Duration

// UnmarshalJSON reads "never" or a duration like "720h".
func (r *Retention) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil && s == "never" {
		*r = -1
		return nil
	}
	var d Duration
	if err := d.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("%w (or \"never\")", err)
	}
	*r = Retention(d)
	return nil
}

// MarshalJSON writes "never" or the duration.
func (r Retention) MarshalJSON() ([]byte, error) {
	if r < 0 {
		return json.Marshal("never")
	}
	return json.Marshal(time.Duration(r).String())
}

// Never reports whether r keeps for ever.
func (r Retention) Never() bool { return r < 0 }

// Budget is a duration written as a string with a unit ("30s"), or "off"
// (also "0" or any zero duration: none at all, stored as -1). Absent, it
// is its setting's default.
type Budget time.Duration

// UnmarshalJSON reads "off", "0" or a duration like "30s".
func (b *Budget) UnmarshalJSON(raw []byte) error {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && s == "off" {
		*b = -1
		return nil
	}
	var d Duration
	if err := d.UnmarshalJSON(raw); err != nil {
		return fmt.Errorf("%w (or \"off\")", err)
	}
	*b = Budget(d)
	if d == 0 {
		*b = -1
	}
	return nil
}

// MarshalJSON writes "off" or the duration.
func (b Budget) MarshalJSON() ([]byte, error) {
	if b < 0 {
		return json.Marshal("off")
	}
	return json.Marshal(time.Duration(b).String())
}

// Off reports whether b is turned off.
func (b Budget) Off() bool { return b < 0 }

// Default values.
const (
	DefaultAddr          = "127.0.0.1:8080"
	DefaultDataDir       = "./data"
	DefaultPluginDir     = "examples/plugins"
	DefaultModelPlugin   = "scripted-model"
	DefaultMaxBodyBytes  = 1 << 20
	DefaultPrincipal     = "local"
	defaultHistoryLength = 1000
	// DefaultMaxAnswerBytes is limits.maxAnswerBytes's default.
	DefaultMaxAnswerBytes = 4 << 20
)

// LoadConfig reads a JSON config file strictly: an unknown field is an error.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := ParseConfig(b)
	var ce *ConfigError
	switch {
	case errors.As(err, &ce):
		ce.File = path
		return Config{}, ce
	case err != nil:
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes a JSON config strictly and validates it.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, locateConfigError(b, err)
	}
	if dec.More() {
		ce := &ConfigError{Err: errors.New("trailing data after the JSON object")}
		ce.Line, ce.Column = lineCol(b, skipSpace(b, dec.InputOffset()))
		return Config{}, ce
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	if err := validateRemoteAgents(c.RemoteAgents); err != nil {
		return err
	}
	if c.Auth.Enabled && len(c.Auth.Keys) == 0 {
		return errors.New("config: auth.enabled needs at least one key in auth.keys")
	}
	if t := c.Model.Temperature; t != nil && (*t < 0 || *t > 2) {
		return fmt.Errorf("config: model.temperature %v: want 0 to 2", *t)
	}
	if c.Model.MaxTokens < 0 {
		return fmt.Errorf("config: model.maxTokens %d: want 0 (the default) or more", c.Model.MaxTokens)
	}
	seen := map[string]bool{}
	for i, k := range c.Auth.Keys {
		if k.Key == "" {
			return fmt.Errorf("config: auth.keys[%d]: empty key", i)
		}
		if k.Principal == "" {
			return fmt.Errorf("config: auth.keys[%d]: empty principal", i)
		}
		if seen[k.Key] {
			return fmt.Errorf("config: auth.keys[%d]: key given twice", i)
		}
		seen[k.Key] = true
	}
	if c.Limits.MaxBodyBytes < 0 || c.Limits.MaxHistoryLength < 0 || c.Limits.MaxAnswerBytes < 0 || c.Limits.MaxPageSize < 0 || c.Limits.MaxAgents < 0 ||
		c.Limits.LeaseTTL < 0 || c.Limits.StreamQueueBytes < 0 || c.Limits.StreamTailBytes < 0 {
		return errors.New("config: limits must not be negative")
	}
	if c.Store.MemoryBytes < 0 || c.Store.MaxBytes < 0 || c.Store.MinFreeBytes < -1 {
		return errors.New("config: store.memoryBytes and store.maxBytes must not be negative (0 is the default), store.minFreeBytes neither (-1 is no check)")
	}
	if c.Limits.MaxRunning < -1 || c.Limits.MaxRunningPerPrincipal < -1 {
		return errors.New("config: limits.maxRunning and limits.maxRunningPerPrincipal must not be negative (-1 is no bound)")
	}
	if c.Limits.MaxStreams < -1 || c.Limits.MaxStreamsPerPrincipal < -1 || c.Limits.MaxStreamsPerStream < -1 {
		return errors.New("config: limits.maxStreams, limits.maxStreamsPerPrincipal and limits.maxStreamsPerStream must not be negative (-1 is no bound)")
	}
	if c.Limits.MaxAgentBytes < -1 || c.Agent.HistoryBytes < -1 || c.Agent.HistoryLimit < 0 {
		return errors.New("config: agent.historyLimit, agent.historyBytes and limits.maxAgentBytes must not be negative (-1 is no bound for the bytes)")
	}
	if ttl := c.Limits.ConversationTTL; ttl > 0 && c.Limits.TaskTTL > 0 && time.Duration(ttl) < time.Duration(c.Limits.TaskTTL) {
		return fmt.Errorf("config: limits.conversationTTL %s is shorter than limits.taskTTL %s: a conversation must outlive its tasks", time.Duration(ttl), time.Duration(c.Limits.TaskTTL))
	}
	if err := c.Observability.validate(); err != nil {
		return err
	}
	if err := c.Server.validate(); err != nil {
		return err
	}
	if err := c.Store.validate(); err != nil {
		return err
	}
	if err := c.MCP.validate(); err != nil {
		return err
	}
	if err := c.Interaction.validate(); err != nil {
		return err
	}
	if err := c.Thoughts.validate(); err != nil {
		return err
	}
	switch c.LogFormat {
	case "", "json", "text":
	default:
		return fmt.Errorf("config: logFormat %q: want json or text", c.LogFormat)
	}
	return nil
}

// withDefaults returns a copy of c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Addr
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.Agent.Name == "" {
		c.Agent.Name = "Looopy"
	}
	if c.Agent.Description == "" {
		c.Agent.Description = "A Looopy agent: a model, tools and sub-agents as WebAssembly plugins."
	}
	if c.Model.Plugin == "" {
		c.Model.Plugin = DefaultModelPlugin
	}
	if c.Agent.HistoryBytes == 0 {
		c.Agent.HistoryBytes = DefaultHistoryBytes
	}
	c.Thoughts.Verbosity, _ = loop.ParseVerbosity(c.Thoughts.Verbosity)
	if c.Thoughts.Verbosity == "" {
		c.Thoughts.Verbosity = loop.VerbosityNormal
	}
	c.Thoughts.Record, _ = loop.ParseVerbosity(c.Thoughts.Record)
	if c.Thoughts.Record == "" {
		c.Thoughts.Record = loop.VerbosityNormal
	}
	l := &c.Limits
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxHistoryLength == 0 {
		l.MaxHistoryLength = defaultHistoryLength
	}
	if l.MaxAnswerBytes == 0 {
		l.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if l.TurnTimeout == 0 {
		l.TurnTimeout = Duration(10 * time.Minute)
	}
	if l.ShutdownGrace == 0 {
		l.ShutdownGrace = Duration(10 * time.Second)
	}
	if l.Heartbeat == 0 {
		l.Heartbeat = Duration(15 * time.Second)
	}
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = Duration(DefaultHeaderTimeout)
	}
	l.HeaderTimeout = min(l.HeaderTimeout, Duration(bodyReadTimeout))
	if l.ResumeConcurrency <= 0 {
		l.ResumeConcurrency = 64
	}
	if l.MaxRemoteWatches <= 0 {
		l.MaxRemoteWatches = taskrt.DefaultMaxRemoteWatches
	}
	if l.TaskTTL == 0 {
		l.TaskTTL = Duration(7 * 24 * time.Hour)
	}
	if l.ConversationTTL == 0 {
		l.ConversationTTL = Retention(max(DefaultConversationTTL, time.Duration(l.TaskTTL)))
	}
	if l.ConversationTTL > 0 && time.Duration(l.ConversationTTL) < time.Duration(l.TaskTTL) {
		l.ConversationTTL = Retention(l.TaskTTL) // a conversation outlives its tasks
	}
	if l.MaxPageSize == 0 {
		l.MaxPageSize = 100
	}
	if l.MaxAgents == 0 {
		l.MaxAgents = 10000
	}
	if l.MaxAgentBytes == 0 {
		l.MaxAgentBytes = DefaultMaxAgentBytes
	}
	if l.StreamQueueBytes == 0 {
		l.StreamQueueBytes = sse.DefaultMaxPendingBytes
	}
	if l.StreamTailBytes == 0 {
		l.StreamTailBytes = sse.DefaultTailBytes
	}
	if l.MaxRunning == 0 {
		l.MaxRunning = DefaultMaxRunning(MemoryLimit(), runtime.GOMAXPROCS(0))
	}
	if l.MaxRunningPerPrincipal == 0 {
		l.MaxRunningPerPrincipal = l.MaxRunning
		if c.Auth.Enabled {
			// With auth off every client is the one principal: the host's
			// bound is all there is to share.
			l.MaxRunningPerPrincipal = DefaultMaxRunningPerPrincipal(l.MaxRunning)
		}
	}
	if l.MaxStreamsPerPrincipal == 0 {
		l.MaxStreamsPerPrincipal = -1
		if c.Auth.Enabled {
			l.MaxStreamsPerPrincipal = DefaultMaxStreamsPerPrincipal
		}
	}
	if l.MaxStreamsPerStream == 0 {
		l.MaxStreamsPerStream = DefaultMaxStreamsPerStream
	}
	if l.MaxStreams == 0 {
		l.MaxStreams = DefaultMaxStreams(l.MaxConnections)
	}
	return c
}

// The defaults of the bounds on live event streams (LimitsConfig).
const (
	DefaultMaxStreamsPerPrincipal = 256
	DefaultMaxStreamsPerStream    = 32
)

// DefaultMaxStreams is the default of limits.maxStreams: half the
// connections the host keeps open (maxConnections as configured, or three
// eighths of the process's open-file limit), at least 8. A live stream
// holds a connection for as long as it runs; the other half stays for the
// requests that are not streams.
func DefaultMaxStreams(maxConnections int) int {
	limit, _ := connectionCap(maxConnections)
	if n := limit / 2; n > 8 {
		return n
	}
	return 8
}

// resolveSecret reads "env:NAME" from the environment; anything else is the
// value itself.
func resolveSecret(v string) (string, error) {
	name, ok := strings.CutPrefix(v, "env:")
	if !ok {
		return v, nil
	}
	s := os.Getenv(name)
	if s == "" {
		return "", fmt.Errorf("secret from environment variable %s: not set", name)
	}
	return s, nil
}
