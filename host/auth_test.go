package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
)

// authScript: "profile" calls authed-api's profile_read, "whoami" its
// whoami; each then quotes the tool's result.
const authScript = `{"rules": [
 {"name": "profile", "match": "(?i)^profile", "steps": [
  {"toolCall": {"name": "profile_read", "arguments": {}}},
  {"text": "Profile: {{lastToolResult}}"}]},
 {"name": "whoami", "match": "(?i)^whoami", "steps": [
  {"toolCall": {"name": "whoami", "arguments": {}}},
  {"text": "Whoami: {{lastToolResult}}"}]}]}`

const aliceKey = "alice-api-key-5d1c0e7a"

// authHost serves the scripted model and authed-api with auth on (alice's
// key); callerAuth lists the plugins granted the caller's credentials.
func authHost(t *testing.T, callerAuth []string) host.Config {
	t.Helper()
	root := t.TempDir()
	plugins := filepath.Join(root, "plugins")
	grantedPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(authScript)}, nil)
	copyPlugin(t, plugins, "authed-api", nil)
	cfg := baseConfig(filepath.Join(root, "data"))
	cfg.PluginDir = plugins
	cfg.Plugins.Only = []string{"scripted-model", "authed-api"}
	cfg.Plugins.NoWatch = true
	cfg.Plugins.CallerAuth = callerAuth
	cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: aliceKey, Principal: "alice"}}}
	cfg.LogFormat = "json"
	return cfg
}

// digest is what authed-api says of a token: its sha256's first 12 hex
// digits.
func digest(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])[:12]
}

func pausedForAuth(t *testing.T, task *a2a.Task) map[string]any {
	t.Helper()
	if task.Status.State != a2a.TaskStateAuthRequired {
		t.Fatalf("task is %s, want auth-required", task.Status.State)
	}
	reqs := requestsOf(t, task)
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1: %v", len(reqs), reqs)
	}
	r := reqs[0]
	auth, _ := r["auth"].(map[string]any)
	call, _ := r["call"].(map[string]any)
	if r["inputType"] != "auth" || r["requireUser"] != true || auth["provider"] != "example-oauth" ||
		auth["holder"] != "plugin:authed-api" || auth["authUrl"] == nil || fmt.Sprint(auth["scopes"]) != "[profile:read]" ||
		call["name"] != "profile_read" {
		t.Fatalf("request = %v", r)
	}
	return r
}

