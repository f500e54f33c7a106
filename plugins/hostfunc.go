package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/loop/jsonlimit"
	"github.com/looopy-go/looopy/pdk"
)

// KV is a persistent key-value space, one namespace per plugin (the plugin's
// name). KVGet of an absent key returns an error matching loop.ErrNotFound.
// Implementations are safe for concurrent use.
type KV interface {
	KVGet(ctx context.Context, ns, key string) ([]byte, error)
	KVSet(ctx context.Context, ns, key string, v []byte) error
	KVDelete(ctx context.Context, ns, key string) error
}

// ArtifactScope is the task an artifact write belongs to.
type ArtifactScope struct {
	Plugin    string
	ContextID string
	TaskID    string
	// Owner is the principal the call runs for ("" when it has none).
	Owner string
	// Emit sends the artifact's events of the task (may be nil).
	Emit func(loop.Event)
}

// ArtifactWriter stores the artifacts plugins write (artifact_write).
type ArtifactWriter interface {
	WriteArtifact(ctx context.Context, scope ArtifactScope, w *pdk.ArtifactWrite) (artifactID string, err error)
}

// Limits of what a guest may hand the host in one host-function call.
const (
	maxKVKey       = 1 << 10
	maxKVValue     = 1 << 20
	maxHostPayload = 4 << 20
	maxHTTPHandles = 16
)

// callState is the per-instance state of the call an instance is serving:
// the result register, the open HTTP responses, and what the call knows of
// its turn. An instance serves one call at a time, so no lock is needed; it
// is never shared between instances.
type callState struct {
	p          *Plugin
	env        *loop.ToolEnv
	toolCallID string
	onDelta    func(loop.Delta)
	deltas     int
	subCalls   int
	register   []byte
	http       map[int32]io.ReadCloser
	nextHandle int32
	spent      spent // what this call wrote, against the plugin's budgets
	// auth is the credential business of the tool call being served
	// (nil for other calls).
	auth *callAuth
	// toolsRef names the tool set the instance keeps (pdk.FeatureToolsRef);
	// it outlives a call, as the guest's copy does.
	toolsRef string
	// history is the conversation the instance keeps
	// (pdk.FeatureHistoryRef); it outlives a call, as the guest's does.
	history keptHistory
	// files counts what the instance holds open through its granted
	// folders (nil when none); it outlives a call, as the files do.
	files *openFiles
}

type callStateKey struct{}

func stateOf(ctx context.Context) *callState {
	s, _ := ctx.Value(callStateKey{}).(*callState)
	return s
}

// reset ends a call: open responses are closed, the register emptied.
func (s *callState) reset() {
	for h, body := range s.http {
		_ = body.Close()
		delete(s.http, h)
	}
	if cap(s.register) > 64<<10 {
		s.register = nil
	}
	s.register = s.register[:0]
	s.env, s.onDelta, s.toolCallID, s.deltas, s.subCalls = nil, nil, "", 0, 0
	s.auth = nil
	s.spent = spent{}
}

func (s *callState) setRegister(b []byte) { s.register = append(s.register[:0], b...) }

// fail puts an error message in the register and returns its negative
// length; the message is at least 2 bytes, so -1 stays free for "absent".
func (s *callState) fail(format string, args ...any) int64 {
	msg := fmt.Sprintf(format, args...)
	if len(msg) < 2 {
		msg += " "
	}
	s.setRegister([]byte(msg))
	return -int64(len(msg))
}

// failWith is fail with a structured error the guest SDK decodes (its code
// and whether it is transient survive the boundary).
func (s *callState) failWith(e *pdk.Error) int64 {
	b, _ := json.Marshal(e)
	s.setRegister(b)
	return -int64(len(b))
}

func readGuest(mod api.Module, ptr, n uint32, max int) ([]byte, bool) {
	if int(n) > max {
		return nil, false
	}
	return mod.Memory().Read(ptr, n)
}

