package loop

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ReasonBudget ends a turn that Config.Budget refused.
const ReasonBudget = "budget"

// TurnUsage is what a turn has used so far, as Config.Budget sees it.
type TurnUsage struct {
	Usage
	ToolCalls int // tool calls run by the host (client calls not counted)
	// PendingToolCalls, on the report made before a round of tool calls
	// runs, is how many of them the host is about to run; they are counted
	// in ToolCalls already. The budget reserves them: it refuses when the
	// totals with them pass a limit (and then does not count them), so
	// that turns running at once cannot pass a tool-call limit together.
	// A later report's ToolCalls corrects for calls that did not run.
	PendingToolCalls int
	// PendingTokens, on the report made before a model call, is the most
	// the call is reckoned to use (its answer's max tokens, or
	// Config.ReserveTokens, plus its prompt's size at 4 bytes a token).
	// The budget reserves them: it refuses when the principal's tokens
	// with the reservations of its calls running now reached a limit, and
	// otherwise holds them until the turn's next report, which counts what
	// the call used instead (a failed or canceled call: nothing), so that
	// turns calling at once cannot pass a token limit together by more
	// than one call.
	PendingTokens int
	// Call names the model call whose reservation this report takes
	// (PendingTokens) or settles: "" is the turn's own model call; a
	// sub-agent's call made through the turn's model has its own name (the
	// sub-task's id and the call's number), so that sub-agents calling at
	// once each hold their own reservation and settle it alone. The
	// turn's final report settles every reservation it still holds.
	Call       string
	Iterations int
	// Final is set on the last report of a turn: its work is done, its end
	// is about to be committed (a turn handed on by a shutdown makes none);
	// an error returned then is ignored.
	Final bool
}

// loopMetrics are the instruments of a loop with a meter. A loop without
// one has none and records nothing (no allocation either).
type loopMetrics struct {
	turns        metric.Int64Counter
	iterations   metric.Int64Counter
	toolCalls    metric.Int64Counter
	toolDuration metric.Float64Histogram
	modelCalls   metric.Int64Counter
	modelLatency metric.Float64Histogram
	tokens       metric.Int64Counter
}

// Attribute sets used often, built once.
var (
	attrsInput  = metric.WithAttributeSet(attribute.NewSet(attribute.String("gen_ai.token.type", "input")))
	attrsOutput = metric.WithAttributeSet(attribute.NewSet(attribute.String("gen_ai.token.type", "output")))
)

