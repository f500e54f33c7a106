package loop

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ProviderCaller is the provider of an AuthNeed that asks for the
// credentials of the client that sent the turn's message (its principal,
// scopes and token), rather than for a third party's.
const ProviderCaller = "caller"

// AuthNeed is a credential a tool lacks: whose (Provider), for what
// (Scopes), where the user can get it (AuthURL), and who is to receive it
// (Holder: "plugin:<name>" for a plugin, "tool:<name>" for another tool).
// Nothing in it is secret.
type AuthNeed struct {
	Provider string   `json:"provider"`
	Scopes   []string `json:"scopes,omitempty"`
	AuthURL  string   `json:"authUrl,omitempty"`
	AuthType string   `json:"authType,omitempty"` // oauth2, api-key, bearer, ...
	Holder   string   `json:"holder,omitempty"`
}

// AuthRequiredError is what a tool returns (from Toolset.Call) when it
// needs a credential it lacks: the call ends without a result, and the
// turn pauses in waiting-auth with an auth request for it. Once the client
// supplies the credential, the call runs again.
type AuthRequiredError struct {
	Need AuthNeed
}

func (e *AuthRequiredError) Error() string {
	return fmt.Sprintf("a credential of %q is required (scopes %v)", e.Need.Provider, e.Need.Scopes)
}

// AuthNeedOf returns the auth need err carries, if any.
func AuthNeedOf(err error) (*AuthNeed, bool) {
	var ae *AuthRequiredError
	if errors.As(err, &ae) {
		need := ae.Need
		return &need, true
	}
	return nil, false
}

// authPauseKey marks, in the journal, the result of a call that stopped to
// ask for a credential: such a call has not acted, and runs again once the
// credential is there (after a restart too).
const authPauseKey = "looopy.authRequired"

func authPauseResult(call ToolCall, need AuthNeed) ToolResult {
	data, _ := json.Marshal(map[string]any{authPauseKey: need})
	return ToolResult{ToolCallID: call.ID, IsError: true, Data: data,
		Content: fmt.Sprintf("tool %q needs a credential of %q first", call.Name, need.Provider)}
}

func isAuthPause(r *ToolResult) bool { return isPauseOf(r, authPauseKey) }

func isPauseOf(r *ToolResult, key string) bool {
	if r == nil || !r.IsError || len(r.Data) == 0 || !strings.Contains(string(r.Data), key) {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(r.Data, &m) != nil {
		return false
	}
	_, ok := m[key]
	return ok
}

// authRequest is the request of a call that needs a credential.
func authRequest(c ToolCall, need AuthNeed) InputRequest {
	call := c
	prompt := fmt.Sprintf("%s needs a credential of %s", c.Name, need.Provider)
	if need.Provider == ProviderCaller {
		prompt = fmt.Sprintf("%s needs your credentials again (the host restarted); send the answer with them", c.Name)
	} else {
		if len(need.Scopes) > 0 {
			prompt += " with scopes " + strings.Join(need.Scopes, ", ")
		}
		if need.AuthURL != "" {
			prompt += "; get it at " + need.AuthURL
		}
		prompt += "."
	}
	n := need
	return InputRequest{InputID: InputAuth + ":" + c.ID, InputType: InputAuth, RequireUser: true,
		Prompt: prompt, Call: &call, Auth: &n}
}

// Credentials hold the credentials clients supply for their tasks, in
// memory only: each is for one task and one holder (the plugin or tool
// that asked), never written anywhere, and gone when the task ends, when
// its time is up, or when the process exits. It is safe for concurrent
// use.
type Credentials struct {
	mu sync.Mutex
	m  map[credKey]credEntry
}

type credKey struct{ task, holder, provider string }

type credEntry struct {
	token   string
	expires time.Time
}

// NewCredentials returns an empty set of credentials.
func NewCredentials() *Credentials { return &Credentials{m: map[credKey]credEntry{}} }

// Put keeps token for holder in taskID for ttl.
func (c *Credentials) Put(taskID, holder, provider, token string, ttl time.Duration) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for k, e := range c.m {
		if now.After(e.expires) {
			delete(c.m, k)
		}
	}
	c.m[credKey{taskID, holder, provider}] = credEntry{token: token, expires: now.Add(ttl)}
}

// Get returns the token supplied for holder in taskID, if it is there.
func (c *Credentials) Get(taskID, holder, provider string) (string, bool) {
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[credKey{taskID, holder, provider}]
	if !ok || time.Now().After(e.expires) {
		return "", false
	}
	return e.token, true
}

// Copy keeps the token supplied for holder in fromTask for holder in
// toTask too, until the same time (nothing when there is none).
func (c *Credentials) Copy(fromTask, toTask, holder, provider string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[credKey{fromTask, holder, provider}]
	if !ok || time.Now().After(e.expires) {
		return
	}
	c.m[credKey{toTask, holder, provider}] = e
}

// Drop drops the credential of holder in taskID (nothing when there is
// none).
func (c *Credentials) Drop(taskID, holder, provider string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, credKey{taskID, holder, provider})
}

// Forget drops every credential of taskID and of its sub-tasks.
func (c *Credentials) Forget(taskID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		// A sub-task's ids are its parent's, a dot and the call's.
		if k.task == taskID || strings.HasPrefix(k.task, taskID+".") {
			delete(c.m, k)
		}
	}
}

// Len returns how many credentials are held.
func (c *Credentials) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
