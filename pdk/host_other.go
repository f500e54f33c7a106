//go:build !wasip1

package pdk

import (
	"context"
	"fmt"
	"os"
)

// The host functions outside the host's sandbox: this file makes the guest
// SDK compile on every GOOS, so go doc, editors and a plugin's native tests
// (go test) see the same API. Inside the host (GOOS=wasip1) each of these
// calls the host function of the same name (docs/PLUGIN_ABI.md).

// Log sends a line to the host's log, under the plugin's name. Outside the
// host it writes the line to stderr.
func Log(level LogLevel, msg string) { fmt.Fprintf(os.Stderr, "pdk log %d: %s\n", level, msg) }

func sendDelta(Delta) error { return nil }

// Progress reports the progress of the running tool call (fraction 0..1, or
// 0 when unknown) to the task; it becomes a tool-progress event. Outside the
// host it does nothing.
func Progress(ctx context.Context, fraction float64, message string) error { return nil }

// Emit sends an event of the task (a thought-stream, a warning, ...): kind is
// the event kind, data its body. Outside the host it does nothing.
func Emit(ctx context.Context, kind string, data any) error { return nil }

// KVGet reads a key of the plugin's persistent key-value space.
func KVGet(key string) (value []byte, ok bool, err error) { return nil, false, ErrNoHost }

// KVSet writes a key of the plugin's key-value space.
func KVSet(key string, value []byte) error { return ErrNoHost }

// KVDelete removes a key of the plugin's key-value space.
func KVDelete(key string) error { return ErrNoHost }

// HTTP sends a request through the host's egress broker: only the hosts the
// manifest lists (and the operator granted) are reachable, redirects are
// checked again, size and time are capped.
func HTTP(ctx context.Context, req *HTTPRequest) (*HTTPResponse, error) { return nil, ErrNoHost }

// CallModel asks the host's model (agent plugins).
func CallModel(ctx context.Context, req *ModelRequest) (*ModelResponse, error) {
	return nil, ErrNoHost
}

// CallTool runs one of the tools the host lends the agent (AgentRequest.Tools).
func CallTool(ctx context.Context, call ToolCall) (*ToolResult, error) { return nil, ErrNoHost }

// WriteArtifact creates, appends to or completes an artifact of the task and
// returns its id.
func WriteArtifact(ctx context.Context, w *ArtifactWrite) (string, error) { return "", ErrNoHost }

// GetCredential asks the host for a credential (see the wasip1 version).
func GetCredential(ctx context.Context, req CredentialRequest) (*Credential, error) {
	return nil, ErrNoHost
}
