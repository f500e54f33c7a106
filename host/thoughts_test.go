package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
)

// thoughtsHost serves alice, bob and an admin, records detailed thoughts
// and the loop's debug thoughts, and shows brief ones by default.
func thoughtsHost(t *testing.T) *testHost {
	cfg := baseConfig(t.TempDir())
	cfg.Auth.Enabled = true
	cfg.Auth.Keys = []host.APIKey{{Key: "alice-key", Principal: "alice"}, {Key: "bob-key", Principal: "bob"}}
	cfg.Admin.Token = "root-token"
	cfg.Thoughts = host.ThoughtsConfig{Verbosity: "brief", Record: "detailed", Debug: true}
	return startHost(t, cfg)
}

type thoughtEvent struct {
	Kind        string         `json:"kind"`
	TaskID      string         `json:"taskId"`
	ThoughtID   string         `json:"thoughtId"`
	ThoughtType string         `json:"thoughtType"`
	Verbosity   string         `json:"verbosity"`
	Content     string         `json:"content"`
	Index       int            `json:"index"`
	Metadata    map[string]any `json:"metadata"`
	Stage       string         `json:"stage"`
	Reasoning   string         `json:"reasoning"`
}

// contextEvents reads a conversation's stream from its start until the
// turns-th task-complete.
func contextEvents(t *testing.T, url, token string, turns int) (frames []frame, evs []thoughtEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp := openSSE(t, ctx, url, token, "")
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	done := 0
	frames = readFrames(t, resp.Body, func(f frame) bool {
		if f.Event == string(loop.KindTaskComplete) {
			done++
		}
		return done == turns
	})
	if done != turns {
		t.Fatalf("%s ended after %d of %d turns", url, done, turns)
	}
	for _, f := range frames {
		var e thoughtEvent
		if err := json.Unmarshal([]byte(f.Data), &e); err != nil {
			t.Fatalf("frame %q: %v", f.Data, err)
		}
		evs = append(evs, e)
	}
	return frames, evs
}

func onlyThoughts(evs []thoughtEvent) []thoughtEvent {
	var out []thoughtEvent
	for _, e := range evs {
		if e.Kind == string(loop.KindThoughtStream) {
			out = append(out, e)
		}
	}
	return out
}

func thoughtSummary(ts []thoughtEvent) string {
	var sb strings.Builder
	for _, th := range ts {
		fmt.Fprintf(&sb, "\n  %s/%s #%d %s: %q", th.ThoughtType, th.Verbosity, th.Index, th.ThoughtID, th.Content)
	}
	return sb.String()
}

