package wasmtest

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

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
