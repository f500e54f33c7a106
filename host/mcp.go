package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	"github.com/looopy-go/looopy/host/mcp"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// MCPConfig is the Model Context Protocol, both ways: the host's sandboxed
// tools served to MCP clients at /mcp (and by `looopy mcp` over stdio), and
// outside MCP servers whose tools the agent may use.
type MCPConfig struct {
	// Disabled turns /mcp off.
	Disabled bool `json:"disabled,omitempty"`
	// ExposeAgent offers the agent itself to MCP clients as one more tool
	// (AgentTool): a turn with its model, tools and sub-agents.
	ExposeAgent bool `json:"exposeAgent,omitempty"`
	// AgentTool names that tool (default "ask_agent").
	AgentTool string `json:"agentTool,omitempty"`
	// SessionTimeout ends MCP sessions idle for that long (default 30m).
	SessionTimeout Duration `json:"sessionTimeout,omitempty"`
	// MaxSessions bounds the /mcp sessions open at once (default 1024);
	// past it a new one is refused (503, Retry-After).
	MaxSessions int `json:"maxSessions,omitempty"`
	// MaxSessionsPerPrincipal bounds one principal's (default 64); a new
	// session past it ends that principal's oldest.
	MaxSessionsPerPrincipal int `json:"maxSessionsPerPrincipal,omitempty"`
	// MaxMessageBytes bounds one message an MCP client sends to the host's
	// MCP server over stdio (`looopy mcp`; default 8 MiB): a longer line
	// ends the session. Over HTTP a request is bounded by
	// limits.maxBodyBytes, as every request.
	MaxMessageBytes int `json:"maxMessageBytes,omitempty"`
	// Servers are outside MCP servers whose tools the agent may use. They
	// are NOT sandboxed: a command runs as a child process of the host with
	// the host's rights, a URL is whatever service answers there.
	Servers []MCPServerConfig `json:"servers,omitempty"`
}

// MCPServerConfig is one outside MCP server: a command run over stdio, or
// a URL (streamable HTTP).
type MCPServerConfig struct {
	// Name prefixes its tools (name_tool) and names it in logs and
	// /admin/plugins.
	Name string `json:"name"`
	// Command and its arguments, run as a child process (stdio).
	Command []string `json:"command,omitempty"`
	// Env is the child's environment besides PATH, HOME, LANG and TMPDIR
	// (the host's own environment is not passed on). A value may be
	// "env:NAME" to take it from the host's environment.
	Env map[string]string `json:"env,omitempty"`
	// Dir is the child's working folder.
	Dir string `json:"dir,omitempty"`
	// URL of a streamable-HTTP MCP server.
	URL string `json:"url,omitempty"`
	// Headers sent to a URL server; values may be "env:NAME".
	Headers map[string]string `json:"headers,omitempty"`
	// Allow lists the tools the agent may use (glob patterns of the
	// server's tool names; empty: all). Deny removes tools and wins.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Prefix before each tool's name (default name + "_").
	Prefix string `json:"prefix,omitempty"`
	// CallTimeout bounds one call (default 60s); two timeouts in a row
	// restart the server.
	CallTimeout Duration `json:"callTimeout,omitempty"`
	// StartTimeout bounds start, initialize and listing (default 30s).
	StartTimeout Duration `json:"startTimeout,omitempty"`
	// Restart: "on-failure" (default: a server that exits or hangs is
	// started again, with backoff from 1s to 1m) or "never".
	Restart string `json:"restart,omitempty"`
	// MaxRestarts in a row that do not come up before giving up (0: no
	// bound).
	MaxRestarts int `json:"maxRestarts,omitempty"`
	// MaxMessageBytes bounds one message the server sends (default 8 MiB,
	// mcp.DefaultMaxMessageBytes), counted as it is read, before it is
	// decoded: past it the call fails saying so and the server is
	// restarted.
	MaxMessageBytes int `json:"maxMessageBytes,omitempty"`
}

// clientConfig resolves secrets and converts to the mcp package's form.
func (c MCPServerConfig) clientConfig() (mcp.ClientConfig, error) {
	out := mcp.ClientConfig{Name: c.Name, Command: c.Command, Dir: c.Dir, URL: c.URL,
		Allow: c.Allow, Deny: c.Deny, Prefix: c.Prefix, CallTimeout: time.Duration(c.CallTimeout),
		StartTimeout: time.Duration(c.StartTimeout), Restart: c.Restart, MaxRestarts: c.MaxRestarts,
		MaxMessageBytes: c.MaxMessageBytes}
	resolve := func(what string, in map[string]string) (map[string]string, error) {
		if len(in) == 0 {
			return nil, nil
		}
		m := make(map[string]string, len(in))
		for k, v := range in {
			r, err := resolveSecret(v)
			if err != nil {
				return nil, fmt.Errorf("mcp.servers %q: %s %s: %w", c.Name, what, k, err)
			}
			m[k] = r
		}
		return m, nil
	}
	var err error
	if out.Env, err = resolve("env", c.Env); err != nil {
		return out, err
	}
	if out.Headers, err = resolve("header", c.Headers); err != nil {
		return out, err
	}
	return out, nil
}

