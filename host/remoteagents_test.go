package host_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/looopy-go/looopy/host"
)

// childAndParent starts two hosts on loopback, each with its own Badger:
// the child serves the researcher agent plugin and requires a key; the
// parent calls the child as its remote agent "researcher" with the key from
// its configuration (set adjusts it).
func childAndParent(t *testing.T, set func(*host.RemoteAgentConfig)) (child, parent *testHost) {
	t.Helper()
	ccfg := baseConfig(t.TempDir())
	ccfg.Plugins.Only = []string{"scripted-model", "researcher", "echo"}
	ccfg.Auth.Enabled = true
	ccfg.Auth.Keys = []host.APIKey{{Key: "parent-key", Principal: "parent-host"}}
	child = startHost(t, ccfg)

	pcfg := baseConfig(t.TempDir())
	pcfg.Plugins.Only = []string{"scripted-model", "echo"}
	pcfg.Auth.Enabled = true
	pcfg.Auth.Keys = []host.APIKey{{Key: "alice-key", Principal: "alice"}}
	ra := host.RemoteAgentConfig{Name: "researcher", URL: child.URL(),
		Headers: map[string]string{"Authorization": "Bearer parent-key"}, AllowPrivateNetwork: true}
	if set != nil {
		set(&ra)
	}
	pcfg.RemoteAgents = []host.RemoteAgentConfig{ra}
	parent = startHost(t, pcfg)
	return child, parent
}

// childTasks lists the tasks the parent host made on the child (not the
// child's own sub-tasks).
func childTasks(t *testing.T, c *a2aclient.Client) []*a2a.Task {
	t.Helper()
	list, err := c.ListTasks(context.Background(), &a2a.ListTasksRequest{IncludeArtifacts: true})
	if err != nil {
		t.Fatalf("list the child's tasks: %v", err)
	}
	var out []*a2a.Task
	for _, tk := range list.Tasks {
		if tk.Metadata["parentTaskId"] == nil {
			out = append(out, tk)
		}
	}
	return out
}

