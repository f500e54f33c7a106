package loop

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// The six types of thought-stream events.
const (
	// ThoughtPlanning: what the agent is about to do (before a model call).
	ThoughtPlanning = "planning"
	// ThoughtReasoning: the model's own reasoning, as its provider streams it.
	ThoughtReasoning = "reasoning"
	// ThoughtReflection: what the agent makes of tool results.
	ThoughtReflection = "reflection"
	// ThoughtDecision: a choice the loop made (run tools in parallel or
	// one by one, stop or go on).
	ThoughtDecision = "decision"
	// ThoughtObservation: what the agent noticed (what a model response
	// asked for, what it cost).
	ThoughtObservation = "observation"
	// ThoughtStrategy: how the turn is set up to go (limits, tools at hand).
	ThoughtStrategy = "strategy"
)

// ThoughtTypes lists the six thought types.
func ThoughtTypes() []string {
	return []string{ThoughtPlanning, ThoughtReasoning, ThoughtReflection, ThoughtDecision, ThoughtObservation, ThoughtStrategy}
}

// Verbosity levels of thoughts. A thought's level is the least detailed
// level that shows it: a client reading at "normal" sees the brief and
// normal thoughts, at "detailed" all of them.
const (
	VerbosityBrief    = "brief"
	VerbosityNormal   = "normal"
	VerbosityDetailed = "detailed"
	// VerbosityNone shows no thoughts (a reader's choice, or the loop's
	// ThoughtLevel to record none).
	VerbosityNone = "none"
)

// VerbosityRank orders the levels: none 0, brief 1, normal 2, detailed 3;
// -1 for anything else.
func VerbosityRank(v string) int {
	switch v {
	case VerbosityNone:
		return 0
	case VerbosityBrief:
		return 1
	case VerbosityNormal:
		return 2
	case VerbosityDetailed:
		return 3
	}
	return -1
}

// ParseVerbosity checks a verbosity level given by a client or an
// operator (case and surrounding spaces ignored). "" is returned as "".
func ParseVerbosity(s string) (string, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	if v == "" || VerbosityRank(v) >= 0 {
		return v, nil
	}
	return "", fmt.Errorf("%w: verbosity %q: use brief, normal, detailed or none", ErrInvalid, s)
}

// ThoughtVerbosityKey is the metadata key (of an A2A message or of its
// request) with which a client chooses the verbosity of the thoughts its
// stream carries.
const ThoughtVerbosityKey = "thoughtVerbosity"

// NewThoughtID returns a fresh thought id.
func NewThoughtID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "th-" + hex.EncodeToString(b[:])
}

// thoughtKnown reports whether t is one of the six types.
func thoughtKnown(t string) bool {
	for _, k := range ThoughtTypes() {
		if k == t {
			return true
		}
	}
	return false
}

// stampThought gives a thought that passes through the turn (the loop's
// own, the model's reasoning, a plugin's) what the protocol promises: an
// id, a type and a level of the protocol's, and its index, the turn's count
// of thought events, so that it never depends on what sent it.
func (tr *turn) stampThought(ts *ThoughtStream) bool {
	if ts.ThoughtID == "" {
		ts.ThoughtID = NewThoughtID()
	}
	if !thoughtKnown(ts.ThoughtType) {
		ts.ThoughtType = ThoughtReasoning
	}
	if r := VerbosityRank(ts.Verbosity); r < 1 {
		ts.Verbosity = VerbosityNormal
	}
	if VerbosityRank(ts.Verbosity) > tr.l.thoughtRank {
		return false // the operator records no thoughts this detailed
	}
	ts.Index = int(tr.thoughts.Add(1) - 1)
	return true
}

// shows reports whether the loop records thoughts of this level: a thought
// it does not record is not even written.
func (tr *turn) shows(level string) bool { return VerbosityRank(level) <= tr.l.thoughtRank }

// think emits one of the loop's own thoughts.
func (tr *turn) think(typ, level, content string, md map[string]any) {
	if !tr.shows(level) {
		return
	}
	if md == nil {
		md = make(map[string]any, 1)
	}
	md["source"] = "loop"
	tr.emit(&ThoughtStream{Header: Header{Kind: KindThoughtStream}, ThoughtType: typ, Verbosity: level,
		Content: content, Metadata: md})
}