// hostFunc is one function of the looopy host module.
type hostFunc struct {
	fn      api.GoModuleFunc
	params  []api.ValueType
	results []api.ValueType
}

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// hostFunctions returns the Looopy ABI's host functions. Each finds the call
// it serves through ctx.
func hostFunctions() map[string]hostFunc {
	return map[string]hostFunc{
		pdk.HostLog:           {hostLogFn, []api.ValueType{i32, i32, i32}, nil},
		pdk.HostEmit:          {hostEmitFn, []api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
		pdk.HostResultRead:    {hostResultReadFn, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		pdk.HostKVGet:         {hostKVGetFn, []api.ValueType{i32, i32}, []api.ValueType{i64}},
		pdk.HostKVSet:         {hostKVSetFn, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}},
		pdk.HostKVDelete:      {hostKVDeleteFn, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		pdk.HostHTTPRequest:   {hostHTTPRequestFn, []api.ValueType{i32, i32}, []api.ValueType{i64}},
		pdk.HostHTTPRead:      {hostHTTPReadFn, []api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
		pdk.HostHTTPClose:     {hostHTTPCloseFn, []api.ValueType{i32}, nil},
		pdk.HostModelCall:     {hostModelCallFn, []api.ValueType{i32, i32}, []api.ValueType{i64}},
		pdk.HostToolCall:      {hostToolCallFn, []api.ValueType{i32, i32}, []api.ValueType{i64}},
		pdk.HostArtifactWrite: {hostArtifactWriteFn, []api.ValueType{i32, i32}, []api.ValueType{i64}},
		pdk.HostCredential:    {hostCredentialFn, []api.ValueType{i32, i32}, []api.ValueType{i64}},
	}
}

// instantiateHostModule defines module "looopy" in rt with the granted
// functions only: a module importing another one fails to instantiate even
// if the load-time check were bypassed.
func instantiateHostModule(ctx context.Context, rt wazero.Runtime, granted map[string]bool) error {
	b := rt.NewHostModuleBuilder(pdk.HostModule)
	for name, f := range hostFunctions() {
		if !granted[name] {
			continue
		}
		b.NewFunctionBuilder().WithGoModuleFunction(f.fn, f.params, f.results).Export(name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

func hostLogFn(ctx context.Context, mod api.Module, stack []uint64) {
	s := stateOf(ctx)
	if s == nil {
		return
	}
	msg, ok := readGuest(mod, uint32(stack[1]), uint32(stack[2]), 16<<10)
	if !ok {
		msg = []byte("(log line out of bounds or over 16 KiB)")
	}
	level := slog.LevelInfo
	switch pdk.LogLevel(int32(stack[0])) {
	case pdk.LevelDebug:
		level = slog.LevelDebug
	case pdk.LevelWarn:
		level = slog.LevelWarn
	case pdk.LevelError:
		level = slog.LevelError
	}
	if !s.spendLog(ctx, len(msg)) {
		return
	}
	if s.auth != nil && len(s.auth.handed) > 0 {
		msg = []byte(redactHanded(string(msg), s.auth.handed))
	}
	attrs := []any{}
	if s.env != nil {
		attrs = append(attrs, "contextId", s.env.ContextID, "taskId", s.env.TaskID)
	}
	s.p.log.Log(ctx, level, string(msg), attrs...)
}

func hostEmitFn(ctx context.Context, mod api.Module, stack []uint64) {
	s := stateOf(ctx)
	ret := func(v int64) { stack[0] = api.EncodeI32(int32(v)) }
	if ctx.Err() != nil {
		ret(-1)
		return
	}
	if s == nil {
		ret(-1)
		return
	}
	data, ok := readGuest(mod, uint32(stack[1]), uint32(stack[2]), maxHostPayload)
	if !ok {
		ret(s.fail("emit: payload out of bounds or over %d bytes", maxHostPayload))
		return
	}
	if err := jsonlimit.Check(data, jsonlimit.MaxDepth); err != nil {
		ret(s.fail("emit: %v", err))
		return
	}
	kind := pdk.EmitKind(int32(stack[0]))
	if err := s.spendEvent(len(data), kind != pdk.EmitDelta); err != nil {
		ret(s.fail("emit: %v", err))
		return
	}
	switch kind {
	case pdk.EmitDelta:
		d, ok := pdk.ParseDelta(data)
		if !ok {
			if err := json.Unmarshal(data, &d); err != nil {
				ret(s.fail("emit delta: %v", err))
				return
			}
		}
		if s.onDelta != nil {
			s.onDelta(d)
		}
		s.deltas++
	case pdk.EmitProgress:
		var pr pdk.ToolProgress
		if err := json.Unmarshal(data, &pr); err != nil {
			ret(s.fail("emit progress: %v", err))
			return
		}
		if s.env != nil && s.env.Emit != nil {
			s.env.Emit(&loop.ToolProgress{
				Header:     s.header(loop.KindToolProgress),
				ToolCallID: s.toolCallID, Progress: pr.Progress, Message: pr.Message, Metadata: pr.Metadata,
			})
		}
	case pdk.EmitEvent:
		ev, err := s.decodeEvent(data)
		if err != nil {
			ret(s.fail("emit event: %v", err))
			return
		}
		if s.env != nil && s.env.Emit != nil {
			s.env.Emit(ev)
		}
	default:
		ret(s.fail("emit: unknown kind %d", int32(stack[0])))
		return
	}
	ret(0)
}

// pluginEventKinds are the events a plugin may send to its task.
var pluginEventKinds = map[loop.EventKind]bool{
	loop.KindThoughtStream: true, loop.KindWarning: true, loop.KindToolProgress: true,
	loop.KindInternalThoughtProcess: true,
}

func (s *callState) header(k loop.EventKind) loop.Header {
	h := loop.Header{Kind: k, Timestamp: time.Now().UTC()}
	if s.env != nil {
		h.ContextID, h.TaskID = s.env.ContextID, s.env.TaskID
	}
	return h
}

func (s *callState) decodeEvent(data []byte) (loop.Event, error) {
	var out pdk.EventOut
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	k := loop.EventKind(out.Kind)
	if !pluginEventKinds[k] {
		return nil, fmt.Errorf("plugins may not send %q events", out.Kind)
	}
	ev := loop.NewEvent(k)
	if len(out.Data) > 0 {
		if err := json.Unmarshal(out.Data, ev); err != nil {
			return nil, fmt.Errorf("%s: %w", out.Kind, err)
		}
	}
	*ev.Head() = s.header(k)
	if tp, ok := ev.(*loop.ToolProgress); ok && tp.ToolCallID == "" {
		tp.ToolCallID = s.toolCallID
	}
	return ev, nil
}

func hostResultReadFn(ctx context.Context, mod api.Module, stack []uint64) {
	s := stateOf(ctx)
	if s == nil {
		stack[0] = api.EncodeI32(0)
		return
	}
	n := min(uint32(stack[1]), uint32(len(s.register)))
	if n > 0 && !mod.Memory().Write(uint32(stack[0]), s.register[:n]) {
		stack[0] = api.EncodeI32(0)
		return
	}
	stack[0] = api.EncodeI32(int32(n))
}

func hostKVGetFn(ctx context.Context, mod api.Module, stack []uint64) {
	s := stateOf(ctx)
	ret := func(v int64) { stack[0] = uint64(v) }
	key, ok := readGuest(mod, uint32(stack[0]), uint32(stack[1]), maxKVKey)
	switch {
	case s == nil:
		ret(-2)
	case !ok:
		ret(s.fail("kv get: key out of bounds or over %d bytes", maxKVKey))
	case s.p.kv == nil:
		ret(s.fail("kv get: this host has no key-value store"))
	default:
		v, err := s.p.kv.KVGet(ctx, s.p.Name(), string(key))
		if errors.Is(err, loop.ErrNotFound) {
			s.register = s.register[:0]
			ret(-1)
			return
		}
		if err != nil {
			ret(s.fail("kv get: %v", err))
			return
		}
		s.setRegister(v)
		ret(int64(len(v)))
	}
}

func hostKVSetFn(ctx context.Context, mod api.Module, stack []uint64) {
	s := stateOf(ctx)
	ret := func(v int64) { stack[0] = api.EncodeI32(int32(v)) }
	key, ok1 := readGuest(mod, uint32(stack[0]), uint32(stack[1]), maxKVKey)
	val, ok2 := readGuest(mod, uint32(stack[2]), uint32(stack[3]), maxKVValue)
	switch {
	case s == nil:
		ret(-2)
	case !ok1 || !ok2:
		ret(s.fail("kv set: key over %d or value over %d bytes, or out of bounds", maxKVKey, maxKVValue))
	case s.p.kv == nil:
		ret(s.fail("kv set: this host has no key-value store"))
	default:
		if err := s.kvSet(ctx, string(key), append([]byte(nil), val...)); err != nil {
			ret(s.fail("kv set: %v", err))
			return
		}
		ret(0)
	}
}

func hostKVDeleteFn(ctx context.Context, mod api.Module, stack []uint64) {
	s := stateOf(ctx)
	ret := func(v int64) { stack[0] = api.EncodeI32(int32(v)) }
	key, ok := readGuest(mod, uint32(stack[0]), uint32(stack[1]), maxKVKey)
	switch {
	case s == nil:
		ret(-2)
	case !ok:
		ret(s.fail("kv delete: key out of bounds or over %d bytes", maxKVKey))
	case s.p.kv == nil:
		ret(s.fail("kv delete: this host has no key-value store"))
	default:
		if err := s.kvDelete(ctx, string(key)); err != nil && !errors.Is(err, loop.ErrNotFound) {
			ret(s.fail("kv delete: %v", err))
			return
		}
		ret(0)
	}
}

func hostHTTPRequestFn(ctx context.Context, mod api.Module, stack []uint64) {
	s := stateOf(ctx)
	ret := func(v int64) { stack[0] = uint64(v) }
	if s == nil {
		ret(-2)
		return
	}
	data, ok := readGuest(mod, uint32(stack[0]), uint32(stack[1]), maxHostPayload)
	if !ok {
		ret(s.fail("http: request out of bounds or over %d bytes", maxHostPayload))
		return
	}
	if s.p.egress == nil {
		ret(s.fail("http: this host has no egress broker"))
		return
	}
	if b := s.p.budgets.HTTPRequestsPerCall; s.spent.httpRequests >= b {
		ret(s.fail("http: %v", overBudget("too many requests in one call", b)))
		return
	}
	if len(s.http) >= maxHTTPHandles {
		ret(s.fail("http: more than %d responses open; close some", maxHTTPHandles))
		return
	}
	var req pdk.HTTPRequest
	if err := json.Unmarshal(data, &req); err != nil {
		ret(s.fail("http: request: %v", err))
		return
	}
	s.spent.httpRequests++
	resp, err := s.p.egress.Do(ctx, &req, s.p.egressGrant())
	if err != nil {
		if errors.Is(err, ErrEgressDenied) {
			// A refusal by policy is permanent: the guest is told so by
			// its code, not left to guess from the words.
			ret(s.failWith(&pdk.Error{Code: pdk.CodeDenied, Message: "http: " + err.Error()}))
			return
		}
		if canceled(ctx, err) {
			ret(s.failWith(&pdk.Error{Code: pdk.CodeCanceled, Message: "http: " + err.Error()}))
			return
		}
		ret(s.fail("http: %v", err))
		return
	}
	head, _ := json.Marshal(pdk.HTTPResponseHead{Status: resp.Status, Headers: resp.Header})
	if s.http == nil {
		s.http = map[int32]io.ReadCloser{}
	}
	s.nextHandle++
	if s.nextHandle <= 0 {
		s.nextHandle = 1
	}
	h := s.nextHandle
	s.http[h] = resp.Body
	s.setRegister(head)
	ret(int64(h)<<32 | int64(len(head)))
}

func hostHTTPReadFn(ctx context.Context, mod api.Module, stack []uint64) {
	s := stateOf(ctx)
	ret := func(v int64) { stack[0] = api.EncodeI32(int32(v)) }
	if s == nil {
		ret(-2)
		return
	}
	body := s.http[int32(stack[0])]
	if body == nil {
		ret(s.fail("http read: no open response %d", int32(stack[0])))
		return
	}
	n := uint32(stack[2])
	if n > 1<<20 {
		n = 1 << 20
	}
	left := s.p.budgets.HTTPBytesPerCall - s.spent.httpBytes
	if left <= 0 && n > 0 {
		ret(s.fail("http read: %v", overBudget("response bytes read in one call", s.p.budgets.HTTPBytesPerCall)))
		return
	}
	if int64(n) > left {
		n = uint32(left)
	}
	buf, ok := mod.Memory().Read(uint32(stack[1]), n)
	if !ok {
		ret(s.fail("http read: buffer out of bounds"))
		return
	}
	if n == 0 {
		ret(0)
		return
	}
	// Read straight into guest memory; the body is bounded by the grant.
	defer func() {
		if r := int32(stack[0]); r > 0 {
			s.spent.httpBytes += int64(r)
		}
	}()
	got, err := body.Read(buf)
	if got > 0 {
		ret(int64(got))
		return
	}
	if err == io.EOF {
		ret(0)
		return
	}
	if err == nil {
		// A reader may return 0, nil: try once more rather than report an end.
		got, err = body.Read(buf)
		if got > 0 {
			ret(int64(got))
			return
		}
		if err == nil || err == io.EOF {
			ret(0)
			return
		}
	}
	if canceled(ctx, err) {
		// The call was cancelled: the guest is told by the code, not
		// left to find "context canceled" in the words.
		ret(s.failWith(&pdk.Error{Code: pdk.CodeCanceled, Message: "http read: " + err.Error()}))
		return
	}
	ret(s.fail("http read: %v", err))
}

// canceled reports whether a host function failed because the call was
// cancelled (not timed out).
func canceled(ctx context.Context, err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled)
}

func hostHTTPCloseFn(ctx context.Context, mod api.Module, stack []uint64) {
	s := stateOf(ctx)
	if s == nil {
		return
	}
	h := int32(stack[0])
	if body := s.http[h]; body != nil {
		_ = body.Close()
		delete(s.http, h)
	}
}

// registerError is a host function's structured error: its bytes go to the
// result register as they are (a JSON error the guest decodes), not as a
// message.
type registerError []byte

func (e registerError) Error() string { return string(e) }

// payloadHostFn adapts a host function that reads one JSON payload from the
// guest and answers through the result register: the length of the result,
// or minus the length of the error. Errors are prefixed with label.
func payloadHostFn(label string, handle func(ctx context.Context, s *callState, data []byte) ([]byte, error)) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		s := stateOf(ctx)
		if s == nil {
			stack[0] = api.EncodeI64(-2)
			return
		}
		data, ok := readGuest(mod, uint32(stack[0]), uint32(stack[1]), maxHostPayload)
		if !ok {
			stack[0] = uint64(s.fail("%s: request out of bounds or over %d bytes", label, maxHostPayload))
			return
		}
		out, err := handle(ctx, s, data)
		var re registerError
		switch {
		case errors.As(err, &re):
			s.setRegister(re)
			stack[0] = uint64(-int64(len(re)))
		case err != nil:
			stack[0] = uint64(s.fail("%s: %v", label, err))
		default:
			s.setRegister(out)
			stack[0] = uint64(int64(len(out)))
		}
	}
}

var (
	hostModelCallFn     = payloadHostFn("model call", modelCall)
	hostToolCallFn      = payloadHostFn("tool call", toolCall)
	hostArtifactWriteFn = payloadHostFn("artifact write", artifactWrite)
	hostCredentialFn    = payloadHostFn("credential", credential)
)

// callAuth is what a tool call did with credentials: the one it asked for
// and lacks (the task pauses for it), and the tokens it was handed (kept
// out of what it hands back).
type callAuth struct {
	need   *loop.AuthNeed
	handed []string
}

// credential hands a tool call the credential it asks for: the caller's
// (only to a plugin the operator granted callerAuth) or one the client
// supplied for this task and this plugin. One that is not there yet is
// noted (the call ends, the task pauses in auth-required) and answered
// with pdk.CodeAuthRequired.
func credential(ctx context.Context, s *callState, data []byte) ([]byte, error) {
	var req pdk.CredentialRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	deny := func(msg string) error {
		b, _ := json.Marshal(pdk.Error{Code: pdk.CodeDenied, Message: "credential: " + msg})
		return registerError(b)
	}
	if req.Provider == "" || len(req.Provider) > 128 {
		return nil, errors.New("provider is required (at most 128 bytes)")
	}
	if s.env == nil || s.auth == nil {
		return nil, deny("credentials are handed to tool calls of a task only")
	}
	holder := "plugin:" + s.p.Name()
	var cred pdk.Credential
	switch req.Provider {
	case loop.ProviderCaller:
		if !s.p.grant.CallerAuth {
			return nil, deny(fmt.Sprintf("plugin %q is not granted the caller's credentials (the operator's plugins.callerAuth)", s.p.Name()))
		}
		a := s.env.Auth
		if a != nil && !a.Lost {
			cred = pdk.Credential{Provider: req.Provider, Token: a.Token, Principal: a.Principal,
				Scopes: a.Scopes, Claims: a.Claims}
			if a.Token != "" {
				cred.TokenType = "Bearer"
			}
			break
		}
		// A turn resumed after a restart: the caller's credentials are
		// gone with the process that had them; the client sends them again.
		s.auth.need = &loop.AuthNeed{Provider: loop.ProviderCaller, Scopes: req.Scopes, AuthType: "bearer", Holder: holder}
	default:
		if tok, ok := s.env.Credentials.Get(s.env.TaskID, holder, req.Provider); ok {
			cred = pdk.Credential{Provider: req.Provider, Token: tok, TokenType: "Bearer"}
			break
		}
		if len(req.Scopes) > 32 || len(req.AuthURL) > 2048 || len(req.AuthType) > 64 {
			return nil, errors.New("at most 32 scopes, an authUrl of 2048 bytes and an authType of 64")
		}
		s.auth.need = &loop.AuthNeed{Provider: req.Provider, Scopes: req.Scopes, AuthURL: req.AuthURL,
			AuthType: req.AuthType, Holder: holder}
	}
	if s.auth.need != nil {
		b, _ := json.Marshal(pdk.Error{Code: pdk.CodeAuthRequired,
			Message: fmt.Sprintf("a credential of %q is not there yet: return, and this call runs again once the client supplies it", req.Provider)})
		return nil, registerError(b)
	}
	if cred.Token != "" {
		s.auth.handed = append(s.auth.handed, cred.Token)
	}
	return json.Marshal(cred)
}

// modelCall runs an agent plugin's model request through the model lent to
// its call. A model error goes back as a pdk.Error.
func modelCall(ctx context.Context, s *callState, data []byte) ([]byte, error) {
	if s.env == nil || s.env.Model == nil {
		return nil, errors.New("no model lent to this call")
	}
	var req loop.ModelRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	resp, err := s.env.Model.Generate(ctx, &req, nil)
	if err != nil {
		pe := pdk.Error{Message: err.Error(), Transient: loop.Transient(err)}
		var me *loop.ModelError
		if errors.As(err, &me) {
			pe.Code = me.Code
		}
		b, _ := json.Marshal(pe)
		return nil, registerError(b)
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return b, nil
}

// toolCall runs an agent plugin's tool call through the tools lent to its
// call, one sub-agent level deeper. A tool's failure is a tool result.
func toolCall(ctx context.Context, s *callState, data []byte) ([]byte, error) {
	if s.env == nil || s.env.Tools == nil {
		return nil, errors.New("no tools lent to this call")
	}
	var call loop.ToolCall
	if err := json.Unmarshal(data, &call); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if call.ID == "" {
		s.subCalls++
		call.ID = fmt.Sprintf("%s-%s-%d", s.p.Name(), s.toolCallID, s.subCalls)
	}
	sub := *s.env
	sub.Depth++
	res, err := s.env.Tools.Call(ctx, call, &sub)
	if err != nil {
		res = loop.ToolResult{ToolCallID: call.ID, IsError: true, Content: err.Error()}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return b, nil
}

// artifactWrite applies a plugin's artifact operation through the host's
// artifact store; the result is the artifact's id.
func artifactWrite(ctx context.Context, s *callState, data []byte) ([]byte, error) {
	if s.p.artifacts == nil {
		return nil, errors.New("this host stores no artifacts")
	}
	bud := &s.p.budgets
	if s.spent.artWrites+1 > bud.ArtifactWritesPerCall {
		return nil, overBudget("too many artifact writes in one call", bud.ArtifactWritesPerCall)
	}
	if s.spent.artBytes+int64(len(data)) > bud.ArtifactBytesPerCall {
		return nil, overBudget("artifact bytes written in one call", bud.ArtifactBytesPerCall)
	}
	s.spent.artWrites++
	s.spent.artBytes += int64(len(data))
	var w pdk.ArtifactWrite
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	scope := ArtifactScope{Plugin: s.p.Name()}
	if s.env != nil {
		scope.ContextID, scope.TaskID, scope.Emit = s.env.ContextID, s.env.TaskID, s.env.Emit
		if s.env.Auth != nil {
			scope.Owner = s.env.Auth.Principal
		}
	}
	id, err := s.p.artifacts.WriteArtifact(ctx, scope, &w)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(map[string]string{"artifactId": id})
	return b, nil
}