// TestRemoteSubAgent: the parent's model calls a remote Looopy host as the
// sub-agent "researcher" (through its card, the official A2A client and
// the parent's configured credentials). The remote task streams into the
// parent's conversation as a sub-task; the child ran once; the answer and
// the child's usage reach the parent.
func TestRemoteSubAgent(t *testing.T) {
	t.Parallel()
	child, parent := childAndParent(t, nil)
	alice := client10(t, parent.URL(), "alice-key")
	asParent := client10(t, child.URL(), "parent-key")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	m := userMsg("research research owls")
	m.ContextID = "remote-1"
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: m})
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "My notes on owls") {
		t.Fatalf("parent: %s %q", task.Status.State, artifactText(task))
	}
	remote := childTasks(t, asParent)
	if len(remote) != 1 || remote[0].Status.State != a2a.TaskStateCompleted {
		t.Fatalf("tasks on the child: %+v, want one, completed", remote)
	}
	// The child's answer: its own sub-agent's notes (two levels down).
	if !strings.Contains(artifactText(remote[0]), "My notes on owls") {
		t.Fatalf("the child answered %q", artifactText(remote[0]))
	}
	subs, _ := task.Metadata["subtasks"].([]any)
	if len(subs) != 1 {
		t.Fatalf("parent's sub-tasks %v", task.Metadata["subtasks"])
	}
	subID := subs[0].(string)

	// The parent's conversation stream: the remote task as a sub-task.
	resp := openSSE(t, ctx, parent.URL()+"/events/remote-1", "alice-key", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	type ev struct {
		Kind         string         `json:"kind"`
		TaskID       string         `json:"taskId"`
		ParentTaskID string         `json:"parentTaskId"`
		Status       string         `json:"status"`
		Initiator    string         `json:"initiator"`
		ToolName     string         `json:"toolName"`
		Response     string         `json:"response"`
		Content      string         `json:"content"`
		Metadata     map[string]any `json:"metadata"`
		Usage        struct {
			TotalTokens int `json:"totalTokens"`
		} `json:"usage"`
	}
	var got []string
	usage := map[string]int{}
	remoteSeen := ""
	var childResponses []string
	childThoughts := 0
	frames := readFrames(t, resp.Body, func(f frame) bool {
		return f.Event == "task-complete" && strings.Contains(f.Data, `"taskId":"`+string(task.ID)+`"`)
	})
	for _, f := range frames {
		if f.Event == "thought-stream" && strings.Contains(f.Data, `"source":"remote"`) &&
			strings.Contains(f.Data, `"taskId":"`+subID+`"`) {
			childThoughts++ // the remote task's own, forwarded under the sub-task
			continue
		}
		if f.Event == "thought-stream" && strings.Contains(f.Data, `"source":"loop"`) {
			continue // the loop's own thoughts are tested in thoughts_test.go
		}
		var e ev
		if err := json.Unmarshal([]byte(f.Data), &e); err != nil {
			t.Fatal(err)
		}
		who := "parent"
		switch {
		case e.TaskID == subID && e.ParentTaskID == string(task.ID):
			who = "child"
		case e.TaskID != string(task.ID) || e.ParentTaskID != "":
			t.Fatalf("event of task %q parent %q: %s", e.TaskID, e.ParentTaskID, f.Data)
		}
		if id, ok := e.Metadata["remoteTaskId"].(string); ok {
			remoteSeen = id
		}
		s := who + " " + e.Kind
		switch e.Kind {
		case "task-status":
			s += " " + e.Status
		case "task-created":
			s += " " + e.Initiator
		case "tool-start":
			s += " " + e.ToolName
		case "task-complete":
			usage[who] = e.Usage.TotalTokens
		case "content-delta":
			continue
		case "content-complete":
			if who == "child" {
				childResponses = append(childResponses, e.Response+": "+e.Content)
			}
		}
		if len(got) > 0 && got[len(got)-1] == s {
			continue // the remote's working updates, however many
		}
		got = append(got, s)
	}
	want := []string{
		"parent task-created user", "parent task-status working",
		"parent thought-stream", // the model's: "This needs research: ..."
		"parent content-complete",
		"parent tool-start researcher",
		"parent subtask-created",
		"parent task-status waiting-subtask",
		"child task-created agent", "child task-status working",
		// the remote task's two model responses, each whole under its
		// own name, with its working status (the researcher it runs)
		// between them
		"child content-complete",
		"child task-status working",
		"child content-complete",
		"child task-status completed", "child task-complete",
		"parent task-status working",
		"parent tool-complete",
		"parent content-complete",
		"parent task-status completed", "parent task-complete",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if childThoughts == 0 {
		t.Errorf("no thought of the remote task forwarded")
	}
	// Named per response, as the child named its own: the first asks its
	// researcher, the second answers.
	if len(childResponses) != 2 || !strings.Contains(childResponses[0], "1: Asking the researcher about owls") ||
		!strings.Contains(childResponses[1], "2: The researcher says: My notes on owls") ||
		strings.HasPrefix(childResponses[0], ":") {
		t.Errorf("the child's responses as forwarded: %q", childResponses)
	}
	if remoteSeen != string(remote[0].ID) {
		t.Errorf("the sub-task names remote task %q, the child ran %q", remoteSeen, remote[0].ID)
	}
	if usage["child"] == 0 || usage["parent"] <= usage["child"] {
		t.Errorf("usage: child %d, parent %d: want the remote's tokens counted in the parent's", usage["child"], usage["parent"])
	}
}

// Egress: without allowPrivateNetwork a remote agent on a loopback address
// is never reached (its card is refused at the dial), so the tool is not
// offered and the child host runs nothing.
func TestRemoteSubAgentObeysEgress(t *testing.T) {
	t.Parallel()
	child, parent := childAndParent(t, func(ra *host.RemoteAgentConfig) { ra.AllowPrivateNetwork = false })
	alice := client10(t, parent.URL(), "alice-key")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	task := send(t, alice, ctx, &a2a.SendMessageRequest{Message: userMsg("research owls")})
	if !leftOut(artifactText(task)) {
		t.Fatalf("parent answered %q: want the agent left out (unknown tool, or not reachable)", artifactText(task))
	}
	if n := len(childTasks(t, client10(t, child.URL(), "parent-key"))); n != 0 {
		t.Fatalf("the child ran %d tasks", n)
	}
}

// Cancelling the parent task cancels the remote task (CancelTask).
func TestRemoteSubAgentCancelPropagates(t *testing.T) {
	t.Parallel()
	child, parent := childAndParent(t, nil)
	alice := client10(t, parent.URL(), "alice-key")
	asParent := client10(t, child.URL(), "parent-key")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := alice.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("research SLOW 30s"),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	parentTask := r.(*a2a.Task)
	var remote *a2a.Task
	for remote == nil {
		if ctx.Err() != nil {
			t.Fatal("the child never started the remote task")
		}
		for _, tk := range childTasks(t, asParent) {
			if tk.Status.State == a2a.TaskStateWorking {
				remote = tk
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := alice.CancelTask(ctx, &a2a.CancelTaskRequest{ID: parentTask.ID}); err != nil {
		t.Fatalf("cancel the parent: %v", err)
	}
	for {
		tk, err := asParent.GetTask(ctx, &a2a.GetTaskRequest{ID: remote.ID})
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status.State == a2a.TaskStateCanceled {
			break
		}
		if ctx.Err() != nil || tk.Status.State.Terminal() {
			t.Fatalf("remote task after the parent's cancel: %s, want canceled", tk.Status.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// One trace spans both hosts: the parent's call of the remote agent carries
// its traceparent, and the child's turn of the remote task is in the
// parent's trace.
func TestRemoteSubAgentOneTrace(t *testing.T) {
	t.Parallel()
	ccfg := baseConfig(t.TempDir())
	ccfg.Plugins.Only = []string{"scripted-model", "echo"}
	child, childSpans := tracedHost(t, ccfg, nil)
	pcfg := baseConfig(t.TempDir())
	pcfg.Plugins.Only = []string{"scripted-model", "echo"}
	pcfg.RemoteAgents = []host.RemoteAgentConfig{{Name: "researcher", URL: child.URL(), AllowPrivateNetwork: true}}
	parent, parentSpans := tracedHost(t, pcfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	task := send(t, client10(t, parent.URL(), ""), ctx, &a2a.SendMessageRequest{Message: userMsg("research echo owls")})
	remote := childTasks(t, client10(t, child.URL(), ""))
	if task.Status.State != a2a.TaskStateCompleted || len(remote) != 1 {
		t.Fatalf("parent %s, tasks on the child %d", task.Status.State, len(remote))
	}
	traceOf := func(exp *tracetest.InMemoryExporter, taskID string) string {
		for ctx.Err() == nil {
			for _, s := range exp.GetSpans() {
				if id, ok := attrOf(s, "looopy.task_id"); ok && id == taskID && s.Name == "agent.execute" {
					return s.SpanContext.TraceID().String()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no agent.execute span of task %s", taskID)
		return ""
	}
	p, c := traceOf(parentSpans, string(task.ID)), traceOf(childSpans, string(remote[0].ID))
	if p != c {
		t.Fatalf("parent's trace %s, child's %s: want one trace across both hosts", p, c)
	}
}

// A remote agent that dies mid-call is an error result the parent's model
// reads; the parent's task goes on and completes.
func TestRemoteSubAgentDeathIsAnErrorResult(t *testing.T) {
	t.Parallel()
	// The parent tries to reach the dead child again for 2s, then gives
	// up.
	child, parent := childAndParent(t, func(ra *host.RemoteAgentConfig) { ra.Reconnect = host.Duration(2 * time.Second) })
	alice := client10(t, parent.URL(), "alice-key")
	asParent := client10(t, child.URL(), "parent-key")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := alice.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("research SLOW 30s"),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	parentTask := r.(*a2a.Task)
	for started := false; !started; time.Sleep(50 * time.Millisecond) {
		if ctx.Err() != nil {
			t.Fatal("the child never started the remote task")
		}
		for _, tk := range childTasks(t, asParent) {
			started = started || tk.Status.State == a2a.TaskStateWorking
		}
	}
	_ = child.Close() // the child host dies mid-call
	for {
		tk, err := alice.GetTask(ctx, &a2a.GetTaskRequest{ID: parentTask.ID})
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status.State.Terminal() {
			// A host closing cancels its turns: the remote task ends
			// canceled (or its stream breaks first); either is an error
			// result.
			text := artifactText(tk)
			if tk.Status.State != a2a.TaskStateCompleted || !(strings.Contains(text, `agent "researcher" failed`) ||
				strings.Contains(text, `agent "researcher": the remote task ended canceled`)) {
				t.Fatalf("parent after the child died: %s %q, want completed with the error result", tk.Status.State, artifactText(tk))
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the parent never ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The demo's configs (make run-remote) load and validate.
func TestRemoteDemoConfigs(t *testing.T) {
	for _, f := range []string{"child", "parent"} {
		cfg, err := host.LoadConfig("../examples/remote-demo/" + f + ".json")
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	cfg, _ := host.LoadConfig("../examples/remote-demo/parent.json")
	if len(cfg.RemoteAgents) != 1 || cfg.RemoteAgents[0].Name != "researcher" {
		t.Fatalf("parent's remote agents: %+v", cfg.RemoteAgents)
	}
}

// A remote agent whose card offers only A2A 0.3 (a2asrv behind the SDK's
// 0.3 handler, echoing) is called through the official client's 0.3
// transport: the parent's model reads its answer.
func TestRemoteSubAgentOverA2A03(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	card := &a2a.AgentCard{Name: "Echo 0.3", Description: "an A2A 0.3 agent", Version: "1",
		Capabilities: a2a.AgentCapabilities{Streaming: true}, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills:              []a2a.AgentSkill{{ID: "echo", Name: "echo", Description: "says what it was told", Tags: []string{"echo"}}},
		SupportedInterfaces: []*a2a.AgentInterface{{URL: srv.URL + "/rpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version}}}
	mux.Handle("/rpc", a2av0.NewJSONRPCHandler(a2asrv.NewHandler(refExecutor{})))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewAgentCardHandler(a2av0.NewStaticAgentCardProducer(card)))

	pcfg := baseConfig(t.TempDir())
	pcfg.Plugins.Only = []string{"scripted-model", "echo"}
	pcfg.RemoteAgents = []host.RemoteAgentConfig{{Name: "researcher", URL: srv.URL, AllowPrivateNetwork: true}}
	parent := startHost(t, pcfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	task := send(t, client10(t, parent.URL(), ""), ctx, &a2a.SendMessageRequest{Message: userMsg("research research owls")})
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), "You said: ") {
		t.Fatalf("parent: %s %q; want the 0.3 agent's echo in the answer", task.Status.State, artifactText(task))
	}
}
