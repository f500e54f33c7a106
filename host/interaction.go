package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/gofiber/fiber/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/loop/jsonlimit"
)

// InteractionConfig is what the operator decides about humans in the loop
// (docs/A2A_EXTENSION.md section 8).
type InteractionConfig struct {
	// Approval marks the tool calls that wait for an explicit approval.
	Approval ApprovalConfig `json:"approval"`
	// InputTimeout is how long a request waits for its answer (default
	// 24h).
	InputTimeout Duration `json:"inputTimeout,omitempty"`
	// OnTimeout is what an unanswered request becomes: "reject" (default:
	// the task goes on, the model is told) or "fail" (the task fails).
	OnTimeout string `json:"onTimeout,omitempty"`
}

// ApprovalConfig selects the calls that need an approval: a call needs one
// when its tool matches Tools or the plugin (or outside MCP server) that
// serves it matches Plugins (names or path.Match globs), unless the
// principal of the turn is in ExemptPrincipals.
type ApprovalConfig struct {
	Tools            []string `json:"tools,omitempty"`
	Plugins          []string `json:"plugins,omitempty"`
	ExemptPrincipals []string `json:"exemptPrincipals,omitempty"`
	// AllowEdits lets the approver change a call's arguments (they must
	// still match the tool's schema).
	AllowEdits bool `json:"allowEdits,omitempty"`
	// AgentMayApprove lets a coordinating agent answer (requireUser
	// false); by default a person must.
	AgentMayApprove bool `json:"agentMayApprove,omitempty"`
}

// Defaults of the interaction section.
const (
	DefaultInputTimeout = 24 * time.Hour
	onTimeoutReject     = "reject"
	onTimeoutFail       = "fail"
)

func (c InteractionConfig) validate() error {
	switch c.OnTimeout {
	case "", onTimeoutReject, onTimeoutFail:
	default:
		return fmt.Errorf("config: interaction.onTimeout %q: want reject or fail", c.OnTimeout)
	}
	if c.InputTimeout < 0 {
		return errors.New("config: interaction.inputTimeout must not be negative")
	}
	for _, g := range append(slices.Clone(c.Approval.Tools), c.Approval.Plugins...) {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("config: interaction.approval: pattern %q: %v", g, err)
		}
	}
	return nil
}

func (c InteractionConfig) timeout() time.Duration {
	if c.InputTimeout == 0 {
		return DefaultInputTimeout
	}
	return time.Duration(c.InputTimeout)
}

func (c InteractionConfig) onTimeout() string {
	if c.OnTimeout == "" {
		return onTimeoutReject
	}
	return c.OnTimeout
}

func (c ApprovalConfig) active() bool { return len(c.Tools) > 0 || len(c.Plugins) > 0 }

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// approvalGate is the loop's gate from the operator's config.
func (s *Server) approvalGate() loop.ApprovalGate {
	ac := s.cfg.Interaction.Approval
	if !ac.active() {
		return nil
	}
	return func(ctx context.Context, t *loop.Turn, call loop.ToolCall) *loop.InputRequest {
		src, marked := s.needsApproval(ctx, t.Auth, call.Name)
		if !marked {
			return nil
		}
		req := &loop.InputRequest{RequireUser: !ac.AgentMayApprove, Tool: src.view,
			ExpiresAt: time.Now().UTC().Add(s.cfg.Interaction.timeout()).Truncate(time.Second)}
		from := "the host"
		if src.plugin != "" {
			from = "plugin " + src.plugin
			if src.version != "" {
				from += " " + src.version
			}
		}
		req.Prompt = fmt.Sprintf("Approve %s from %s with %s?", call.Name, from, argsText(call.Arguments))
		req.Edits = &loop.InputEdits{Allowed: ac.AllowEdits}
		if ac.AllowEdits {
			req.Edits.Schema = src.params
		}
		return req
	}
}

