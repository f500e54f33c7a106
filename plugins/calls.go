package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/loop/schemamsg"
	"github.com/looopy-go/looopy/pdk"
)

// callTool validates the arguments against the tool's schema, then runs it.
// Invalid arguments come back as an error result; the plugin is not called.
func (p *Plugin) callTool(ctx context.Context, t *pluginTool, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	args := call.Arguments
	if len(bytes.TrimSpace(args)) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
		call.Arguments = args
	}
	// encoding/json's float64 numbers are precise enough to validate, and
	// decoding without a Decoder spares a buffer per call.
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return loop.ToolResult{ToolCallID: call.ID, IsError: true,
			Content: fmt.Sprintf("invalid arguments for tool %q: not JSON: %v", call.Name, err)}, nil
	}
	if err := validateArgs(t.schema, v); err != nil {
		return loop.ToolResult{ToolCallID: call.ID, IsError: true,
			Content: fmt.Sprintf("invalid arguments for tool %q: %s", call.Name, schemamsg.Text(err))}, nil
	}
	if t.agent {
		return p.runAgent(ctx, t, call, env)
	}
	req := pdk.ToolCallRequest{Call: call}
	if env != nil {
		req.ContextID, req.TaskID = env.ContextID, env.TaskID
	}
	// The arguments were decoded above: they are valid JSON, and pdk
	// writes the request as encoding/json would without its reflection.
	in, ok := pdk.AppendToolCallRequest(make([]byte, 0, 72+len(call.ID)+len(call.Name)+len(args)+len(req.ContextID)+len(req.TaskID)), &req)
	if !ok {
		var err error
		r := req // only this path puts the request on the heap
		if in, err = json.Marshal(&r); err != nil {
			return loop.ToolResult{}, fmt.Errorf("plugin %q: encode tool call: %w", p.Name(), err)
		}
	}
	if env != nil && env.Auth != nil && PrincipalOf(ctx) == "" {
		ctx = WithPrincipal(ctx, env.Auth.Principal)
	}
	var res loop.ToolResult
	ca := &callAuth{}
	err := p.invoke(ctx, pdk.OpToolCall, in, func(st *callState) {
		st.env, st.toolCallID, st.auth = env, call.ID, ca
	}, func(out []byte) error {
		if r, ok := pdk.ParseToolResult(out); ok {
			res = r
			return nil
		}
		// Only an answer the scanner declines is decoded into a value
		// of its own, so that res stays off the heap on the usual path.
		var r loop.ToolResult
		err := json.Unmarshal(out, &r)
		res = r
		return err
	})
	if ca.need != nil && ctx.Err() == nil {
		// It asked for a credential it lacks: whatever it answered, the
		// task pauses for it and the call runs again with it.
		return loop.ToolResult{}, &loop.AuthRequiredError{Need: *ca.need}
	}
	if err != nil {
		var pe *pdk.Error
		if errors.As(err, &pe) {
			return loop.ToolResult{ToolCallID: call.ID, IsError: true, Content: redactHanded(p.redact(pe.Message), ca.handed)}, nil
		}
		return loop.ToolResult{}, err
	}
	res.ToolCallID = call.ID
	p.redactResult(&res)
	if len(ca.handed) > 0 {
		res.Content = redactHanded(res.Content, ca.handed)
		if len(res.Data) > 0 {
			res.Data = json.RawMessage(redactHanded(string(res.Data), ca.handed))
			if !json.Valid(res.Data) {
				res.Data = nil
			}
		}
	}
	return res, nil
}

// redactHanded replaces the credentials a call was handed in what it
// answers: a plugin that echoes its token gets it into no history.
func redactHanded(s string, handed []string) string {
	for _, tok := range handed {
		if len(tok) >= 4 {
			s = strings.ReplaceAll(s, tok, "[credential]")
		}
	}
	return s
}

// validateArgs checks arguments against a plugin's schema; a panic of the
// validator (the schema is the guest's) is a validation error.
func validateArgs(sch *jsonschema.Schema, v any) (err error) {
	defer recoverInto(&err, "schema")
	return sch.Validate(v)
}