// debugThought emits an internal:thought-process event: the loop's state at
// a decision point, for the operator's debugging (never a client's).
func (tr *turn) debugThought(iter int, stage, reasoning string, state map[string]any) {
	if !tr.l.debugThoughts {
		return
	}
	tr.emit(&InternalThoughtProcess{Header: Header{Kind: KindInternalThoughtProcess}, Iteration: iter,
		Stage: stage, Reasoning: reasoning, State: state})
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

func callNames(calls []ToolCall) []string {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Name
	}
	return names
}

func callIDs(calls []ToolCall) []string {
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.ID
	}
	return ids
}

func defNames(defs []ToolDefinition) []string {
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	return names
}

// planThoughts: before a model call, the turn's strategy (once) and the
// plan of this call.
func (tr *turn) planThoughts(iter int, conv []Message, out *Outcome) {
	if !tr.planned && tr.shows(VerbosityDetailed) {
		tr.planned = true
		tools := "no tools"
		if len(tr.defs) > 0 {
			tools = fmt.Sprintf("%s at hand (%s)", plural(len(tr.defs), "tool", "tools"), strings.Join(defNames(tr.defs), ", "))
		}
		tr.think(ThoughtStrategy, VerbosityDetailed,
			fmt.Sprintf("Working within %d iterations with %s; tool calls of one step run up to %d at a time.",
				tr.l.maxIter, tools, tr.l.concurrency),
			map[string]any{"maxIterations": tr.l.maxIter, "toolConcurrency": tr.l.concurrency, "tools": len(tr.defs)})
	}
	if tr.shows(VerbosityBrief) {
		tr.plan(iter, conv)
	}
	if tr.l.debugThoughts {
		tr.debugThought(iter, "pre-llm", fmt.Sprintf("calling the model with %d messages and %d tools", len(conv), len(tr.defs)),
			map[string]any{"iteration": iter, "messageCount": len(conv), "toolCount": len(tr.defs),
				"tokensUsed": out.Usage.TotalTokens, "toolCallsSoFar": tr.toolCalls.Load()})
	}
}

func (tr *turn) plan(iter int, conv []Message) {
	var plan string
	if results := trailingToolResults(conv); results > 0 {
		plan = fmt.Sprintf("Planning step %d with the results of %s.", iter, plural(results, "tool call", "tool calls"))
	} else {
		plan = fmt.Sprintf("Planning step %d: asking the model how to answer.", iter)
	}
	tr.think(ThoughtPlanning, VerbosityBrief, plan,
		map[string]any{"iteration": iter, "messages": len(conv), "tools": len(tr.defs)})
}

// trailingToolResults counts the tool messages at the end of conv: the
// results the next model call reads.
func trailingToolResults(conv []Message) int {
	n := 0
	for i := len(conv) - 1; i >= 0 && conv[i].Role == RoleTool; i-- {
		n++
	}
	return n
}

// observeResponse: what a model response asked for.
func (tr *turn) observeResponse(iter int, resp *ModelResponse, out *Outcome) {
	if !tr.shows(VerbosityDetailed) && !tr.l.debugThoughts {
		return
	}
	calls := resp.Message.ToolCalls
	what := "gave its answer"
	if len(calls) > 0 {
		what = fmt.Sprintf("asked for %s: %s", plural(len(calls), "tool call", "tool calls"), strings.Join(callNames(calls), ", "))
	}
	finish := string(resp.FinishReason)
	if finish == "" {
		finish = "none given"
	}
	tr.think(ThoughtObservation, VerbosityDetailed,
		fmt.Sprintf("The model %s (finish reason %s, %d tokens; %d in the turn so far).", what, finish,
			resp.Usage.TotalTokens, out.Usage.TotalTokens),
		map[string]any{"iteration": iter, "toolCalls": len(calls), "finishReason": string(resp.FinishReason)})
	tr.debugThought(iter, "post-llm", fmt.Sprintf("the model %s", what),
		map[string]any{"iteration": iter, "pendingTools": callNames(calls), "finishReason": string(resp.FinishReason),
			"contentBytes": len(resp.Message.Content), "usage": resp.Usage})
}