// needsApproval says whether the operator's approval rules mark a call of
// the tool name by who (nil: no principal): its tool or the plugin that
// serves it matches, and who is not exempt. Every path that runs a tool
// asks it: the loop's gate (a turn's calls, and its sub-agents'), and the
// MCP server (approvalGuard). It returns what serves the tool when marked.
func (s *Server) needsApproval(ctx context.Context, who *loop.AuthContext, name string) (toolSrc, bool) {
	ac := s.cfg.Interaction.Approval
	if !ac.active() {
		return toolSrc{}, false
	}
	if who != nil && slices.Contains(ac.ExemptPrincipals, who.Principal) {
		return toolSrc{}, false
	}
	byName := matchAny(ac.Tools, name)
	if !byName && len(ac.Plugins) == 0 {
		return toolSrc{}, false // no need to find the tool's plugin
	}
	src := s.toolSource(ctx, name)
	if !byName && (src.plugin == "" || !matchAny(ac.Plugins, src.plugin)) {
		return toolSrc{}, false
	}
	return src, true
}

func argsText(b json.RawMessage) string {
	if len(b) == 0 {
		return "{}"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

// toolSrc is what serves a tool: a plugin (with its grant), an outside MCP
// server, or the host itself.
type toolSrc struct {
	plugin, version string
	params          json.RawMessage
	view            map[string]any
}

func (s *Server) toolSource(ctx context.Context, name string) toolSrc {
	src := toolSrc{view: map[string]any{"source": "builtin"}}
	for _, ts := range s.toolsets {
		defs, err := ts.Tools(ctx)
		if err != nil {
			continue
		}
		for _, d := range defs {
			if d.Name == name {
				src.params = d.Parameters
			}
		}
	}
	if s.plugins == nil {
		return src
	}
	list, err := s.plugins.Plugins(ctx)
	if err != nil {
		return src
	}
	for _, p := range list {
		if !slices.Contains(p.Tools, name) {
			continue
		}
		src.plugin, src.version = p.Name, p.Version
		if p.Kind == "mcp-server" {
			src.view = map[string]any{"source": p.Name, "sandboxed": false}
			return src
		}
		src.view = map[string]any{"source": "plugin", "plugin": p.Name, "version": p.Version, "sha256": p.SHA256}
		if p.Grant != nil {
			src.view["grants"] = p.Grant
		}
		return src
	}
	return src
}

// wireRequest is a request as the extension's data part shows it.
func wireRequest(r loop.InputRequest) map[string]any {
	m := map[string]any{"inputId": r.InputID, "inputType": r.InputType, "requireUser": r.RequireUser, "prompt": r.Prompt}
	if r.Call != nil {
		var args any = map[string]any{}
		if len(r.Call.Arguments) > 0 {
			_ = json.Unmarshal(r.Call.Arguments, &args)
		}
		m["call"] = map[string]any{"id": r.Call.ID, "name": r.Call.Name, "arguments": args}
	}
	if r.Tool != nil {
		m["tool"] = r.Tool
	}
	if r.Edits != nil {
		e := map[string]any{"allowed": r.Edits.Allowed}
		if len(r.Edits.Schema) > 0 {
			e["schema"] = json.RawMessage(r.Edits.Schema)
		}
		m["edits"] = e
	}
	if len(r.ResultSchema) > 0 {
		m["resultSchema"] = json.RawMessage(r.ResultSchema)
	}
	if r.Auth != nil {
		a := map[string]any{"provider": r.Auth.Provider, "holder": r.Auth.Holder}
		if len(r.Auth.Scopes) > 0 {
			a["scopes"] = r.Auth.Scopes
		}
		if r.Auth.AuthURL != "" {
			a["authUrl"] = r.Auth.AuthURL
		}
		if r.Auth.AuthType != "" {
			a["authType"] = r.Auth.AuthType
		}
		m["auth"] = a
	}
	if !r.ExpiresAt.IsZero() {
		m["expiresAt"] = r.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if r.Route != nil {
		// A sub-agent's request, passed up: whose, and the call it is
		// about (and, relayed from further down, the route below).
		m["route"] = routeMap(r.Route)
	}
	return m
}

// routeMap is rt as a request's data shows it.
func routeMap(rt *loop.InputRoute) map[string]any {
	route := map[string]any{"subtaskId": rt.SubtaskID, "agentId": rt.AgentID}
	if rt.InputID != "" {
		route["inputId"] = rt.InputID
	}
	if rt.RemoteTaskID != "" {
		route["remoteTaskId"] = rt.RemoteTaskID
	}
	if rt.Call != nil {
		var args any = map[string]any{}
		if len(rt.Call.Arguments) > 0 {
			_ = json.Unmarshal(rt.Call.Arguments, &args)
		}
		route["call"] = map[string]any{"id": rt.Call.ID, "name": rt.Call.Name, "arguments": args}
	}
	if rt.Inner != nil {
		route["inner"] = routeMap(rt.Inner)
	}
	return route
}

// requestsMessage is the status message of a paused task: the prompt, and
// the open requests as the extension's data part.
func requestsMessage(taskID, contextID string, reqs []loop.InputRequest, at time.Time) *a2a.Message {
	var open []any
	var shown []loop.InputRequest
	for _, r := range reqs {
		if r.Answer == nil {
			shown = append(shown, r)
			open = append(open, wireRequest(r))
		}
	}
	if len(open) == 0 {
		return nil
	}
	m := agentText(taskID, contextID, loop.RequestsPrompt(shown), at)
	var data map[string]any
	b, _ := json.Marshal(map[string]any{"requests": open})
	_ = json.Unmarshal(b, &data) // plain JSON values, as a client decodes them
	dp := a2a.NewDataPart(data)
	dp.Metadata = map[string]any{loop.InteractionURI: "requests"}
	m.Parts = append(m.Parts, dp)
	m.Extensions = []string{loop.InteractionURI}
	return m
}

// wireResponse is a response as a client sends it.
type wireResponse struct {
	InputID    string          `json:"inputId"`
	Decision   string          `json:"decision,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Result     *wireResult     `json:"result,omitempty"`
	Credential json.RawMessage `json:"credential,omitempty"`
	Text       string          `json:"text,omitempty"`
	ProvidedBy string          `json:"providedBy,omitempty"`
	UserID     string          `json:"userId,omitempty"`
	AgentID    string          `json:"agentId,omitempty"`
}

type wireResult struct {
	Content *string         `json:"content"`
	IsError bool            `json:"isError,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// responsesOf reads the extension's responses from a message: nil when it
// carries none. A message that mixes them with other parts, or whose
// responses do not decode, is refused.
func responsesOf(m *a2a.Message, principal string) ([]loop.InputAnswer, map[string]string, error) {
	answers, creds, err := readResponses(m, principal)
	if err != nil {
		// Nothing of a refused message is kept, a credential least of all.
		clear(creds)
		return nil, nil, err
	}
	return answers, creds, nil
}

// wireCredential is a credential as a client sends it.
type wireCredential struct {
	Token     string `json:"token"`
	TokenType string `json:"tokenType,omitempty"`
}

// maxCredential bounds a credential's token.
const maxCredential = 16 << 10

// readResponses reads the responses of m, and the credentials they carry
// by input id: those are kept apart from the answers (which are stored).
func readResponses(m *a2a.Message, principal string) ([]loop.InputAnswer, map[string]string, error) {
	idx := -1
	for i, p := range m.Parts {
		if p != nil && p.Metadata[loop.InteractionURI] == "responses" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, nil, nil
	}
	if len(m.Parts) != 1 {
		return nil, nil, fmt.Errorf("%w: a message with responses has exactly one part, the responses data part", a2a.ErrInvalidParams)
	}
	d, ok := m.Parts[idx].Content.(a2a.Data)
	if !ok {
		return nil, nil, fmt.Errorf("%w: the responses part must be a data part", a2a.ErrInvalidParams)
	}
	b, err := json.Marshal(d.Value)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: responses: %v", a2a.ErrInvalidParams, err)
	}
	var body struct {
		Responses []wireResponse `json:"responses"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return nil, nil, fmt.Errorf("%w: responses: %v", a2a.ErrInvalidParams, err)
	}
	if len(body.Responses) == 0 {
		return nil, nil, fmt.Errorf("%w: responses is empty", a2a.ErrInvalidParams)
	}
	out := make([]loop.InputAnswer, 0, len(body.Responses))
	creds := map[string]string{}
	for i, r := range body.Responses {
		if r.InputID == "" {
			return nil, creds, fmt.Errorf("%w: responses[%d]: inputId is required", a2a.ErrInvalidParams, i)
		}
		if len(r.Credential) > 0 && string(r.Credential) != "null" {
			var c wireCredential
			cd := json.NewDecoder(bytes.NewReader(r.Credential))
			cd.DisallowUnknownFields()
			if err := cd.Decode(&c); err != nil {
				return nil, creds, fmt.Errorf("%w: responses[%d]: credential must be {\"token\", \"tokenType\"}", a2a.ErrInvalidParams, i)
			}
			switch {
			case c.Token == "":
				return nil, creds, fmt.Errorf("%w: responses[%d]: credential.token is empty", a2a.ErrInvalidParams, i)
			case len(c.Token) > maxCredential:
				return nil, creds, fmt.Errorf("%w: responses[%d]: credential.token is over %d bytes", a2a.ErrInvalidParams, i, maxCredential)
			case c.TokenType != "" && !strings.EqualFold(c.TokenType, "Bearer"):
				return nil, creds, fmt.Errorf("%w: responses[%d]: credential.tokenType must be Bearer", a2a.ErrInvalidParams, i)
			}
			creds[r.InputID] = c.Token
		}
		a := loop.InputAnswer{InputID: r.InputID, Decision: r.Decision, Reason: r.Reason, Text: r.Text,
			ProvidedBy: r.ProvidedBy, UserID: r.UserID, AgentID: r.AgentID}
		if len(r.Arguments) > 0 && string(r.Arguments) != "null" {
			a.Arguments = r.Arguments
		}
		if r.Result != nil {
			if r.Result.Content == nil {
				return nil, creds, fmt.Errorf("%w: responses[%d]: result.content is required", a2a.ErrInvalidParams, i)
			}
			a.Result = &loop.ToolResult{Content: *r.Result.Content, IsError: r.Result.IsError, Data: r.Result.Data}
		}
		switch a.ProvidedBy {
		case "":
			a.ProvidedBy, a.UserID = "user", principal
		case "user", "agent":
			if a.UserID == "" && a.AgentID == "" {
				a.UserID = principal
			}
		default:
			return nil, creds, fmt.Errorf("%w: responses[%d]: providedBy must be user or agent", a2a.ErrInvalidParams, i)
		}
		out = append(out, a)
	}
	return out, creds, nil
}

// checkAnswerSchemas checks the edited arguments of approvals against the
// schema their request names.
func checkAnswerSchemas(rec loop.TaskRecord, answers []loop.InputAnswer) error {
	for _, a := range answers {
		for _, r := range rec.Requests {
			if r.InputID != a.InputID {
				continue
			}
			var schema json.RawMessage
			var what string
			var value json.RawMessage
			switch {
			case len(a.Arguments) > 0 && r.Edits != nil:
				schema, what, value = r.Edits.Schema, "arguments", a.Arguments
			case a.Result != nil && len(r.ResultSchema) > 0:
				schema, what, value = r.ResultSchema, "result.data", a.Result.Data
				if len(value) == 0 {
					value = json.RawMessage("null")
				}
			}
			if len(schema) == 0 {
				continue
			}
			if err := validateJSON(schema, value); err != nil {
				return fmt.Errorf("%w: response to %q: %s do not match the schema: %v", loop.ErrInvalid, a.InputID, what, err)
			}
		}
	}
	return nil
}

// compileJSONSchema compiles a client's or a tool's schema; it may refer
// only inside itself (no file, no URL is read).
func compileJSONSchema(schema json.RawMessage) (sch *jsonschema.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("schema failed: %v", r)
		}
	}()
	// The compiler's cost grows faster than linearly with nesting: a
	// client's schema is bounded as a plugin's is.
	if err := jsonlimit.CheckSchema(schema); err != nil {
		return nil, fmt.Errorf("schema refused: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource("mem://schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("mem://schema.json")
}

func validateJSON(schema, value json.RawMessage) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("schema failed: %v", r)
		}
	}()
	sch, err := compileJSONSchema(schema)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

// interactionExtension declares the extension on the agent card, with
// what this host's config makes of it.
func (s *Server) interactionExtension() a2a.AgentExtension {
	return a2a.AgentExtension{URI: loop.InteractionURI,
		Description: "Humans in the loop: tool calls that wait for approval, tools the client runs, " +
			"credentials the client supplies; each a pause (input-required / auth-required) answered on the same task.",
		Params: map[string]any{
			"requests":     []string{loop.InputApproval, loop.InputClientTool, loop.InputAuth},
			"clientTools":  map[string]any{"max": maxClientTools, "maxSchemaBytes": maxClientSchemaSize},
			"inputTimeout": s.cfg.Interaction.timeout().String(),
			"onTimeout":    s.cfg.Interaction.onTimeout(),
		}}
}

// expireEvery is how often paused tasks are searched for expired requests:
// half the input timeout, between 100ms and 30s.
func (c InteractionConfig) expireEvery() time.Duration {
	return min(max(c.timeout()/2, 100*time.Millisecond), 30*time.Second)
}

// Bounds of a client's tool offer.
const (
	maxClientTools      = 32
	maxClientSchemaSize = 64 << 10
)

var clientToolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// clientToolsOf reads the tools a message offers (its metadata under the
// extension's URI): nil when it offers none. A bad offer is refused whole.
func (s *Server) clientToolsOf(ctx context.Context, m *a2a.Message) ([]loop.ClientTool, error) {
	ext, ok := m.Metadata[loop.InteractionURI]
	if !ok {
		return nil, nil
	}
	b, err := json.Marshal(ext)
	if err != nil {
		return nil, fmt.Errorf("%w: message.metadata[%q]: %v", a2a.ErrInvalidParams, loop.InteractionURI, err)
	}
	var offer struct {
		ClientTools []struct {
			Name         string          `json:"name"`
			Description  string          `json:"description"`
			Parameters   json.RawMessage `json:"parameters"`
			ResultSchema json.RawMessage `json:"resultSchema"`
		} `json:"clientTools"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&offer); err != nil {
		return nil, fmt.Errorf("%w: client tools: %v", a2a.ErrInvalidParams, err)
	}
	if offer.ClientTools == nil {
		return nil, nil
	}
	if len(offer.ClientTools) > maxClientTools {
		return nil, fmt.Errorf("%w: %d client tools offered; at most %d", a2a.ErrInvalidParams, len(offer.ClientTools), maxClientTools)
	}
	host := map[string]bool{}
	for _, ts := range s.toolsets {
		if defs, err := ts.Tools(ctx); err == nil {
			for _, d := range defs {
				host[d.Name] = true
			}
		}
	}
	out := make([]loop.ClientTool, 0, len(offer.ClientTools))
	seen := map[string]bool{}
	size := 0
	for i, t := range offer.ClientTools {
		switch {
		case !clientToolName.MatchString(t.Name):
			return nil, fmt.Errorf("%w: clientTools[%d]: name %q must match %s", a2a.ErrInvalidParams, i, t.Name, clientToolName)
		case host[t.Name]:
			return nil, fmt.Errorf("%w: clientTools[%d]: %q is one of the host's tools", a2a.ErrInvalidParams, i, t.Name)
		case seen[t.Name]:
			return nil, fmt.Errorf("%w: clientTools[%d]: %q offered twice", a2a.ErrInvalidParams, i, t.Name)
		}
		seen[t.Name] = true
		for what, sch := range map[string]json.RawMessage{"parameters": t.Parameters, "resultSchema": t.ResultSchema} {
			if len(sch) == 0 || string(sch) == "null" {
				continue
			}
			size += len(sch)
			if _, err := compileJSONSchema(sch); err != nil {
				return nil, fmt.Errorf("%w: clientTools[%d] (%s): %s: %v", a2a.ErrInvalidParams, i, t.Name, what, err)
			}
		}
		ct := loop.ClientTool{ToolDefinition: loop.ToolDefinition{Name: t.Name, Description: t.Description, Client: true}}
		if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
			ct.Parameters = t.Parameters
		}
		if len(t.ResultSchema) > 0 && string(t.ResultSchema) != "null" {
			ct.ResultSchema = t.ResultSchema
		}
		out = append(out, ct)
	}
	if size > maxClientSchemaSize {
		return nil, fmt.Errorf("%w: the client tools' schemas are %d bytes; at most %d", a2a.ErrInvalidParams, size, maxClientSchemaSize)
	}
	return out, nil
}

// activateExtensions answers a client that activates the interaction
// extension (A2A-Extensions on 1.0, X-A2A-Extensions on 0.3) with the same
// header naming it: the host serves it on every request.
func activateExtensions(c *fiber.Ctx, v03 bool) {
	name := "A2A-Extensions"
	if v03 {
		name = "X-A2A-Extensions"
	}
	for _, v := range strings.Split(c.Get(name), ",") {
		if strings.TrimSpace(v) == loop.InteractionURI {
			c.Set(name, loop.InteractionURI)
			return
		}
	}
}

// checkAnswers checks answers whole before anything is recorded: the
// schemas of edited arguments and client results, and the credentials: a
// credential answers an auth request only, and every auth request but the
// caller's needs one.
func checkAnswers(creds map[string]string) func(rec loop.TaskRecord, answers []loop.InputAnswer) error {
	return func(rec loop.TaskRecord, answers []loop.InputAnswer) error {
		for _, a := range answers {
			_, has := creds[a.InputID]
			for _, r := range rec.Requests {
				if r.InputID != a.InputID {
					continue
				}
				caller := r.Auth != nil && r.Auth.Provider == loop.ProviderCaller
				switch {
				case r.InputType != loop.InputAuth && has:
					return fmt.Errorf("%w: response to %q: a credential answers an auth request only", loop.ErrInvalid, a.InputID)
				case r.InputType == loop.InputAuth && caller && has:
					return fmt.Errorf("%w: response to %q: the caller's credentials come with the request (Authorization or X-API-Key), not in the response", loop.ErrInvalid, a.InputID)
				case r.InputType == loop.InputAuth && !caller && !has:
					return fmt.Errorf("%w: response to %q: credential.token is required", loop.ErrInvalid, a.InputID)
				}
			}
		}
		return checkAnswerSchemas(rec, answers)
	}
}

// keepCredentials hands the credentials of accepted answers to the holder
// each auth request names, for this task only, in memory only.
func (s *Server) keepCredentials(creds map[string]string) func(rec loop.TaskRecord) func() {
	if len(creds) == 0 {
		return nil
	}
	return func(rec loop.TaskRecord) func() {
		var kept []loop.InputRequest
		for _, r := range rec.Requests {
			tok, ok := creds[r.InputID]
			if !ok || r.Auth == nil || r.InputType != loop.InputAuth {
				continue
			}
			s.creds.Put(rec.ID, r.Auth.Holder, r.Auth.Provider, tok, max(s.cfg.Interaction.timeout(), time.Duration(s.cfg.Limits.TurnTimeout)))
			kept = append(kept, r)
		}
		clear(creds)
		// The continuation refused (a turn bound, a failed write): the
		// credentials go now; the client sends them again with its retry.
		return func() {
			for _, r := range kept {
				s.creds.Drop(rec.ID, r.Auth.Holder, r.Auth.Provider)
			}
		}
	}
}
