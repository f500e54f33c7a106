package host_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/plugins/author"
)

// The scripted model's user rules file adds rules on top of the demo,
// survives the manifest the build writes, and is read again when edited.
func TestScriptedModelUserRulesOnTopOfTheDemo(t *testing.T) {
	t.Parallel()
	pluginDir, userDir := t.TempDir(), t.TempDir()
	for _, name := range []string{"scripted-model", "calculator"} {
		if _, err := author.Install(filepath.Join("../examples/plugins", name), pluginDir); err != nil {
			t.Fatal(err)
		}
	}
	// Point the installed manifest's rules file at this test's folder (the
	// built one names the example's own user/ folder).
	mf := filepath.Join(pluginDir, "scripted-model", "plugin.json")
	b, err := os.ReadFile(mf)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(userDir, "rules.json")
	if m["config"].(map[string]any)["rulesFile"] == nil {
		t.Fatal("the built manifest names no rulesFile")
	}
	m["config"] = map[string]any{"rulesFile": rulesFile}
	m["capabilities"].(map[string]any)["allowedPaths"] = []any{map[string]any{"path": userDir, "readOnly": true}}
	b, _ = json.Marshal(m)
	if err := os.WriteFile(mf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(answer string) {
		rules := `{"rules":[{"name":"ping","match":"(?i)^ping$","steps":[{"text":"` + answer + `"}]}]}`
		// A new modification time, whatever the clock's resolution.
		if err := os.WriteFile(rulesFile, []byte(rules), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.Chtimes(rulesFile, time.Now(), time.Now().Add(time.Duration(len(answer))*time.Second))
	}
	write("pong")

	cfg := baseConfig(t.TempDir())
	cfg.PluginDir = pluginDir
	cfg.Plugins.Only = nil
	cfg.Plugins.NoWatch = true
	cfg.Plugins.PathRoots = []string{userDir}
	th := startHost(t, cfg)
	c := client10(t, th.URL(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ask := func(text string) string {
		task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg(text)})
		if task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("%q: task %s: %+v", text, task.Status.State, task.Status.Message)
		}
		return artifactText(task)
	}
	if got := ask("ping"); !strings.Contains(got, "pong") {
		t.Errorf("ping answered %q, want the user rule's pong", got)
	}
	if got := ask("calc 2+2"); !strings.Contains(got, "4") {
		t.Errorf("calc 2+2 answered %q: the demo's rules must still play", got)
	}
	write("pong, edited")
	if got := ask("ping"); !strings.Contains(got, "pong, edited") {
		t.Errorf("after the edit ping answered %q", got)
	}
	// A broken rules file fails the call clearly.
	if err := os.WriteFile(rulesFile, []byte(`{"rules":[{"match":"("}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(rulesFile, time.Now(), time.Now().Add(time.Hour))
	task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("ping")})
	if task.Status.State != a2a.TaskStateFailed || task.Status.Message == nil || !strings.Contains(fmtMsg(task.Status.Message), "rules.json") {
		t.Errorf("broken rules file: %s %+v", task.Status.State, task.Status.Message)
	}
}

func fmtMsg(m *a2a.Message) string {
	var sb strings.Builder
	for _, p := range m.Parts {
		sb.WriteString(p.Text())
	}
	return sb.String()
}
