package wasmtest

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/examples/plugins/wasmtest/chatserver"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/plugins"
)

// openAIModel loads the real openai.wasm pointed at srv, with grant changing
// its capabilities and policy the host's.
func openAIModel(t *testing.T, srv *chatserver.Server, policy plugins.Policy, grant func(c map[string]any)) loop.Model {
	t.Helper()
	p := install(t, t.TempDir(), "openai", func(man map[string]any) {
		loopbackGrant(man)
		if grant != nil {
			grant(capabilities(man))
		}
		man["config"] = map[string]any{"baseUrl": srv.BaseURL(), "model": "test-model"}
		man["secrets"] = map[string]any{"apiKey": "TEST_OPENAI_KEY"}
	})
	egress := plugins.NewEgress(plugins.EgressConfig{})
	t.Cleanup(func() { egress.Close() })
	policy.Secrets = []string{"TEST_OPENAI_KEY"}
	r := load(t, plugins.Config{Policy: policy, Egress: egress,
		LookupEnv: func(k string) (string, bool) {
			return map[string]string{"TEST_OPENAI_KEY": testKey}[k], k == "TEST_OPENAI_KEY"
		}}, p)
	m, err := r.Model("openai")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const testKey = "sk-test-0123456789abcdefSECRET"

var hello = []loop.Message{{Role: loop.RoleUser, Content: "hello"}}

// A refusal by the egress policy (a host not granted, a private address not
// granted) is a permanent model error that names the host and the port, and
// nothing reaches the server.
func TestWasmOpenAIEgressRefusalIsPermanent(t *testing.T) {
	srv := chatserver.Start(t.Cleanup)
	port := mustPort(t, srv.URL)
	for _, tc := range []struct {
		name   string
		policy plugins.Policy
		grant  func(c map[string]any)
		want   string
	}{
		{"host not granted", plugins.Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true},
			func(c map[string]any) { c["allowedHosts"] = []any{"127.0.0.1:1"} },
			`host "127.0.0.1" on port ` + port + ` is not in the plugin's allowed hosts`},
		{"private address not granted", plugins.Policy{AllowedHosts: []string{"127.0.0.1"}},
			func(c map[string]any) { delete(c, "allowPrivateNetwork") },
			`address 127.0.0.1 of "127.0.0.1" (port ` + port + `) is private`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := openAIModel(t, srv, tc.policy, tc.grant)
			_, err := m.Generate(context.Background(), &loop.ModelRequest{Stream: true, Messages: hello}, nil)
			var me *loop.ModelError
			if !errors.As(err, &me) {
				t.Fatalf("err = %v, want a model error", err)
			}
			if me.Transient || loop.Transient(err) || me.Code != "denied" {
				t.Errorf("refusal: code %q transient %v, want a permanent %q", me.Code, me.Transient, "denied")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q, want it to contain %q", err, tc.want)
			}
		})
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("the server got %d requests, want none", n)
	}
}

func mustPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

type sink struct {
	mu     sync.Mutex
	events []loop.Event
}

func (s *sink) Emit(e loop.Event) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *sink) deltas() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, e := range s.events {
		if d, ok := e.(*loop.ContentDelta); ok {
			b.WriteString(d.Delta + "|")
		}
	}
	return b.String()
}

func runTurn(t *testing.T, m loop.Model, retry loop.RetryPolicy) (loop.Outcome, *sink) {
	t.Helper()
	l, err := loop.New(loop.Config{Model: m, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	// A guard only: the turns here end in seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := &sink{}
	out := l.Run(ctx, loop.Turn{ContextID: "c", TaskID: "t", Messages: hello, Sink: s})
	if ctx.Err() != nil {
		t.Fatalf("the turn ran into the test's guard: %+v", out)
	}
	return out, s
}

// The adapter reads Retry-After and the loop waits at least that long
// before it calls again; the retry is counted.
func TestWasmOpenAIRetryAfter(t *testing.T) {
	srv := chatserver.Start(t.Cleanup,
		chatserver.Reply{Status: 503, ErrorMessage: "The server is overloaded", RetryAfter: "1"},
		chatserver.Reply{Text: []string{"Hello", " again"}})
	m := openAIModel(t, srv, plugins.Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true}, nil)
	out, s := runTurn(t, m, loop.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})
	if out.Status != loop.TaskCompleted || out.Content != "Hello again" || out.Retries != 1 || len(srv.Requests()) != 2 {
		t.Fatalf("outcome %+v after %d requests", out, len(srv.Requests()))
	}
	var delay time.Duration
	for _, e := range s.events {
		if r, ok := e.(*loop.InternalLLMRetry); ok {
			delay = r.Delay
		}
	}
	if delay < time.Second {
		t.Fatalf("the retry waited %s, less than the 1s the server asked", delay)
	}
}

// The operator's maxCallTimeout caps the manifest's callTimeout, and a call
// cut off by it after it streamed text is not made again: the client sees
// the text once and a failure that says why.
func TestWasmOpenAICallTimeoutCappedAndNotRetriedAfterOutput(t *testing.T) {
	srv := chatserver.Start(t.Cleanup, chatserver.Reply{Text: []string{"The answer", " is"}, Stall: true})
	m := openAIModel(t, srv, plugins.Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true, MaxCallTimeout: 2 * time.Second},
		func(c map[string]any) { c["callTimeout"] = "5m" })
	out, s := runTurn(t, m, loop.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})
	if out.Status != loop.TaskFailed || out.Retries != 0 || len(srv.Requests()) != 1 {
		t.Fatalf("outcome %+v after %d requests, want one failed call", out, len(srv.Requests()))
	}
	if msg := out.Err.Error(); !strings.Contains(msg, "timeout of 2s") || !strings.Contains(msg, "not retried") {
		t.Fatalf("err = %q, want the capped timeout (2s) and that it was not retried", msg)
	}
	// The two chunks may arrive in one read and go out as one delta.
	if got := strings.ReplaceAll(s.deltas(), "|", ""); got != "The answer is" {
		t.Fatalf("deltas %q, want the streamed text once", s.deltas())
	}
}

// A server that quotes the API key in its error does not get the key into
// the model error the host keeps and shows.
func TestWasmOpenAIEchoedKeyIsRedacted(t *testing.T) {
	srv := chatserver.Start(t.Cleanup, chatserver.Reply{EchoKey: true})
	m := openAIModel(t, srv, plugins.Policy{AllowedHosts: []string{"127.0.0.1"}, AllowPrivateNetwork: true}, nil)
	_, err := m.Generate(context.Background(), &loop.ModelRequest{Stream: true, Messages: hello}, nil)
	var me *loop.ModelError
	if !errors.As(err, &me) || me.Code != "unauthorized" || me.Transient {
		t.Fatalf("err = %#v, want a permanent unauthorized model error", err)
	}
	if srv.Requests()[0].Auth != "Bearer "+testKey {
		t.Fatalf("the server got %q, not the key", srv.Requests()[0].Auth)
	}
	for _, text := range []string{err.Error(), me.Message, me.Err.Error()} {
		if strings.Contains(text, testKey) || !strings.Contains(text, "Incorrect API key provided: "+plugins.Redacted) {
			t.Errorf("error text %q: want the key redacted", text)
		}
	}
}