func (c MCPConfig) validate() error {
	seen := map[string]bool{}
	for _, s := range c.Servers {
		if err := (mcp.ClientConfig{Name: s.Name, Command: s.Command, URL: s.URL, Allow: s.Allow, Deny: s.Deny,
			Restart: s.Restart, CallTimeout: time.Duration(s.CallTimeout), StartTimeout: time.Duration(s.StartTimeout),
			MaxRestarts: s.MaxRestarts, MaxMessageBytes: s.MaxMessageBytes}).Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if seen[s.Name] {
			return fmt.Errorf("config: mcp.servers: %q given twice", s.Name)
		}
		seen[s.Name] = true
	}
	if c.SessionTimeout < 0 {
		return errors.New("config: mcp.sessionTimeout must not be negative")
	}
	if c.MaxSessions < 0 || c.MaxSessionsPerPrincipal < 0 {
		return errors.New("config: mcp.maxSessions and mcp.maxSessionsPerPrincipal must not be negative")
	}
	if c.MaxMessageBytes < 0 {
		return errors.New("config: mcp.maxMessageBytes must not be negative (0: the default, 8 MiB)")
	}
	return nil
}

// startMCPClients starts the configured outside MCP servers. A server that
// does not come up is logged and retried in the background: the host
// serves without its tools meanwhile.
func (m *Main) startMCPClients(ctx context.Context, cfg Config) ([]*mcp.Toolset, error) {
	var out []*mcp.Toolset
	for _, sc := range cfg.MCP.Servers {
		cc, err := sc.clientConfig()
		if err != nil {
			return nil, err
		}
		cc.Logger = m.log.With("component", "mcp-client")
		ts, err := mcp.NewToolset(cc)
		if err != nil {
			return nil, err
		}
		m.closers = append(m.closers, ts.Close)
		if err := ts.Start(ctx); err != nil {
			m.log.Error("MCP server did not start; the host serves without its tools until it does",
				"mcp_server", sc.Name, "error", err.Error())
		}
		out = append(out, ts)
	}
	return out, nil
}

// newMCPServer builds the MCP server of the host's sandboxed tools (nil
// when there are none or /mcp is off).
func (s *Server) newMCPServer(tools loop.Toolset, model loop.Model) (*mcp.Server, error) {
	if tools == nil {
		return nil, nil
	}
	// Usage limits and artifact expiry, as for a turn (mcpusage.go).
	tools = mcpMetered{s: s, inner: tools}
	if s.cfg.Interaction.Approval.active() {
		// Served tools, and the tools lent to the agent plugins called
		// over MCP (their sub-agents' calls), pass the approval rules
		// first: a refused call is not metered.
		tools = approvalGuard{s: s, inner: tools}
	}
	cfg := mcp.ServerConfig{Name: s.cfg.Agent.Name, Version: "0.1.0", Tools: tools, Model: model,
		Instructions: s.cfg.Agent.Description + " Its tools run in a WebAssembly sandbox with deny-by-default grants.",
		Principal:    DefaultPrincipal, Logger: s.log.With("component", "mcp"), MaxMessageBytes: s.cfg.MCP.MaxMessageBytes}
	if s.cfg.MCP.ExposeAgent {
		cfg.Agent, cfg.AgentTool = mcpAgent{s}, s.cfg.MCP.AgentTool
	}
	return mcp.NewServer(cfg)
}

// approvalGuard is the toolset MCP clients get: a call the operator's
// approval rules mark (interaction.approval) is refused, unless its
// principal is exempt. MCP has no durable pause a person answers later
// (RATIONALE.md): such a call is made over A2A, where it waits for one.
// The refusal is a tool error the client (or a sub-agent's model) reads,
// and a warning in the log.
type approvalGuard struct {
	s     *Server
	inner loop.Toolset
}

func (g approvalGuard) Tools(ctx context.Context) ([]loop.ToolDefinition, error) {
	return g.inner.Tools(ctx)
}