// toolDecision: run the calls in parallel or not, and which wait.
func (tr *turn) toolDecision(calls []ToolCall, run []int, pending []ToolCall) {
	if !tr.shows(VerbosityNormal) && !tr.l.debugThoughts {
		return
	}
	running := make([]ToolCall, len(run))
	for i, j := range run {
		running[i] = calls[j]
	}
	md := map[string]any{"relatedTo": strings.Join(callIDs(running), ",")}
	switch {
	case len(running) > 1:
		md["decision"], md["alternatives"] = "parallel", []string{"run the calls one after another"}
		limit := ""
		if len(running) > tr.l.concurrency {
			limit = fmt.Sprintf(", %d at a time", tr.l.concurrency)
		}
		tr.think(ThoughtDecision, VerbosityNormal,
			fmt.Sprintf("Running %s in parallel%s, since none needs another's result: %s.",
				plural(len(running), "tool call", "tool calls"), limit, strings.Join(callNames(running), ", ")), md)
	case len(running) == 1:
		md["decision"] = "single"
		tr.think(ThoughtDecision, VerbosityNormal, fmt.Sprintf("Running %s.", running[0].Name), md)
	}
	if len(pending) > 0 {
		tr.think(ThoughtDecision, VerbosityNormal,
			fmt.Sprintf("Holding %s until the client answers: %s.", plural(len(pending), "call", "calls"),
				strings.Join(callNames(pending), ", ")),
			map[string]any{"decision": "wait", "relatedTo": strings.Join(callIDs(pending), ",")})
	}
	tr.debugThought(tr.env.Iteration, "tools", fmt.Sprintf("%d to run, %d waiting, concurrency %d", len(running), len(pending), tr.l.concurrency),
		map[string]any{"run": callNames(running), "waiting": callNames(pending), "concurrency": tr.l.concurrency})
}

// reflect: what the tool results of a step say.
func (tr *turn) reflect(iter int, results []Message) {
	if len(results) == 0 || (!tr.shows(VerbosityNormal) && !tr.l.debugThoughts) {
		return
	}
	var failed []string
	for _, m := range results {
		if m.Metadata["isError"] == true {
			failed = append(failed, m.Name)
		}
	}
	var s string
	switch {
	case len(failed) == 0:
		s = fmt.Sprintf("%s succeeded; the model gets the results next.", plural(len(results), "tool call", "tool calls"))
	case len(failed) == len(results):
		s = fmt.Sprintf("%s failed (%s); the model gets the errors and may try another way.",
			plural(len(results), "tool call", "tool calls"), strings.Join(failed, ", "))
	default:
		s = fmt.Sprintf("%d of %s succeeded; %s failed; the model gets the results and the errors next.",
			len(results)-len(failed), plural(len(results), "tool call", "tool calls"), strings.Join(failed, ", "))
	}
	tr.think(ThoughtReflection, VerbosityNormal, s,
		map[string]any{"iteration": iter, "results": len(results), "failed": len(failed)})
	tr.debugThought(iter, "post-tools", s, map[string]any{"iteration": iter, "failed": failed, "results": len(results)})
}

// stopThought: the model answered without tool calls; the turn stops.
func (tr *turn) stopThought(iter int, out *Outcome) {
	if !tr.shows(VerbosityBrief) && !tr.l.debugThoughts {
		return
	}
	s := "Stopping: the model gave its answer."
	switch out.Reason {
	case ReasonLength:
		s = "Stopping: the answer was cut off at the model's token limit."
	case ReasonContentFilter:
		s = "Stopping: the answer was cut off by the model's content filter."
	}
	tr.think(ThoughtDecision, VerbosityBrief, s, map[string]any{"decision": "stop", "reason": out.Reason, "iteration": iter})
	tr.debugThought(iter, "stop", s, map[string]any{"iteration": iter, "reason": out.Reason, "usage": out.Usage})
}

// pauseThought: the turn ends waiting for the client.
func (tr *turn) pauseThought(iter int, reqs []InputRequest) {
	if !tr.shows(VerbosityBrief) && !tr.l.debugThoughts {
		return
	}
	kinds := make([]string, len(reqs))
	for i, r := range reqs {
		kinds[i] = r.InputType
	}
	tr.think(ThoughtDecision, VerbosityBrief,
		fmt.Sprintf("Pausing: waiting for %s (%s).", plural(len(reqs), "answer", "answers"), strings.Join(kinds, ", ")),
		map[string]any{"decision": "pause", "iteration": iter})
	tr.debugThought(iter, "stop", "waiting for input", map[string]any{"iteration": iter, "requests": kinds})
}
