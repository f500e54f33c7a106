package host

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// mcpMetered is the toolset MCP clients call (/mcp, `looopy mcp`): the
// calls run outside any turn, so what a turn's budget does is done here.
// Every call, at any depth (an agent plugin's sub-agent calls tools
// through it too), is refused once its principal reached its
// observability.usageLimits and counted otherwise; the model lent to a
// call is metered the same way (mcpModel). When a top-level call ends, the
// artifacts it wrote get the expiry of a finished task's (limits.taskTTL
// from then): a call is the task its artifacts belong to.
type mcpMetered struct {
	s     *Server
	inner loop.Toolset
}

func (m mcpMetered) Tools(ctx context.Context) ([]loop.ToolDefinition, error) {
	return m.inner.Tools(ctx)
}

func (m mcpMetered) Call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	p := envPrincipal(env)
	// Checked and counted in one step: calls made at once cannot pass
	// the limit together.
	if err := m.s.usage.Reserve(ctx, p, 1); err != nil {
		m.s.log.WarnContext(ctx, "mcp: call refused by the usage limit", "tool", call.Name, "principal", p)
		return loop.ToolResult{ToolCallID: call.ID, IsError: true, Content: "refused: " + err.Error()}, nil
	}
	top := env != nil && env.Depth == 0
	if top && env.Model != nil {
		// A sub-agent's model wraps this one: its calls are counted
		// once, here, whatever the depth.
		e := *env
		e.Model = mcpModel{s: m.s, principal: p, inner: env.Model}
		env = &e
	}
	res, err := m.inner.Call(ctx, call, env)
	if top && m.s.artifacts != nil && env.TaskID != "" {
		// The call is its artifacts' task: what it left building can
		// never be completed.
		if _, aerr := m.s.artifacts.AbandonTask(context.WithoutCancel(ctx), env.TaskID, "abandoned: the call writing it ended before it was complete"); aerr != nil {
			m.s.log.WarnContext(ctx, "mcp: artifacts left building not ended", "task_id", env.TaskID, "error", aerr.Error())
		}
	}
	if ttl := time.Duration(m.s.cfg.Limits.TaskTTL); top && ttl > 0 && m.s.artifacts != nil && env.TaskID != "" {
		if xerr := m.s.artifacts.ExpireTask(context.WithoutCancel(ctx), env.TaskID, ttl); xerr != nil {
			m.s.log.WarnContext(ctx, "mcp: artifact expiry not set", "task_id", env.TaskID, "error", xerr.Error())
		}
	}
	return res, err
}

func envPrincipal(env *loop.ToolEnv) string {
	if env != nil && env.Auth != nil && env.Auth.Principal != "" {
		return env.Auth.Principal
	}
	return DefaultPrincipal
}

// mcpModel is the host's model as a call made over MCP uses it (an agent
// plugin's sub-agent): each call reserves what it may use under the
// principal's token limit before it runs (refused once the principal's
// tokens with what its calls running now hold reached the limit), and
// its tokens replace the reservation when it ends, as a turn's model
// calls do (loop.TurnUsage.PendingTokens).
type mcpModel struct {
	s         *Server
	principal string
	inner     loop.Model
}

func (m mcpModel) Generate(ctx context.Context, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	id := "mcp " + rand.Text()
	if err := m.s.usage.Hold(ctx, m.principal, id, int64(loop.EstimateTokens(req, loop.DefaultReserveTokens))); err != nil {
		return nil, &loop.ModelError{Code: "budget", Message: err.Error(), Err: err}
	}
	var u loop.Usage
	// Settled however the call ends (a panic too): a hold is never left.
	defer func() { m.s.usage.Settle(context.WithoutCancel(ctx), m.principal, id, u) }()
	resp, err := m.inner.Generate(ctx, req, onDelta)
	if resp != nil {
		u = resp.Usage
		if u.TotalTokens == 0 {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
	}
	return resp, err
}