// Each verbosity level through the real server: the conversation (a tool
// call, then a model that reasons) read on /events at brief, normal,
// detailed, none and the operator's default (brief here).
func TestThoughtVerbosityOnEvents(t *testing.T) {
	t.Parallel()
	h := thoughtsHost(t)
	c := client10(t, h.URL(), "alice-key")
	ctx := context.Background()
	calc := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("calc 2+2")})
	msg := userMsg("think about rain")
	msg.ContextID = calc.ContextID
	think := send(t, c, ctx, &a2a.SendMessageRequest{Message: msg})
	if calc.Status.State != a2a.TaskStateCompleted || think.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("turns ended %s and %s", calc.Status.State, think.Status.State)
	}
	base := h.URL() + "/events/" + calc.ContextID

	byLevel := map[string][]thoughtEvent{}
	for _, level := range []string{"brief", "normal", "detailed", "none", ""} {
		url := base
		if level != "" {
			url += "?verbosity=" + level
		}
		frames, evs := contextEvents(t, url, "alice-key", 2)
		for _, f := range frames {
			if strings.HasPrefix(f.Event, "internal:") || strings.Contains(f.Data, "internal:") {
				t.Fatalf("an internal event on alice's /events: %s %s", f.Event, f.Data)
			}
		}
		ts := onlyThoughts(evs)
		byLevel[level] = ts
		limit := level
		if limit == "" {
			limit = "brief" // the operator's default in thoughtsHost
		}
		for _, th := range ts {
			if loop.VerbosityRank(th.Verbosity) > loop.VerbosityRank(limit) || loop.VerbosityRank(th.Verbosity) < 1 {
				t.Fatalf("verbosity %q shows a %s thought: %+v", level, th.Verbosity, th)
			}
			if th.ThoughtID == "" || th.Content == "" {
				t.Fatalf("thought without id or content: %+v", th)
			}
		}
	}
	if len(byLevel["none"]) != 0 {
		t.Fatalf("verbosity none shows thoughts:%s", thoughtSummary(byLevel["none"]))
	}
	if fmt.Sprint(byLevel[""]) != fmt.Sprint(byLevel["brief"]) {
		t.Fatalf("the default is not the operator's brief:%s\nvs%s", thoughtSummary(byLevel[""]), thoughtSummary(byLevel["brief"]))
	}
	// Each level shows what the one below shows, and more.
	if !(len(byLevel["brief"]) < len(byLevel["normal"]) && len(byLevel["normal"]) < len(byLevel["detailed"])) {
		t.Fatalf("levels do not grow: brief %d, normal %d, detailed %d", len(byLevel["brief"]), len(byLevel["normal"]), len(byLevel["detailed"]))
	}
	has := func(level, typ, contains string) thoughtEvent {
		t.Helper()
		for _, th := range byLevel[level] {
			if th.ThoughtType == typ && strings.Contains(th.Content, contains) {
				return th
			}
		}
		t.Fatalf("no %s thought saying %q at %s:%s", typ, contains, level, thoughtSummary(byLevel[level]))
		return thoughtEvent{}
	}
	lacks := func(level, typ string) {
		t.Helper()
		for _, th := range byLevel[level] {
			if th.ThoughtType == typ {
				t.Fatalf("a %s thought at %s: %+v", typ, level, th)
			}
		}
	}
	// brief: the plan before each model call and the stop decision.
	has("brief", loop.ThoughtPlanning, "step 1")
	has("brief", loop.ThoughtPlanning, "results of 1 tool call")
	has("brief", loop.ThoughtDecision, "Stopping")
	lacks("brief", loop.ThoughtReasoning)
	lacks("brief", loop.ThoughtReflection)
	// normal: the model's reasoning, the tool decision, the reflection.
	r := has("normal", loop.ThoughtReasoning, "rain")
	if r.Metadata["source"] != "model" {
		t.Fatalf("reasoning %+v", r)
	}
	has("normal", loop.ThoughtDecision, "Running calc")
	has("normal", loop.ThoughtReflection, "1 tool call succeeded")
	lacks("normal", loop.ThoughtStrategy)
	lacks("normal", loop.ThoughtObservation)
	// detailed: the strategy and what each model response asked for.
	has("detailed", loop.ThoughtStrategy, "iterations")
	has("detailed", loop.ThoughtObservation, "asked for 1 tool call: calc")
	// Indexes count the thoughts of each turn from 0, without gaps (at
	// detailed every thought the turn recorded is shown); ids are unique
	// but for the chunks of one reasoning.
	idx := map[string]int{}
	ids := map[string]string{}
	for _, th := range byLevel["detailed"] {
		if th.Index != idx[th.TaskID] {
			t.Fatalf("task %s: thought index %d, want %d:%s", th.TaskID, th.Index, idx[th.TaskID], thoughtSummary(byLevel["detailed"]))
		}
		idx[th.TaskID]++
		if typ, seen := ids[th.ThoughtID]; seen && (typ != loop.ThoughtReasoning || th.ThoughtType != loop.ThoughtReasoning) {
			t.Fatalf("thought id %s reused", th.ThoughtID)
		}
		ids[th.ThoughtID] = th.ThoughtType
	}

	// A level that is not one is refused, naming the choices.
	resp, err := httpClient("alice-key").Get(base + "?verbosity=chatty")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "brief, normal, detailed") {
		t.Fatalf("verbosity=chatty: %d %s", resp.StatusCode, b)
	}
}

