package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	// The credential's lifetime only has to outlast the test (expiry is
	// not what it checks): loading the two plugins under the race detector
	// on a loaded machine took past a minute, and the credential was gone.
	creds.Put("task-1", "plugin:authed-api", "example-oauth", token, time.Hour)
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

// An Extism-ABI plugin (Extism's Go PDK) gets the credential host function
// too, under the same rules: the credential supplied for it and its task
// only, the caller's only when granted, a missing one asked for (the call
// ends with an auth need), a malformed request a clear error; and without
// the grant the import is refused at load.
func TestExtismPluginCredential(t *testing.T) {
	const token = "tok-for-the-extism-guest-77e1"
	ctx := context.Background()
	creds := loop.NewCredentials()
	creds.Put("task-1", "plugin:xcred", "example-oauth", token, time.Hour) // outlasts the test's loads, however slow
	load := func(name string, callerAuth []string, grant bool) (*Registry, error) {
		r := newRegistry(t, Config{Policy: Policy{CallerAuth: callerAuth}})
		_, err := r.Load(ctx, install(t, t.TempDir(), name, guestWasm(t, "xcred"), func(m map[string]any) {
			if grant {
				caps(m)["hostFunctions"] = []string{"credential"}
			}
		}))
		return r, err
	}
	mine, err := load("xcred", []string{"xcred"}, true)
	if err != nil {
		t.Fatal(err)
	}
	other, err := load("xother", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	env := func(task string, auth *loop.AuthContext) *loop.ToolEnv {
		return &loop.ToolEnv{ContextID: "ctx", TaskID: task, CallID: "c1", Credentials: creds, Auth: auth}
	}
	profile := loop.ToolCall{ID: "c1", Name: "xprofile", Arguments: []byte(`{}`)}
	res, err := mine.Call(ctx, profile, env("task-1", nil))
	if err != nil || res.IsError || !strings.Contains(res.Content, tokenDigest(token)) || !strings.Contains(res.Content, "of 29 bytes") ||
		strings.Contains(res.Content, token) {
		t.Fatalf("the Extism plugin it was supplied for: %+v, %v", res, err)
	}
	for name, tc := range map[string]struct {
		r    *Registry
		task string
	}{"another plugin": {other, "task-1"}, "another task": {mine, "task-2"}} {
		res, err := tc.r.Call(ctx, profile, env(tc.task, nil))
		need, ok := loop.AuthNeedOf(err)
		if !ok || need.Provider != "example-oauth" || need.AuthURL != "https://auth.example.test/authorize" ||
			len(need.Scopes) != 1 || strings.Contains(res.Content, tokenDigest(token)) {
			t.Fatalf("%s: %+v, %v: want the call to ask for its own credential", name, res, err)
		}
	}

	who := loop.ToolCall{ID: "c2", Name: "xwhoami", Arguments: []byte(`{}`)}
	alice := &loop.AuthContext{Principal: "alice", Token: "alice-key"}
	if res, err := mine.Call(ctx, who, env("task-1", alice)); err != nil || res.IsError ||
		!strings.Contains(res.Content, tokenDigest("alice-key")) || !strings.Contains(res.Content, `principal "alice"`) {
		t.Fatalf("granted Extism plugin, caller's credentials: %+v, %v", res, err)
	}
	if res, err := other.Call(ctx, who, env("task-1", alice)); err != nil || !res.IsError ||
		!strings.Contains(res.Content, `plugin "xother" is not granted the caller's credentials`) ||
		strings.Contains(res.Content, tokenDigest("alice-key")) {
		t.Fatalf("ungranted Extism plugin: %+v, %v: want a clear refusal", res, err)
	}
	_, err = mine.Call(ctx, who, env("task-1", &loop.AuthContext{Principal: "alice", Lost: true}))
	var ae *loop.AuthRequiredError
	if !errors.As(err, &ae) || ae.Need.Provider != loop.ProviderCaller || ae.Need.Holder != "plugin:xcred" {
		t.Fatalf("granted Extism plugin, credentials lost: %v, want it to ask for them", err)
	}
	// Bad requests: a clear error, and the instance still serves.
	for raw, want := range map[string]string{`not json`: "credential: request", `{"provider":""}`: "provider is required"} {
		args, _ := json.Marshal(map[string]string{"raw": raw})
		res, err := mine.Call(ctx, loop.ToolCall{ID: "c3", Name: "xraw", Arguments: args}, env("task-1", nil))
		if err != nil || !res.IsError || !strings.Contains(res.Content, want) {
			t.Fatalf("xraw(%s) = %+v, %v: want an error naming %q", raw, res, err, want)
		}
	}
	if res, err := mine.Call(ctx, profile, env("task-1", nil)); err != nil || res.IsError {
		t.Fatalf("after bad requests: %+v, %v", res, err)
	}
	// Not granted: the import is refused at load.
	if _, err := load("xcred2", nil, false); err == nil || !strings.Contains(err.Error(), "looopy.credential, which was not granted") {
		t.Fatalf("ungranted credential import: %v", err)
	}
}
