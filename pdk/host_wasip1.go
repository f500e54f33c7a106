//go:build wasip1

package pdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unsafe"
)

// The host functions (docs/PLUGIN_ABI.md, module "looopy"). Each one is
// imported only when the plugin uses the function that wraps it, so a
// plugin's imports are exactly what it needs, and the manifest must grant
// each of them.

//go:wasmimport looopy log
func hostLog(level int32, ptr unsafe.Pointer, n int32)

//go:wasmimport looopy emit
func hostEmit(kind int32, ptr unsafe.Pointer, n int32) int32

//go:wasmimport looopy result_read
func hostResultRead(ptr unsafe.Pointer, n int32) int32

//go:wasmimport looopy kv_get
func hostKVGet(kptr unsafe.Pointer, klen int32) int64

//go:wasmimport looopy kv_set
func hostKVSet(kptr unsafe.Pointer, klen int32, vptr unsafe.Pointer, vlen int32) int32

//go:wasmimport looopy kv_delete
func hostKVDelete(kptr unsafe.Pointer, klen int32) int32

//go:wasmimport looopy http_request
func hostHTTPRequest(ptr unsafe.Pointer, n int32) int64

//go:wasmimport looopy http_read
func hostHTTPRead(handle int32, ptr unsafe.Pointer, n int32) int32

//go:wasmimport looopy http_close
func hostHTTPClose(handle int32)

//go:wasmimport looopy model_call
func hostModelCall(ptr unsafe.Pointer, n int32) int64

//go:wasmimport looopy tool_call
func hostToolCall(ptr unsafe.Pointer, n int32) int64

//go:wasmimport looopy artifact_write
func hostArtifactWrite(ptr unsafe.Pointer, n int32) int64

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func stringPtr(s string) unsafe.Pointer {
	if s == "" {
		return nil
	}
	return unsafe.Pointer(unsafe.StringData(s))
}

// readRegister copies n bytes of the host's result register.
func readRegister(n int32) []byte {
	if n <= 0 {
		return nil
	}
	b := make([]byte, n)
	got := hostResultRead(unsafe.Pointer(&b[0]), n)
	return b[:got]
}

// hostError turns a negative return into the error the register holds.
func hostError(op string, ret int64) error {
	msg := readRegister(int32(-ret))
	var pe Error
	if json.Unmarshal(msg, &pe) == nil && pe.Message != "" {
		return fmt.Errorf("%s: %w", op, &pe)
	}
	return fmt.Errorf("%s: %s", op, msg)
}

// Log sends a line to the host's log, under the plugin's name.
func Log(level LogLevel, msg string) {
	hostLog(int32(level), stringPtr(msg), int32(len(msg)))
}

func emit(kind EmitKind, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("emit: %w", err)
	}
	switch r := hostEmit(int32(kind), bytesPtr(b), int32(len(b))); {
	case r == -1:
		return ErrCanceled
	case r < 0:
		return hostError("emit", int64(r))
	}
	return nil
}

// deltaBuf is the encoding buffer of sendDelta, reused: a model streams
// many deltas and the guest's calls run one at a time.
var deltaBuf []byte

// sendDelta encodes d without encoding/json (a delta is sent per piece of
// a streamed answer, so its cost is paid per chunk) and emits it.
func sendDelta(d Delta) error {
	deltaBuf = appendDelta(deltaBuf[:0], &d)
	switch r := hostEmit(int32(EmitDelta), bytesPtr(deltaBuf), int32(len(deltaBuf))); {
	case r == -1:
		return ErrCanceled
	case r < 0:
		return hostError("emit", int64(r))
	}
	return nil
}

// Progress reports the progress of the running tool call (fraction 0..1, or
// 0 when unknown) to the task; it becomes a tool-progress event.
func Progress(ctx context.Context, fraction float64, message string) error {
	return emit(EmitProgress, ToolProgress{Progress: fraction, Message: message})
}

// Emit sends an event of the task (a thought-stream, a warning, ...): kind is
// the event kind, data its body.
func Emit(ctx context.Context, kind string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("emit %s: %w", kind, err)
	}
	return emit(EmitEvent, EventOut{Kind: kind, Data: b})
}

