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

	"github.com/looopy-go/looopy/host"
)

// deepScript: "deep <text>" asks the researcher agent plugin, whose model
// asks the remote agent "child" for <text>.
const deepScript = `{"rules": [
 {"name": "deep", "match": "(?i)^deep\\s+(.+)$", "steps": [
  {"toolCall": {"name": "researcher", "arguments": {"prompt": "remote $1"}}},
  {"text": "Deep: {{lastToolResult}}"}]},
 {"name": "remote", "match": "(?i)briefly: remote (.+)$", "steps": [
  {"toolCall": {"name": "child", "arguments": {"prompt": "$1"}}},
  {"text": "Child said: {{lastToolResult}}"}]}]}`

// A credential asked three levels down: the parent's researcher agent
// plugin calls the remote agent "child", whose own researcher's plugin
// (authed-api) needs a credential. The parent pauses auth-required with
// the request relayed up (route: the researcher's sub-task, and below it
// the remote task); the client's credential, sent on the parent task,
// goes down through the researcher to the remote task and on to the
// plugin that asked, and every level completes with its answer. The
// parent's researcher sub-task records the pause on its own stream.
func TestRoutedAuthThroughLocalToRemote(t *testing.T) {
	t.Parallel()
	ccfg, _ := localRoutingHost(t)
	ccfg.Auth.Keys = append(ccfg.Auth.Keys, host.APIKey{Key: "parent-key", Principal: "parent-host"})
	child := startHost(t, ccfg)

	root := t.TempDir()
	plugins := filepath.Join(root, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	grantedPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(deepScript)}, nil)
	copyPlugin(t, plugins, "researcher", nil)
	pcfg := baseConfig(filepath.Join(root, "data"))
	pcfg.PluginDir = plugins
	pcfg.Plugins.Only = []string{"scripted-model", "researcher"}
	pcfg.Plugins.NoWatch = true
	pcfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: "alice-key", Principal: "alice"}}}
	pcfg.RemoteAgents = []host.RemoteAgentConfig{{Name: "child", URL: child.URL(),
		Headers: map[string]string{"Authorization": "Bearer parent-key"}, AllowPrivateNetwork: true}}
	parent := startHost(t, pcfg)
	alice := client10(t, parent.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("deep local profile please")})
	if task.Status.State != a2a.TaskStateAuthRequired {
		t.Fatalf("parent is %s %q, want auth-required", task.Status.State, artifactText(task))
	}
	reqs := requestsOf(t, task)
	auth, _ := reqs[0]["auth"].(map[string]any)
	route, _ := reqs[0]["route"].(map[string]any)
	inner, _ := route["inner"].(map[string]any)
	if len(reqs) != 1 || reqs[0]["inputType"] != "auth" || auth["provider"] != "example-oauth" ||
		route["agentId"] != "researcher" || inner["agentId"] != "child" || inner["remoteTaskId"] == nil || inner["inner"] != nil {
		t.Fatalf("requests = %v; want the child's credential request relayed by the researcher", reqs)
	}
	const token = "deep-token-4a1c"
	done := send(t, alice, ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID,
		map[string]any{"inputId": reqs[0]["inputId"], "credential": map[string]any{"token": token}})})
	text := artifactText(done)
	if done.Status.State != a2a.TaskStateCompleted || !strings.Contains(text, "Deep: Child said:") ||
		!strings.Contains(text, digest(token)) || strings.Contains(text, token) {
		t.Fatalf("parent after the credential: %s %q", done.Status.State, text)
	}
	asParent := client10(t, child.URL(), "parent-key")
	ct, err := asParent.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(inner["remoteTaskId"].(string))})
	if err != nil || ct.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the child's task: %+v, %v; want completed", ct, err)
	}
}
