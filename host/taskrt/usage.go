package taskrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/looopy-go/looopy/loop"
)

// UsageLimit bounds a principal's usage; zero fields are unbounded.
type UsageLimit struct {
	Tokens    int64 `json:"tokens,omitempty"`
	ToolCalls int64 `json:"toolCalls,omitempty"`
}

// PrincipalUsage is what a principal has used.
type PrincipalUsage struct {
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	TotalTokens      int64 `json:"totalTokens"`
	ToolCalls        int64 `json:"toolCalls"`
	Turns            int64 `json:"turns"`
}

// UsageKV is the part of the store the usage counters persist in.
type UsageKV interface {
	KVGet(ctx context.Context, namespace, key string) ([]byte, error)
	KVSet(ctx context.Context, namespace, key string, value []byte) error
}

// usageNamespace is the KV namespace of the per-principal counters.
const usageNamespace = "host/usage"

// Usage counts tokens and tool calls per principal, checks the
// limits (it is the loop's Budget), and saves each principal's totals at
// the end of every turn.
type Usage struct {
	kv     UsageKV // nil: counters live as long as the process
	limits map[string]UsageLimit
	log    *slog.Logger

	tokens    metric.Int64Counter
	toolCalls metric.Int64Counter

	mu   sync.Mutex
	by   map[string]*PrincipalUsage
	last map[string]loop.TurnUsage // by task id: what the turn reported last
}

// NewUsage returns the usage counters of every principal, kept in kv
// (nil: in memory) and bounded by limits (the key "*" applies to every
// principal without its own entry). A nil meter records no metrics.
func NewUsage(kv UsageKV, limits map[string]UsageLimit, meter metric.Meter, log *slog.Logger) (*Usage, error) {
	if meter == nil {
		meter = noop.NewMeterProvider().Meter("looopy")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u := &Usage{kv: kv, limits: limits, log: log, by: map[string]*PrincipalUsage{}, last: map[string]loop.TurnUsage{}}
	var err1, err2 error
	u.tokens, err1 = meter.Int64Counter("looopy.principal.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used by each principal's turns."))
	u.toolCalls, err2 = meter.Int64Counter("looopy.principal.tool_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Tool calls run by each principal's turns."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("usage metrics: %w", err)
	}
	return u, nil
}

func principalOf(t *loop.Turn) string {
	if t.Auth != nil && t.Auth.Principal != "" {
		return t.Auth.Principal
	}
	return defaultPrincipal
}

// defaultPrincipal is the principal of a turn without one: the host's
// principal when auth is off.
const defaultPrincipal = "local"

// get returns the counters of p, loaded from the store on first use.
// u.mu is held.
func (u *Usage) get(ctx context.Context, p string) *PrincipalUsage {
	if pu, ok := u.by[p]; ok {
		return pu
	}
	pu := &PrincipalUsage{}
	if u.kv != nil {
		b, err := u.kv.KVGet(ctx, usageNamespace, p)
		switch {
		case err == nil:
			if err := json.Unmarshal(b, pu); err != nil {
				u.log.LogAttrs(ctx, slog.LevelWarn, "usage record unreadable; counting from zero",
					slog.String("principal", p), slog.String("error", err.Error()))
				*pu = PrincipalUsage{}
			}
		case !errors.Is(err, loop.ErrNotFound):
			u.log.LogAttrs(ctx, slog.LevelWarn, "usage record not loaded", slog.String("principal", p),
				slog.String("error", err.Error()))
		}
	}
	u.by[p] = pu
	return pu
}

// Usage returns what principal p has used.
func (u *Usage) Usage(ctx context.Context, p string) PrincipalUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return *u.get(ctx, p)
}

// Budget is loop.Config.Budget: it accounts what the turn used since its
// last report and refuses to go on once the principal reached a limit.
func (u *Usage) Budget(ctx context.Context, t *loop.Turn, used loop.TurnUsage) error {
	p := principalOf(t)
	u.mu.Lock()
	pu := u.get(ctx, p)
	prev := u.last[t.TaskID]
	dTok := int64(used.TotalTokens - prev.TotalTokens)
	dTools := int64(used.ToolCalls - prev.ToolCalls)
	pu.PromptTokens += int64(used.PromptTokens - prev.PromptTokens)
	pu.CompletionTokens += int64(used.CompletionTokens - prev.CompletionTokens)
	pu.TotalTokens += dTok
	pu.ToolCalls += dTools
	var snapshot PrincipalUsage
	if used.Final {
		delete(u.last, t.TaskID)
		pu.Turns++
		snapshot = *pu
	} else {
		u.last[t.TaskID] = used
	}
	lim, limited := u.limits[p]
	if !limited {
		lim, limited = u.limits["*"]
	}
	cur := *pu
	u.mu.Unlock()

	if dTok != 0 || dTools != 0 {
		attrs := metric.WithAttributes(attribute.String("principal", p))
		u.tokens.Add(ctx, dTok, attrs)
		u.toolCalls.Add(ctx, dTools, attrs)
	}
	if used.Final {
		if u.kv != nil {
			b, _ := json.Marshal(snapshot)
			if err := u.kv.KVSet(context.WithoutCancel(ctx), usageNamespace, p, b); err != nil {
				u.log.LogAttrs(ctx, slog.LevelWarn, "usage record not saved", slog.String("principal", p),
					slog.String("error", err.Error()))
			}
		}
		return nil
	}
	if !limited {
		return nil
	}
	if lim.Tokens > 0 && cur.TotalTokens >= lim.Tokens {
		return fmt.Errorf("principal %q has used %d tokens, its limit is %d", p, cur.TotalTokens, lim.Tokens)
	}
	if lim.ToolCalls > 0 && cur.ToolCalls >= lim.ToolCalls {
		return fmt.Errorf("principal %q has made %d tool calls, its limit is %d", p, cur.ToolCalls, lim.ToolCalls)
	}
	return nil
}
