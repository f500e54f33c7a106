package host_test

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/examples/plugins/wasmtest/chatserver"
	"github.com/looopy-go/looopy/host"
)

// openAIHost serves the real openai.wasm pointed at srv, its key in the
// environment variable env.
func openAIHost(t testing.TB, srv *chatserver.Server, env, key string, edit func(cfg *host.Config)) *testHost {
	t.Helper()
	return openAIHostAt(t, srv.BaseURL(), env, key, edit)
}

// openAIHostAt is openAIHost for a server at baseURL.
func openAIHostAt(t testing.TB, baseURL, env, key string, edit func(cfg *host.Config)) *testHost {
	t.Helper()
	t.Setenv(env, key)
	root := t.TempDir()
	copyPlugin(t, root, "openai", func(m map[string]any) {
		m["config"] = map[string]any{"baseUrl": baseURL, "model": "manifest-model"}
		m["secrets"] = map[string]any{"apiKey": env}
		caps := m["capabilities"].(map[string]any)
		caps["allowedHosts"] = []string{"127.0.0.1"}
		caps["allowPrivateNetwork"] = true
	})
	cfg := baseConfig(t.TempDir())
	cfg.PluginDir = root
	cfg.Plugins = host.PluginsConfig{NoWatch: true, CacheDir: wasmCache, AllowedHosts: []string{"127.0.0.1"},
		AllowPrivateNetwork: true, Secrets: []string{env}}
	cfg.Model.Plugin = "openai"
	if edit != nil {
		edit(&cfg)
	}
	return startHost(t, cfg)
}

// A server that echoes the API key in its error ("Incorrect API key
// provided: sk-...") gets the key into nothing the host stores or sends:
// the task's status, GetTask, the Looopy event stream, /admin/tasks and the
// database's files on disk.
func TestEchoedAPIKeyIsRedactedEverywhere(t *testing.T) {
	const key = "sk-proj-ECHOED-4b1d9e7a2c5f8h3k"
	const admin = "admin-TOKEN-models-1"
	srv := chatserver.Start(t.Cleanup, chatserver.Reply{EchoKey: true})
	h := openAIHost(t, srv, "LOOOPY_TEST_ECHO_KEY", key, func(cfg *host.Config) { cfg.Admin.Token = admin })
	c := client10(t, h.URL(), "")
	task := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("hello")})
	if task.Status.State != a2a.TaskStateFailed {
		t.Fatalf("task state %s, want failed", task.Status.State)
	}
	if len(srv.Requests()) == 0 || srv.Requests()[0].Auth != "Bearer "+key {
		t.Fatal("the model server never got the key")
	}
	leaks := func(what, text string) {
		t.Helper()
		if strings.Contains(text, key) {
			t.Errorf("%s holds the key:\n%s", what, text)
		}
	}
	status := ""
	if task.Status.Message != nil {
		for _, p := range task.Status.Message.Parts {
			status += p.Text()
		}
	}
	if !strings.Contains(status, "Incorrect API key provided: [REDACTED]") {
		t.Errorf("status message %q: want the server's words with the key redacted", status)
	}
	leaks("the SendMessage status", status)

	_, got := rpc(t, h.URL()+"/a2a/v1", "", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"`+string(task.ID)+`"}}`)
	if !strings.Contains(got.raw, "[REDACTED]") {
		t.Errorf("GetTask: want the redacted message, got %s", got.raw)
	}
	leaks("GetTask", got.raw)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := openSSE(t, ctx, h.URL()+"/events/"+task.ContextID+"?lastEventId=0", "", "")
	var evs strings.Builder
	for _, f := range readFrames(t, resp.Body, func(f frame) bool { return strings.Contains(f.Data, `"task-complete"`) }) {
		evs.WriteString(f.Data + "\n")
	}
	cancel()
	if !strings.Contains(evs.String(), "[REDACTED]") {
		t.Errorf("/events: want the redacted failure, got\n%s", evs.String())
	}
	leaks("/events", evs.String())

	for _, path := range []string{"/admin/tasks", "/admin/tasks/" + string(task.ID)} {
		req, _ := http.NewRequest(http.MethodGet, h.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, r.StatusCode, b)
		}
		leaks(path, string(b))
	}

	// Closed, the database's files hold every byte it stored.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	files := 0
	err := filepath.WalkDir(h.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("%s holds the key", p)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("walk the data folder: %v (%d files)", err, files)
	}
}

// The agent's model parameters in the host config (model.name,
// temperature, maxTokens) reach the OpenAI-compatible server through the
// real adapter, over the manifest's; the built-in artifact tools are offered
// only when agent.artifactTools is on.
func TestModelParamsAndArtifactToolsFromConfig(t *testing.T) {
	for _, withTools := range []bool{false, true} {
		srv := chatserver.Start(t.Cleanup)
		temp := 0.25
		h := openAIHost(t, srv, "LOOOPY_TEST_PARAMS_KEY", "sk-params-1234", func(cfg *host.Config) {
			cfg.Model.Name, cfg.Model.Temperature, cfg.Model.MaxTokens = "config-model", &temp, 77
			cfg.Agent.ArtifactTools = withTools
		})
		task := send(t, client10(t, h.URL(), ""), context.Background(), &a2a.SendMessageRequest{Message: userMsg("hello")})
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("task %s", task.Status.State)
		}
		reqs := srv.Requests()
		if len(reqs) != 1 {
			t.Fatalf("%d requests", len(reqs))
		}
		b := reqs[0].Body
		if b["model"] != "config-model" || b["temperature"] != 0.25 || b["max_tokens"] != float64(77) {
			t.Errorf("request model %v temperature %v max_tokens %v, want the config's", b["model"], b["temperature"], b["max_tokens"])
		}
		tools, _ := b["tools"].([]any)
		var names []string
		for _, x := range tools {
			f, _ := x.(map[string]any)["function"].(map[string]any)
			names = append(names, f["name"].(string))
		}
		if !withTools && len(names) != 0 {
			t.Errorf("artifact tools off: offered %v", names)
		}
		if withTools && (len(names) != 9 || !strings.Contains(strings.Join(names, ","), "create_artifact")) {
			t.Errorf("artifact tools on: offered %v, want the nine", names)
		}
	}
}