// KVGet reads a key of the plugin's own persistent key-value space; ok is
// false when the key is absent.
func KVGet(key string) (value []byte, ok bool, err error) {
	r := hostKVGet(stringPtr(key), int32(len(key)))
	switch {
	case r == -1:
		return nil, false, nil
	case r < 0:
		return nil, false, hostError("kv get", r)
	}
	return readRegister(int32(r & 0xffffffff)), true, nil
}

// KVSet stores a key of the plugin's key-value space.
func KVSet(key string, value []byte) error {
	if r := hostKVSet(stringPtr(key), int32(len(key)), bytesPtr(value), int32(len(value))); r < 0 {
		return hostError("kv set", int64(r))
	}
	return nil
}

// KVDelete removes a key of the plugin's key-value space.
func KVDelete(key string) error {
	if r := hostKVDelete(stringPtr(key), int32(len(key))); r < 0 {
		return hostError("kv delete", int64(r))
	}
	return nil
}

// HTTP sends a request through the host's egress broker: only the hosts the
// manifest lists (and the operator granted) are reachable, redirects are
// checked again, size and time are capped.
func HTTP(ctx context.Context, req *HTTPRequest) (*HTTPResponse, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	r := hostHTTPRequest(bytesPtr(b), int32(len(b)))
	if r < 0 {
		return nil, hostError("http "+req.URL, r)
	}
	handle := int32(r >> 32)
	var head HTTPResponseHead
	if err := json.Unmarshal(readRegister(int32(r&0xffffffff)), &head); err != nil {
		hostHTTPClose(handle)
		return nil, fmt.Errorf("http %s: response head: %w", req.URL, err)
	}
	return &HTTPResponse{Status: head.Status, Headers: head.Headers, Body: &httpBody{handle: handle}}, nil
}

type httpBody struct {
	handle int32
	closed bool
}

func (b *httpBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("http body: read after close")
	}
	if len(p) == 0 {
		return 0, nil
	}
	n := hostHTTPRead(b.handle, unsafe.Pointer(&p[0]), int32(len(p)))
	switch {
	case n == 0:
		return 0, io.EOF
	case n < 0:
		return 0, hostError("http body", int64(n))
	}
	return int(n), nil
}

func (b *httpBody) Close() error {
	if !b.closed {
		b.closed = true
		hostHTTPClose(b.handle)
	}
	return nil
}

func callJSON(op string, f func(unsafe.Pointer, int32) int64, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	r := f(bytesPtr(b), int32(len(b)))
	if r < 0 {
		return hostError(op, r)
	}
	if err := json.Unmarshal(readRegister(int32(r&0xffffffff)), out); err != nil {
		return fmt.Errorf("%s: decode answer: %w", op, err)
	}
	return nil
}

// CallModel asks the host's model (agent plugins). The call goes through the
// host's loop machinery: traced, limited and journaled like the parent's own.
func CallModel(ctx context.Context, req *ModelRequest) (*ModelResponse, error) {
	var resp ModelResponse
	if err := callJSON("model call", hostModelCall, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// CallTool runs one of the tools the host lends the agent (AgentRequest.Tools).
func CallTool(ctx context.Context, call ToolCall) (*ToolResult, error) {
	var res ToolResult
	if err := callJSON("tool call "+call.Name, hostToolCall, call, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// WriteArtifact creates, appends to or completes an artifact of the task and
// returns its id.
func WriteArtifact(ctx context.Context, w *ArtifactWrite) (string, error) {
	var out struct {
		ArtifactID string `json:"artifactId"`
	}
	if err := callJSON("artifact write", hostArtifactWrite, w, &out); err != nil {
		return "", err
	}
	return out.ArtifactID, nil
}

//go:wasmimport looopy credential
func hostCredential(ptr unsafe.Pointer, n int32) int64

// GetCredential asks the host for a credential. When the client has not
// supplied it yet, the error's code is CodeAuthRequired (see
// IsAuthRequired): return from the tool call, and the call runs again once
// the client has supplied it. A plugin not granted what it asks for gets an
// error with CodeDenied.
func GetCredential(ctx context.Context, req CredentialRequest) (*Credential, error) {
	var c Credential
	if err := callJSON("credential "+req.Provider, hostCredential, req, &c); err != nil {
		return nil, err
	}
	return &c, nil
}
