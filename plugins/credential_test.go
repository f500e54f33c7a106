package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// authedAPI loads the authed-api example (real .wasm) under name into a
// registry of its own with policy callerAuth.
func authedAPI(t *testing.T, name string, callerAuth []string) *Registry {
	t.Helper()
	wasm := filepath.Join("..", "examples", "plugins", "authed-api", "authed-api.wasm")
	r := newRegistry(t, Config{Policy: Policy{CallerAuth: callerAuth}})
	if _, err := r.Load(context.Background(), install(t, t.TempDir(), name, wasm, func(m map[string]any) {
		caps(m)["hostFunctions"] = []string{"credential"}
	})); err != nil {
		t.Fatalf("load authed-api (run make plugins-go): %v", err)
	}
	return r
}

func tokenDigest(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])[:12]
}

// A credential supplied for one plugin and one task reaches that plugin in
// that task only: another plugin, or the same plugin in another task, is
// told it is not there (the call ends asking for it). A plugin not granted
// the caller's credentials is refused them, clearly; a granted one gets
// them, and asks again when the turn lost them (resumed by the host).
func TestCredentialReachesOnlyItsPluginAndTask(t *testing.T) {
	const token = "tok-only-for-authed-api-3a9c"
	ctx := context.Background()
	creds := loop.NewCredentials()
	creds.Put("task-1", "plugin:authed-api", "example-oauth", token, time.Minute)
	mine := authedAPI(t, "authed-api", []string{"authed-api"})
	other := authedAPI(t, "other", nil)
	call := loop.ToolCall{ID: "c1", Name: "profile_read", Arguments: []byte(`{}`)}
	env := func(task string, auth *loop.AuthContext) *loop.ToolEnv {
		return &loop.ToolEnv{ContextID: "ctx", TaskID: task, CallID: "c1", Credentials: creds, Auth: auth}
	}

	res, err := mine.Call(ctx, call, env("task-1", nil))
	if err != nil || res.IsError || !strings.Contains(res.Content, tokenDigest(token)) || strings.Contains(res.Content, token) {
		t.Fatalf("the plugin it was supplied for: %+v, %v", res, err)
	}
	for name, tc := range map[string]struct {
		r    *Registry
		task string
	}{"another plugin": {other, "task-1"}, "another task": {mine, "task-2"}} {
		res, err := tc.r.Call(ctx, call, env(tc.task, nil))
		need, ok := loop.AuthNeedOf(err)
		if !ok || need.Provider != "example-oauth" || need.AuthURL == "" || strings.Contains(res.Content, tokenDigest(token)) {
			t.Fatalf("%s: %+v, %v: want the call to ask for its own credential", name, res, err)
		}
	}

	who := loop.ToolCall{ID: "c2", Name: "whoami", Arguments: []byte(`{}`)}
	alice := &loop.AuthContext{Principal: "alice", Token: "alice-key"}
	res, err = mine.Call(ctx, who, env("task-1", alice))
	if err != nil || res.Content != "caller alice, token sha256 "+tokenDigest("alice-key") {
		t.Fatalf("granted plugin, caller's credentials: %+v, %v", res, err)
	}
	res, err = other.Call(ctx, who, env("task-1", alice))
	if err != nil || !res.IsError || !strings.Contains(res.Content, `plugin "other" is not granted the caller's credentials`) ||
		strings.Contains(res.Content, tokenDigest("alice-key")) {
		t.Fatalf("ungranted plugin: %+v, %v: want a clear refusal", res, err)
	}
	for _, lost := range []*loop.AuthContext{nil, {Principal: "alice", Lost: true}} {
		_, err = mine.Call(ctx, who, env("task-1", lost))
		var ae *loop.AuthRequiredError
		if !errors.As(err, &ae) || ae.Need.Provider != loop.ProviderCaller || ae.Need.Holder != "plugin:authed-api" {
			t.Fatalf("granted plugin without the caller's credentials (%+v): %v, want it to ask for them", lost, err)
		}
	}
}