// runAgent runs an agent plugin as a tool: a sub-task of the caller's task,
// with the caller's model and tools lent to it.
func (p *Plugin) runAgent(ctx context.Context, t *pluginTool, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	if env == nil {
		env = &loop.ToolEnv{}
	}
	// The one nesting limit is the loop's: the sub-task this call starts
	// runs at env.Depth+1, which the loop refuses past MaxSubAgentDepth.
	if env.Depth >= loop.MaxSubAgentDepth {
		return loop.ToolResult{ToolCallID: call.ID, IsError: true,
			Content: fmt.Sprintf("agent %q not run: sub-agents nest at most %d deep", t.def.Name, loop.MaxSubAgentDepth)}, nil
	}
	var args struct {
		Prompt string `json:"prompt"`
	}
	_ = json.Unmarshal(call.Arguments, &args)
	prompt := args.Prompt
	if prompt == "" {
		prompt = string(call.Arguments)
	}
	st, err := env.StartSubtask(ctx, loop.SubtaskSpec{AgentID: p.Name(), Prompt: prompt, CallID: call.ID})
	if err != nil {
		return loop.ToolResult{ToolCallID: call.ID, IsError: true, Content: fmt.Sprintf("agent %q not run: %v", t.def.Name, err)}, nil
	}
	sub := st.Env()
	req := pdk.AgentRequest{
		Messages:  []loop.Message{{Role: loop.RoleUser, Content: prompt}},
		ContextID: env.ContextID, TaskID: sub.TaskID, Depth: sub.Depth,
	}
	if env.Tools != nil {
		defs, err := env.Tools.Tools(ctx)
		if err == nil {
			for _, d := range defs {
				if d.Name != t.def.Name && !d.Client {
					req.Tools = append(req.Tools, d)
				}
			}
		}
	}
	in, err := json.Marshal(&req)
	if err != nil {
		st.Finish(ctx, loop.TaskFailed, "", err)
		return loop.ToolResult{}, fmt.Errorf("plugin %q: encode agent request: %w", p.Name(), err)
	}
	var resp pdk.AgentResponse
	// A call of the sub-agent that must wait for a person (an approval,
	// a credential) stops the run; the request goes up to the parent's
	// client and the agent runs again once it is answered (what its calls
	// did is journaled, and not done twice).
	actx, stop := context.WithCancel(ctx)
	defer stop()
	st.OnPause(stop)
	err = p.invoke(actx, pdk.OpRun, in, func(cs *callState) {
		cs.env, cs.toolCallID = sub, call.ID
	}, func(out []byte) error { return json.Unmarshal(out, &resp) })
	if req, paused := st.Paused(); paused && ctx.Err() == nil {
		return loop.ToolResult{}, st.PassUp(ctx, req, "", "")
	}
	if err != nil {
		var pe *pdk.Error
		status := loop.TaskFailed
		if ctx.Err() != nil {
			status = loop.TaskCanceled
		}
		if errors.As(err, &pe) {
			msg := fmt.Sprintf("agent %q: %s", t.def.Name, p.redact(pe.Message))
			st.Finish(ctx, status, "", errors.New(msg))
			return loop.ToolResult{ToolCallID: call.ID, IsError: true, Content: msg}, nil
		}
		st.Finish(ctx, status, "", errors.New(p.redact(err.Error())))
		return loop.ToolResult{}, err
	}
	content := p.redact(resp.Content)
	st.Finish(ctx, loop.TaskCompleted, content, nil)
	return loop.ToolResult{ToolCallID: call.ID, Content: content}, nil
}

// generate runs one model call. Deltas the plugin emits reach onDelta on the
// calling goroutine. Errors are *loop.ModelError, except cancellation, which
// wraps ctx.Err().
func (p *Plugin) generate(ctx context.Context, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	makeInput := p.modelInput(req)
	var encodeErr error
	input := func(st *callState) ([]byte, error) {
		in, err := makeInput(st)
		encodeErr = err
		return in, err
	}
	var resp loop.ModelResponse
	if onDelta != nil && p.redactor != nil {
		inner := onDelta
		onDelta = func(d loop.Delta) {
			d.Content, d.Thought = p.redact(d.Content), p.redact(d.Thought)
			inner(d)
		}
	}
	setup := func(st *callState) { st.onDelta = onDelta }
	decode := func(out []byte) error {
		if r, ok := pdk.ParseModelResponse(out); ok {
			resp = r
			return nil
		}
		return json.Unmarshal(out, &resp)
	}
	err := p.invokeWith(ctx, pdk.OpGenerate, input, setup, decode)
	var pe *pdk.Error
	if errors.As(err, &pe) && (pe.Code == pdk.CodeToolsRefUnknown || pe.Code == pdk.CodeHistoryRefUnknown) {
		// The instance lost its tool set or conversation (it should not):
		// send them whole.
		err = p.invokeWith(ctx, pdk.OpGenerate, func(st *callState) ([]byte, error) {
			st.toolsRef, st.history = "", keptHistory{}
			return input(st)
		}, setup, decode)
	}
	if encodeErr != nil {
		return nil, &loop.ModelError{Code: "invalid_request", Message: "encode request: " + encodeErr.Error(), Err: encodeErr}
	}
	if err != nil {
		switch {
		case errors.As(err, &pe):
			pe = p.redactPE(pe)
			return nil, &loop.ModelError{Code: pe.Code, Message: pe.Message, Transient: pe.Transient,
				RetryAfter: time.Duration(pe.RetryAfter), Err: pe}
		case ctx.Err() != nil:
			return nil, err
		case errors.Is(err, ErrTimeout):
			return nil, &loop.ModelError{Code: "timeout", Message: err.Error(), Transient: true, Err: err}
		case errors.Is(err, ErrUnloaded):
			return nil, &loop.ModelError{Code: "unavailable", Message: err.Error(), Transient: true, Err: err}
		}
		return nil, &loop.ModelError{Code: "plugin_failed", Message: p.redact(err.Error()), Err: err}
	}
	p.redactResponse(&resp)
	return &resp, nil
}