// A plugin that needs a credential pauses its task in auth-required (text
// and data); answers that do not fit are refused and change nothing; the
// credential supplied on the same task reaches the plugin (it answers with
// the token's digest), auth-completed follows on both streams and the task
// completes. Another task of the same client does not get it. The token is
// in no Badger file, no log line, no span and no event (A2A 1.0, official
// client).
func TestAuthRequiredRoundTrip(t *testing.T) {
	t.Parallel()
	token := fmt.Sprintf("oauth-token-%d-7c41e9b2", time.Now().UnixNano())
	cfg := authHost(t, nil)
	var logs syncBuffer
	h, exp := tracedHost(t, cfg, &logs)
	c := client10(t, h.URL(), aliceKey)
	ctx := context.Background()

	task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("profile please")})
	r := pausedForAuth(t, task)
	if txt := task.Status.Message.Parts[0].Text(); !strings.Contains(txt, "example-oauth") {
		t.Fatalf("status text %q does not say what is needed", txt)
	}
	id := r["inputId"].(string)

	bad := []map[string]any{
		{"inputId": id},
		{"inputId": id, "credential": map[string]any{"token": ""}},
		{"inputId": id, "credential": map[string]any{"token": "x", "tokenType": "Basic"}},
		{"inputId": id, "credential": map[string]any{"token": "x", "extra": 1}},
		{"inputId": id, "decision": "approve", "credential": map[string]any{"token": "x"}},
		{"inputId": "auth:nope", "credential": map[string]any{"token": "x"}},
	}
	for _, b := range bad {
		_, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(task.ID, b)})
		if err == nil || !strings.Contains(err.Error(), "invalid") && !strings.Contains(err.Error(), "-32602") {
			t.Fatalf("answer %v: err = %v, want invalid params", b, err)
		}
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	pausedForAuth(t, got)

	// Another task asks for its own: the first task's credential is not
	// handed to it.
	other := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("profile again")})

	evs := stream(t, c, answerMsg(task.ID, map[string]any{"inputId": id, "credential": map[string]any{"token": token, "tokenType": "Bearer"}}))
	var completedAuth bool
	var done *a2a.TaskStatusUpdateEvent
	for _, ev := range evs {
		if su, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
			if su.Status.State == a2a.TaskStateWorking && su.Metadata["activity"] == "auth-completed" && su.Metadata["inputId"] == id {
				completedAuth = true
			}
			if su.Status.State.Terminal() {
				done = su
			}
		}
	}
	if !completedAuth || done == nil || done.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("answer stream: auth-completed %v, end %+v: %+v", completedAuth, done, evs)
	}
	final, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256 " + digest(token); !strings.Contains(artifactText(final), want) {
		t.Fatalf("answer %q: the plugin did not get the token (%s)", artifactText(final), want)
	}
	o, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: other.ID})
	if err != nil {
		t.Fatal(err)
	}
	pausedForAuth(t, o)

	// Looopy's stream: auth-required, then auth-completed.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp := openSSE(t, sctx, h.URL()+"/events/"+string(task.ContextID)+"?kinds=auth-required,auth-completed", aliceKey, "")
	frames := readFrames(t, resp.Body, func(f frame) bool { return f.Event == "auth-completed" })
	if len(frames) < 2 || frames[0].Event != "auth-required" || !strings.Contains(frames[0].Data, `"provider":"example-oauth"`) ||
		!strings.Contains(frames[0].Data, `"authId":"`+id+`"`) || frames[len(frames)-1].Event != "auth-completed" ||
		!strings.Contains(frames[len(frames)-1].Data, `"success":true`) {
		t.Fatalf("/events frames = %+v", frames)
	}
	var events strings.Builder
	for _, f := range frames {
		events.WriteString(f.Data)
	}

	// Nowhere: no event, log line, span or Badger file holds the token.
	if strings.Contains(events.String(), token) {
		t.Fatal("an event carries the token")
	}
	// (The in-memory exporter forgets its spans when the host closes.)
	spans := spanText(exp.GetSpans())
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), token) {
		t.Fatal("the log carries the token")
	}
	if logs.String() == "" {
		t.Fatal("no log was written: the log check checks nothing")
	}
	if strings.Contains(spans, token) || !strings.Contains(spans, "profile_read") {
		t.Fatalf("spans carry the token, or no span of the call was exported (%d bytes)", len(spans))
	}
	// The search finds what the store does keep (the request's provider and
	// the task's id), so a miss of the token means something.
	assertInFiles(t, cfg.DataDir, []byte("example-oauth"))
	assertInFiles(t, cfg.DataDir, []byte(task.ID))
	assertNotInFiles(t, cfg.DataDir, []byte(token))
}

// assertInFiles fails unless some file under dir holds want.
func assertInFiles(t *testing.T, dir string, want []byte) {
	t.Helper()
	found := false
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || found {
			return err
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, want) {
			found = true
		}
		return nil
	})
	if !found {
		t.Fatalf("no file under %s holds %q: the search for the token would miss it too", dir, want)
	}
}

// spanText is everything an exported span says: names, attributes, events,
// status.
func spanText(ss tracetest.SpanStubs) string {
	var sb strings.Builder
	for _, s := range ss {
		sb.WriteString(s.Name)
		for _, a := range s.Attributes {
			fmt.Fprintf(&sb, " %s=%s", a.Key, a.Value.String())
		}
		for _, e := range s.Events {
			sb.WriteString(" " + e.Name)
			for _, a := range e.Attributes {
				fmt.Fprintf(&sb, " %s=%s", a.Key, a.Value.String())
			}
		}
		sb.WriteString(" " + s.Status.Description + "\n")
	}
	return sb.String()
}