// durationBuckets suit calls from a millisecond to several minutes.
var durationBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newLoopMetrics(m metric.Meter) (*loopMetrics, error) {
	lm := &loopMetrics{}
	var errs [7]error
	lm.turns, errs[0] = m.Int64Counter("looopy.turns", metric.WithDescription("Turns ended, by status and reason."), metric.WithUnit("{turn}"))
	lm.iterations, errs[1] = m.Int64Counter("looopy.iterations", metric.WithDescription("Loop iterations (one model call and its tools)."), metric.WithUnit("{iteration}"))
	lm.toolCalls, errs[2] = m.Int64Counter("looopy.tool.calls", metric.WithDescription("Tool calls, by tool and outcome."), metric.WithUnit("{call}"))
	lm.toolDuration, errs[3] = m.Float64Histogram("looopy.tool.duration", metric.WithDescription("Duration of tool calls, by tool and outcome."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	lm.modelCalls, errs[4] = m.Int64Counter("looopy.model.calls", metric.WithDescription("Model calls (each attempt), by outcome."), metric.WithUnit("{call}"))
	lm.modelLatency, errs[5] = m.Float64Histogram("looopy.model.duration", metric.WithDescription("Duration of model calls, by outcome."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	lm.tokens, errs[6] = m.Int64Counter("looopy.model.tokens", metric.WithDescription("Tokens used by model calls, by type (input, output)."), metric.WithUnit("{token}"))
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("loop metrics: %w", err)
		}
	}
	return lm, nil
}

func outcomeAttr(ok bool) attribute.KeyValue {
	if ok {
		return attribute.String("outcome", "ok")
	}
	return attribute.String("outcome", "error")
}

func (lm *loopMetrics) turn(ctx context.Context, out *Outcome) {
	lm.turns.Add(ctx, 1, metric.WithAttributes(attribute.String("status", string(out.Status)), attribute.String("reason", out.Reason)))
}

func (lm *loopMetrics) model(ctx context.Context, d time.Duration, resp *ModelResponse, err error) {
	o := metric.WithAttributes(outcomeAttr(err == nil))
	lm.modelCalls.Add(ctx, 1, o)
	lm.modelLatency.Record(ctx, d.Seconds(), o)
	if err == nil && resp != nil {
		lm.tokens.Add(ctx, int64(resp.Usage.PromptTokens), attrsInput)
		lm.tokens.Add(ctx, int64(resp.Usage.CompletionTokens), attrsOutput)
	}
}

func (lm *loopMetrics) tool(ctx context.Context, name string, d time.Duration, ok bool) {
	o := metric.WithAttributes(attribute.String("tool", name), outcomeAttr(ok))
	lm.toolCalls.Add(ctx, 1, o)
	lm.toolDuration.Record(ctx, d.Seconds(), o)
}

// budget asks Config.Budget whether the turn may go on.
func (tr *turn) budget(ctx context.Context, out *Outcome, final bool, pending, pendingTokens int) error {
	b := tr.l.budget
	if b == nil {
		return nil
	}
	// What sub-agents used counts too (folded into out.Usage after each
	// round of tools); their reports and this one are serialized.
	tr.subMu.Lock()
	defer tr.subMu.Unlock()
	tr.reserved = 0
	if pending > 0 {
		// Reserved until the next report before a model call: the
		// calls run meanwhile (and report sub-agents' usage).
		tr.reserved = int(tr.toolCalls.Load()) + pending
	}
	err := b(ctx, tr.t, TurnUsage{Usage: out.Usage.Add(tr.subUsage), ToolCalls: tr.reservedCallsLocked(), PendingToolCalls: pending,
		PendingTokens: pendingTokens, Iterations: out.Iterations, Final: final})
	if err != nil && pending > 0 {
		tr.reserved = 0 // refused: the budget did not count them
	}
	if err != nil && !final {
		return fmt.Errorf("turn stopped by its budget: %w", err)
	}
	return nil
}

// reservedCallsLocked is the turn's tool calls as the budget counts them:
// those run, or those reserved for the round running now. tr.subMu is
// held.
func (tr *turn) reservedCallsLocked() int {
	return max(int(tr.toolCalls.Load()), tr.reserved)
}

// hostCalls counts the calls the host runs itself (a client tool's call is
// the client's to run, and not counted).
func (tr *turn) hostCalls(calls []ToolCall) int {
	n := 0
	for _, c := range calls {
		if !tr.client[c.Name] {
			n++
		}
	}
	return n
}

// tokenEstimate is the most a model call of req is reckoned to use, for
// the budget's reservation (TurnUsage.PendingTokens); see EstimateTokens.
func (tr *turn) tokenEstimate(req *ModelRequest) int {
	return EstimateTokens(req, tr.l.reserveTokens)
}

// MaxEstimateTokens bounds EstimateTokens: a request asking for more
// (a plugin's maxTokens of 2^63-1) is reckoned at this, never at a sum
// that wraps around to a negative reservation that holds nothing.
const MaxEstimateTokens = math.MaxInt32

// EstimateTokens is the most a model call of req is reckoned to use, for a
// budget's reservation: the answer's max tokens (answer when the request
// sets none, or sets a negative number) and the prompt at 4 bytes a token,
// at least 1 and at most MaxEstimateTokens.
func EstimateTokens(req *ModelRequest, answer int) int {
	n := req.MaxTokens
	if n <= 0 {
		n = answer
	}
	n = min(max(n, 0), MaxEstimateTokens)
	size := 0
	add := func(k int) {
		// Saturating: a prompt past 8 GiB is not counted further.
		size = min(size+k, 4*MaxEstimateTokens)
	}
	for _, m := range req.Messages {
		add(len(m.Content) + len(m.Name))
		for _, c := range m.ToolCalls {
			add(len(c.Name) + len(c.Arguments))
		}
	}
	for _, d := range req.Tools {
		add(len(d.Name) + len(d.Description) + len(d.Parameters))
	}
	return min(n+size/4+1, MaxEstimateTokens)
}