// modelInput encodes a model request for the instance that runs it. To a
// guest that keeps tool sets (pdk.FeatureToolsRef) the tools go once per
// instance: the request names them by a digest of their encoding, and
// carries them only when the instance does not hold that set yet. To a
// guest that keeps conversations (pdk.FeatureHistoryRef) the request
// carries only the messages that follow what the instance holds.
//
// The names of what an instance keeps (ToolsRef, HistoryRef, HistoryFrom,
// HistorySkip, HistoryKeep) are the host's alone: a request that carries
// its own (an agent plugin's model call is outside input) has them
// dropped, or it could name a conversation the instance keeps from
// another principal's call and have the guest put it before its messages.
func (p *Plugin) modelInput(req *loop.ModelRequest) func(*callState) ([]byte, error) {
	if req.ToolsRef != "" || req.HistoryRef != "" || req.HistoryFrom != "" || req.HistorySkip != 0 || req.HistoryKeep != 0 {
		r := *req
		r.ToolsRef, r.HistoryRef, r.HistoryFrom, r.HistorySkip, r.HistoryKeep = "", "", "", 0, 0
		req = &r
	}
	keepsTools := len(req.Tools) > 0 && slices.Contains(p.desc.Features, pdk.FeatureToolsRef)
	keepsHistory := slices.Contains(p.desc.Features, pdk.FeatureHistoryRef)
	if !keepsTools && !keepsHistory {
		return func(*callState) ([]byte, error) { return json.Marshal(req) }
	}
	var (
		tools []byte
		ref   string
		err   error
	)
	if keepsTools {
		if tools, ref, err = p.toolSets.get(req.Tools); err != nil {
			return func(*callState) ([]byte, error) { return nil, err }
		}
	}
	return func(st *callState) ([]byte, error) {
		bare := *req
		bare.Tools, bare.ToolsRef = nil, ref
		if keepsHistory {
			skip, keep := st.history.match(req.Messages)
			if keep > 0 {
				bare.HistoryFrom, bare.HistorySkip, bare.HistoryKeep = st.history.ref, skip, keep
				bare.Messages = req.Messages[keep:]
			}
			bare.HistoryRef = "h" + strconv.FormatUint(historyNames.Add(1), 36)
			// What the instance holds from now on, whatever the call's
			// outcome: a guest that did not take it answers the next call
			// with history_ref_unknown, and that call goes whole.
			st.history.keep(bare.HistoryRef, skip, keep, req.Messages)
		}
		in, err := json.Marshal(&bare)
		if err != nil {
			st.history = keptHistory{}
			return nil, err
		}
		if !keepsTools || st.toolsRef == ref {
			return in, nil
		}
		st.toolsRef = ref
		// {...} becomes {...,"tools":[…]}
		whole := make([]byte, 0, len(in)+len(tools)+10)
		whole = append(whole, in[:len(in)-1]...)
		whole = append(whole, `,"tools":`...)
		whole = append(whole, tools...)
		whole = append(whole, '}')
		return whole, nil
	}
}

// Model returns the model plugin of that name. Each Generate uses the
// version serving at that moment; PinModel holds one version for a turn.
func (r *Registry) Model(name string) (loop.Model, error) {
	r.mu.RLock()
	p := r.plugins[name]
	r.mu.RUnlock()
	if p == nil {
		return nil, fmt.Errorf("plugins: %w", &loop.NotFoundError{What: "model plugin", ID: name})
	}
	if p.Kind() != pdk.KindModel {
		return nil, fmt.Errorf("plugins: plugin %q is a %s plugin, not a model: %w", name, p.Kind(), loop.ErrInvalid)
	}
	return &modelHandle{r: r, name: name}, nil
}

type modelHandle struct {
	r    *Registry
	name string
}

var (
	_ loop.Model       = (*modelHandle)(nil)
	_ loop.ModelPinner = (*modelHandle)(nil)
)

func (m *modelHandle) current() (*Plugin, error) {
	m.r.mu.RLock()
	defer m.r.mu.RUnlock()
	p := m.r.plugins[m.name]
	if p == nil || p.Kind() != pdk.KindModel || !p.acquire() {
		return nil, &loop.ModelError{Code: "unavailable", Message: fmt.Sprintf("model plugin %q is not loaded", m.name), Transient: true}
	}
	return p, nil
}

// Generate calls the serving version of the model.
func (m *modelHandle) Generate(ctx context.Context, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	p, err := m.current()
	if err != nil {
		return nil, err
	}
	defer p.release()
	return p.generate(ctx, req, onDelta)
}

// PinModel holds the serving version until release.
func (m *modelHandle) PinModel() (loop.Model, func()) {
	p, err := m.current()
	if err != nil {
		return m, func() {}
	}
	var once sync.Once
	return pinnedModel{p}, func() { once.Do(p.release) }
}

type pinnedModel struct{ p *Plugin }

func (m pinnedModel) Generate(ctx context.Context, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	return m.p.generate(ctx, req, onDelta)
}