// assertNotInFiles fails when any file under dir holds secret (Badger's
// tables, value logs, manifest; artifacts).
func assertNotInFiles(t *testing.T, dir string, secret []byte) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		if bytes.Contains(b, secret) {
			t.Errorf("%s holds the credential", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no file under %s: the check checks nothing", dir)
	}
}

// The caller's credentials reach a plugin the operator granted them
// (principal and token), and an ungranted plugin asking for them gets a
// clear refusal, never the token.
func TestCallerAuthOnlyToGrantedPlugins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		granted []string
		want    string
	}{
		{"granted", []string{"authed-*"}, "caller alice, token sha256 " + digest(aliceKey)},
		{"ungranted", []string{"some-other-plugin"}, `not granted the caller's credentials`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHost(t, authHost(t, tc.granted))
			c := client10(t, h.URL(), aliceKey)
			task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("whoami")})
			if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(artifactText(task), tc.want) {
				t.Fatalf("whoami: %s %q, want %q", task.Status.State, artifactText(task), tc.want)
			}
			if tc.name == "ungranted" && strings.Contains(artifactText(task), digest(aliceKey)) {
				t.Fatal("an ungranted plugin got the caller's token")
			}
		})
	}
}

// The same pause and credential with the official 0.3 client.
func TestAuthRequiredA2A03(t *testing.T) {
	t.Parallel()
	token := "zero-three-token-4b7f21"
	h := startHost(t, authHost(t, nil))
	c := client03For(t, h.URL(), aliceKey)
	ctx := context.Background()
	res, err := c.SendMessage(ctx, msg03("profile over 0.3", ""))
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a03.Task)
	if !ok || task.Status.State != a2a03.TaskStateAuthRequired || task.Status.Message == nil {
		t.Fatalf("0.3 send = %#v", res)
	}
	var inputID string
	for _, p := range task.Status.Message.Parts {
		if dp, ok := p.(a2a03.DataPart); ok && dp.Metadata[loop.InteractionURI] == "requests" {
			reqs, _ := dp.Data["requests"].([]any)
			if len(reqs) == 1 && reqs[0].(map[string]any)["inputType"] == "auth" {
				inputID, _ = reqs[0].(map[string]any)["inputId"].(string)
			}
		}
	}
	if inputID == "" {
		t.Fatalf("0.3 pause has no auth request: %+v", task.Status.Message)
	}
	m := a2a03.NewMessage(a2a03.MessageRoleUser, a2a03.DataPart{
		Data:     map[string]any{"responses": []any{map[string]any{"inputId": inputID, "credential": map[string]any{"token": token}}}},
		Metadata: map[string]any{loop.InteractionURI: "responses"}})
	m.TaskID = task.ID
	var last a2a03.Event
	var completedAuth bool
	for ev, err := range c.SendStreamingMessage(ctx, &a2a03.MessageSendParams{Message: m}) {
		if err != nil {
			t.Fatal(err)
		}
		if su, ok := ev.(*a2a03.TaskStatusUpdateEvent); ok && su.Metadata["activity"] == "auth-completed" {
			completedAuth = true
		}
		last = ev
	}
	su, ok := last.(*a2a03.TaskStatusUpdateEvent)
	if !ok || !completedAuth || su.Status.State != a2a03.TaskStateCompleted {
		t.Fatalf("0.3 answer stream ends with %#v (auth-completed %v)", last, completedAuth)
	}
	got, err := c.GetTask(ctx, &a2a03.TaskQueryParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text03(got), "sha256 "+digest(token)) {
		t.Fatalf("0.3 answer %q: the plugin did not get the token", text03(got))
	}
}
