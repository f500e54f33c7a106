package host

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/gofiber/fiber/v2"
)

// agentCard describes the agent: both JSON-RPC interfaces (1.0 at "/",
// 0.3 at "/a2a/v0.3") and a skill per tool or sub-agent loaded now.
func (s *Server) agentCard(ctx context.Context) *a2a.AgentCard {
	base := s.cfg.PublicURL
	card := &a2a.AgentCard{
		Name:        s.cfg.Agent.Name,
		Description: s.cfg.Agent.Description,
		Version:     "0.1.0",
		SupportedInterfaces: []*a2a.AgentInterface{
			{URL: base + "/", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version},
			{URL: base + "/a2a/v0.3", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version},
		},
		Capabilities:       a2a.AgentCapabilities{Streaming: true, Extensions: []a2a.AgentExtension{s.interactionExtension()}},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain", "application/json"},
		Skills:             s.skills(ctx),
	}
	if s.cfg.Auth.Enabled {
		// The schemes themselves are written by handleCard, in a form
		// both versions read.
		card.SecurityRequirements = a2a.SecurityRequirementsOptions{
			{"bearer": a2a.SecuritySchemeScopes{}},
			{"apiKey": a2a.SecuritySchemeScopes{}},
		}
	}
	return card
}

// skills lists a skill per tool of the loaded toolsets, by name. A toolset
// that fails to list its tools is left out (and logged).
func (s *Server) skills(ctx context.Context) []a2a.AgentSkill {
	var out []a2a.AgentSkill
	seen := map[string]bool{}
	for _, ts := range s.toolsets {
		tags, note := []string{"tool"}, ""
		if sb, ok := ts.(interface{ Sandboxed() bool }); ok && !sb.Sandboxed() {
			// An outside MCP server's tool: the card says it runs unconfined.
			tags, note = []string{"tool", "mcp", "not-sandboxed"}, " (from an outside MCP server: NOT sandboxed)"
		}
		tools, err := ts.Tools(ctx)
		if err != nil {
			s.log.WarnContext(ctx, "toolset left off the agent card", "error", err.Error())
			continue
		}
		for _, t := range tools {
			if seen[t.Name] {
				continue
			}
			seen[t.Name] = true
			desc := t.Description
			if desc == "" {
				desc = "the " + t.Name + " tool"
			}
			out = append(out, a2a.AgentSkill{ID: t.Name, Name: t.Name, Description: desc + note, Tags: tags})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) == 0 {
		out = []a2a.AgentSkill{{ID: "chat", Name: "chat", Description: "converse with the agent", Tags: []string{"chat"}}}
	}
	return out
}

// cardJSONer is the part of a2av0's card producer used here: it writes the
// card in a shape both 1.0 clients (supportedInterfaces) and 0.3 clients
// (url, preferredTransport, protocolVersion) read.
type cardJSONer interface {
	CardJSON(ctx context.Context) ([]byte, error)
}

func (s *Server) handleCard(c *fiber.Ctx) error {
	p, ok := a2av0.NewStaticAgentCardProducer(s.agentCard(c.UserContext())).(cardJSONer)
	if !ok {
		return fmt.Errorf("agent card: the 0.3 card producer writes no JSON")
	}
	b, err := p.CardJSON(c.UserContext())
	if err != nil {
		return fmt.Errorf("agent card: %w", err)
	}
	if s.cfg.Auth.Enabled {
		if b, err = withSecuritySchemes(b); err != nil {
			return fmt.Errorf("agent card: %w", err)
		}
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(b)
}

// securitySchemes are the card's schemes, each written once in both
// shapes: 0.3's ("type" and its fields) and 1.0's (the scheme under its
// "…SecurityScheme" key). Each version's parser ignores the other's fields,
// so one card serves both kinds of clients.
var securitySchemes = map[string]any{
	"bearer": map[string]any{
		"type": "http", "scheme": "bearer", "description": "an API key as a bearer token",
		"httpAuthSecurityScheme": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer", Description: "an API key as a bearer token"},
	},
	"apiKey": map[string]any{
		"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "an API key",
		"apiKeySecurityScheme": a2a.APIKeySecurityScheme{Location: "header", Name: "X-API-Key", Description: "an API key"},
	},
}

func withSecuritySchemes(card []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(card, &m); err != nil {
		return nil, err
	}
	ss, err := json.Marshal(securitySchemes)
	if err != nil {
		return nil, err
	}
	m["securitySchemes"] = ss
	return json.MarshalIndent(m, "", "  ")
}