func (g approvalGuard) Call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	var who *loop.AuthContext
	if env != nil {
		who = env.Auth
	}
	if _, marked := g.s.needsApproval(ctx, who, call.Name); marked {
		principal := ""
		if who != nil {
			principal = who.Principal
		}
		g.s.log.WarnContext(ctx, "mcp: a call that needs an approval was refused", "tool", call.Name,
			"principal", principal, "depth", envDepth(env))
		return loop.ToolResult{ToolCallID: call.ID, IsError: true, Content: fmt.Sprintf(
			"tool %q needs a person's approval (interaction.approval) and is not run over MCP, which cannot wait for one: "+
				"send the request over A2A, where the call waits for an approval, or have the operator exempt your principal "+
				"(interaction.approval.exemptPrincipals)", call.Name)}, nil
	}
	return g.inner.Call(ctx, call, env)
}

func envDepth(env *loop.ToolEnv) int {
	if env == nil {
		return 0
	}
	return env.Depth
}

// MCP returns the server of the host's sandboxed tools over MCP (nil when
// the host has none). `looopy mcp` serves it over stdio.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// mcpHandler serves /mcp: the SDK's streamable HTTP handler behind the
// host's API keys, through Fiber's net/http adaptor (which streams: a
// response the handler flushes goes out as it is written).
func (s *Server) mcpHandler() fiber.Handler {
	opts := mcp.HTTPOptions{SessionTimeout: time.Duration(s.cfg.MCP.SessionTimeout), MaxBodyBytes: int64(s.cfg.Limits.MaxBodyBytes),
		MaxSessions: s.cfg.MCP.MaxSessions, MaxSessionsPerPrincipal: s.cfg.MCP.MaxSessionsPerPrincipal}
	if s.cfg.Auth.Enabled {
		opts.Authenticate = s.auth.principal
	}
	return adaptor.HTTPHandler(detachContext(s.requestsCtx, s.mcp.Handler(opts)))
}

// detachContext gives the handler a request context of its own, derived
// from base (the server's, ended when it shuts down), never from the
// request's. The adaptor's request context is the fasthttp RequestCtx
// itself: fasthttp reuses it once the handler returns, and its Done reads
// the server's state that the server's shutdown rewrites. The SDK keeps the
// context of a session's first request (for its values) for the session's
// whole life, and a context derived from the RequestCtx (context.AfterFunc,
// WithCancel) watches it from a goroutine of its own, which may run after
// the handler returned: both touched the RequestCtx after its request (a
// data race with the next request on it, or with the shutdown). The new
// context ends when the handler returns or base ends.
func detachContext(base context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(base)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// mcpAgent runs a turn of the host's agent for an MCP client.
type mcpAgent struct{ s *Server }

func (a mcpAgent) Ask(ctx context.Context, auth *loop.AuthContext, contextID, prompt string, progress func(string)) (mcp.AgentAnswer, error) {
	s := a.s
	req := &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(prompt))}
	req.Message.ContextID = contextID
	st, err := s.start(ctx, auth, req, false)
	if err != nil {
		return mcp.AgentAnswer{}, err
	}
	taskID := st.Run.TaskID
	// Tool activity of the turn becomes progress.
	sub, err := s.hub.Subscribe(ctx, sse.TaskStream(taskID), st.Run.After,
		sse.Filter{Kinds: []loop.EventKind{loop.KindToolStart, loop.KindToolProgress}})
	if err == nil {
		defer sub.Close()
		go func() {
			for {
				it, err := sub.Next(ctx)
				if err != nil {
					return
				}
				var e struct {
					ToolName string `json:"toolName"`
					Message  string `json:"message"`
				}
				if json.Unmarshal(it.Data, &e) == nil {
					switch {
					case e.ToolName != "":
						progress("calling tool " + e.ToolName)
					case e.Message != "":
						progress(e.Message)
					}
				}
			}
		}()
	}
	if err := s.tasks.Wait(ctx, st.Run); err != nil {
		// The client gave up: the turn is cancelled, not left running.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = s.tasks.Cancel(cctx, auth.Principal, taskID)
		return mcp.AgentAnswer{}, err
	}
	rec, ok := st.Run.Saved()
	if !ok {
		var err error
		if rec, err = s.tasks.Load(context.WithoutCancel(ctx), auth.Principal, taskID); err != nil {
			return mcp.AgentAnswer{}, err
		}
	}
	text := rec.Content
	if text == "" && rec.Message != "" {
		text = rec.Message
	}
	if open := rec.OpenRequests(); rec.Status.Interrupted() && len(open) > 0 {
		// Paused (an approval, a credential): MCP cannot carry the
		// answer; the task waits for it over A2A, as any paused task.
		text = fmt.Sprintf("The task %s waits for input: %s\nAnswer it over A2A (SendMessage with taskId %s, docs/A2A_EXTENSION.md); the call does not run before.",
			rec.ID, loop.RequestsPrompt(open), rec.ID)
	}
	return mcp.AgentAnswer{Text: text, ContextID: loop.ClientContextID(rec.ContextID), TaskID: rec.ID, State: string(rec.Status)}, nil
}