// A2A streams carry thoughts when the message asks (metadata
// thoughtVerbosity), as working status updates; otherwise none.
func TestThoughtsOnA2AStreams(t *testing.T) {
	t.Parallel()
	h := thoughtsHost(t)
	c := client10(t, h.URL(), "alice-key")
	stream := func(md map[string]any) (thoughts []*a2a.TaskStatusUpdateEvent, all []a2a.Event) {
		msg := userMsg("calc 2+2")
		msg.Metadata = md
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: msg}) {
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			all = append(all, ev)
			if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok && su.Metadata["thought"] != nil {
				thoughts = append(thoughts, su)
			}
		}
		return thoughts, all
	}
	if th, all := stream(nil); len(th) != 0 || len(all) == 0 {
		t.Fatalf("a stream that asked for no thoughts got %d (of %d events)", len(th), len(all))
	}
	brief, _ := stream(map[string]any{"thoughtVerbosity": "brief"})
	detailed, all := stream(map[string]any{"thoughtVerbosity": "detailed"})
	if len(brief) == 0 || len(detailed) <= len(brief) {
		t.Fatalf("brief %d thoughts, detailed %d", len(brief), len(detailed))
	}
	for _, su := range brief {
		th := su.Metadata["thought"].(map[string]any)
		if th["verbosity"] != "brief" || su.Status.State != a2a.TaskStateWorking || su.Status.Message == nil ||
			su.Status.Message.Parts[0].Text() == "" || th["thoughtId"] == "" {
			t.Fatalf("brief thought as %+v", su)
		}
	}
	types := map[any]bool{}
	for _, su := range detailed {
		types[su.Metadata["thought"].(map[string]any)["thoughtType"]] = true
	}
	for _, typ := range []string{"planning", "decision", "reflection", "observation", "strategy"} {
		if !types[typ] {
			t.Fatalf("no %s thought on the detailed A2A stream: %v", typ, types)
		}
	}
	// The stream still ends with the final status.
	last, ok := all[len(all)-1].(*a2a.TaskStatusUpdateEvent)
	if !ok || last.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("last event %T %+v", all[len(all)-1], all[len(all)-1])
	}

	// A2A 0.3: the same choice in the message's metadata.
	body := `{"jsonrpc":"2.0","id":7,"method":"message/stream","params":{"message":{"kind":"message","messageId":"m03","role":"user",
		"parts":[{"kind":"text","text":"calc 3+3"}],"metadata":{"thoughtVerbosity":"normal"}}}}`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp := openSSE(t, ctx, h.URL()+"/a2a/v0.3", "alice-key", body, "Content-Type", "application/json")
	n := 0
	for _, f := range readFrames(t, resp.Body, nil) {
		var r struct {
			Result struct {
				Kind     string         `json:"kind"`
				Final    bool           `json:"final"`
				Metadata map[string]any `json:"metadata"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(f.Data), &r); err != nil {
			t.Fatal(err)
		}
		if th, ok := r.Result.Metadata["thought"].(map[string]any); ok {
			n++
			if r.Result.Kind != "status-update" || r.Result.Final || loop.VerbosityRank(th["verbosity"].(string)) > 2 {
				t.Fatalf("0.3 thought frame %s", f.Data)
			}
		}
	}
	if n == 0 {
		t.Fatal("no thought on the 0.3 stream that asked for normal")
	}

	// A level that is not one is an invalid param.
	bad := userMsg("calc 1+1")
	bad.Metadata = map[string]any{"thoughtVerbosity": 3}
	if _, err := c.SendMessage(context.Background(), &a2a.SendMessageRequest{Message: bad}); err == nil ||
		!strings.Contains(err.Error(), "thoughtVerbosity") {
		t.Fatalf("thoughtVerbosity 3: %v", err)
	}
}

// Attack: internal:thought-process is the admin's. It is recorded (the
// admin's stream shows it) and alice never gets it: not on /events at any
// level or when she asks for the kind, not on her A2A stream (1.0 and
// resubscribed), not in GetTask; bob gets nothing of alice's; alice's key
// opens no admin stream.
func TestDebugThoughtsOnlyForAdmin(t *testing.T) {
	t.Parallel()
	h := thoughtsHost(t)
	c := client10(t, h.URL(), "alice-key")
	var streamed strings.Builder
	msg := userMsg("calc 5*5")
	msg.Metadata = map[string]any{"thoughtVerbosity": "detailed"}
	var taskID a2a.TaskID
	var contextID string
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: msg}) {
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(ev)
		streamed.Write(b)
		if tk, ok := ev.(*a2a.Task); ok {
			taskID, contextID = tk.ID, tk.ContextID
		}
	}
	if taskID == "" {
		t.Fatal("no task on the stream")
	}

	// The admin: the context id as the admin API lists it.
	req, _ := http.NewRequest("GET", h.URL()+"/admin/tasks/"+string(taskID), nil)
	req.Header.Set("Authorization", "Bearer root-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var at struct {
		Task struct {
			ContextID string `json:"contextId"`
		} `json:"task"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&at)
	resp.Body.Close()
	if at.Task.ContextID == "" {
		t.Fatal("admin task without context")
	}
	adminURL := h.URL() + "/admin/events/" + at.Task.ContextID
	_, adminEvs := contextEvents(t, adminURL, "root-token", 1)
	var stages []string
	var debugTexts []string
	for _, e := range adminEvs {
		if e.Kind == string(loop.KindInternalThoughtProcess) {
			stages = append(stages, e.Stage)
			debugTexts = append(debugTexts, e.Reasoning)
		}
	}
	for _, want := range []string{"pre-llm", "post-llm", "tools", "post-tools", "stop"} {
		if !slices.Contains(stages, want) {
			t.Fatalf("the admin's stream lacks the %s debug thought: %v", want, stages)
		}
	}
	debugText := "calling the model with" // the pre-llm reasoning
	if !slices.ContainsFunc(debugTexts, func(s string) bool { return strings.Contains(s, debugText) }) {
		t.Fatalf("debug reasoning %v", debugTexts)
	}
	leaked := func(where, s string) {
		t.Helper()
		if strings.Contains(s, "thought-process") || strings.Contains(s, debugText) || strings.Contains(s, "pre-llm") {
			t.Fatalf("%s carries the admin's debug thoughts: %s", where, s)
		}
	}
	leaked("alice's A2A stream", streamed.String())

	// alice on /events, every level.
	for _, level := range []string{"detailed", "normal", "brief", ""} {
		frames, _ := contextEvents(t, h.URL()+"/events/"+contextID+"?verbosity="+level, "alice-key", 1)
		var all strings.Builder
		for _, f := range frames {
			all.WriteString(f.Event + " " + f.Data + "\n")
		}
		leaked("alice's /events at "+level, all.String())
	}
	// Asking for the kind is refused.
	for _, q := range []string{"?kinds=internal:thought-process", "?kinds=thought-stream,internal:thought-process"} {
		r, err := httpClient("alice-key").Get(h.URL() + "/events/" + contextID + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 400 {
			t.Fatalf("alice asking %s: %d %s", q, r.StatusCode, b)
		}
	}
	// GetTask, with its whole history.
	hl := 1000
	task, err := c.GetTask(context.Background(), &a2a.GetTaskRequest{ID: taskID, HistoryLength: &hl})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(task)
	leaked("GetTask", string(b))
	// A resubscription from the start of the log.
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":%q}}`, taskID)
	rs := openSSE(t, rctx, h.URL(), "alice-key", body, "Content-Type", "application/json", "A2A-Version", "1.0", "Last-Event-ID", "1")
	var re strings.Builder
	for _, f := range readFrames(t, rs.Body, nil) {
		re.WriteString(f.Data)
	}
	if !strings.Contains(re.String(), `"thought"`) {
		t.Fatalf("the resubscribed stream lost the thoughts alice asked for: %s", re.String())
	}
	leaked("alice's resubscribed stream", re.String())

	// alice's key opens no admin stream; bob cannot read alice's events.
	for _, tc := range []struct{ url, key string }{{adminURL, "alice-key"}, {adminURL, ""}, {h.URL() + "/events/" + contextID, "bob-key"}} {
		r, err := httpClient(tc.key).Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		r.Body.Close()
		if r.StatusCode == 200 {
			t.Fatalf("%s with %q: 200 %s", tc.url, tc.key, b)
		}
		leaked(tc.url+" with "+tc.key, string(b))
	}
}
