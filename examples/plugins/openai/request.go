package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/looopy-go/looopy/pdk"
)

// DefaultBaseURL is OpenAI's API; any server that speaks chat completions
// (vLLM, Ollama, LiteLLM, llama.cpp) works with its own base URL.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config is the adapter's configuration: the manifest's config map, and the
// API key from a secret.
type Config struct {
	BaseURL     string            `json:"baseUrl,omitempty"`
	Model       string            `json:"model"`
	Temperature *float64          `json:"temperature,omitempty"` // used when the request sets none
	MaxTokens   int               `json:"maxTokens,omitempty"`   // used when the request sets none
	Headers     map[string]string `json:"headers,omitempty"`     // extra request headers
	APIKey      string            `json:"-"`
}

// Check reports a configuration that cannot work.
func (c Config) Check() error {
	if c.Model == "" {
		return errors.New(`config "model" is missing`)
	}
	u, err := url.Parse(c.baseURL())
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf(`config "baseUrl" %q: want an http or https URL`, c.BaseURL)
	}
	return nil
}

func (c Config) baseURL() string {
	if c.BaseURL == "" {
		return DefaultBaseURL
	}
	return c.BaseURL
}

// Endpoint is the chat-completions URL.
func (c Config) Endpoint() string {
	return strings.TrimRight(c.baseURL(), "/") + "/chat/completions"
}

// The chat-completions request, as the API names its fields.
type (
	chatRequest struct {
		Model         string         `json:"model"`
		Messages      []chatMessage  `json:"messages"`
		Tools         []chatTool     `json:"tools,omitempty"`
		Temperature   *float64       `json:"temperature,omitempty"`
		MaxTokens     int            `json:"max_tokens,omitempty"`
		Stream        bool           `json:"stream"`
		StreamOptions *streamOptions `json:"stream_options,omitempty"`
	}
	streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	chatMessage struct {
		Role       string         `json:"role"`
		Content    *string        `json:"content"` // null on an assistant message that only calls tools
		Name       string         `json:"name,omitempty"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
		ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	}
	chatToolCall struct {
		Index    *int         `json:"index,omitempty"` // stream deltas only
		ID       string       `json:"id,omitempty"`
		Type     string       `json:"type,omitempty"`
		Function chatFunction `json:"function"`
	}
	chatFunction struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
	chatTool struct {
		Type     string          `json:"type"`
		Function chatFunctionDef `json:"function"`
	}
	chatFunctionDef struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	}
)

// emptyParameters is the schema of a tool that declares none.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// BuildRequest maps a model request to a streaming chat-completions body. The
// model is the config's, unless the request's metadata names one ("model").
func BuildRequest(cfg Config, req *pdk.ModelRequest) ([]byte, error) {
	out := chatRequest{
		Model:         cfg.Model,
		Stream:        true,
		StreamOptions: &streamOptions{IncludeUsage: true},
		Temperature:   cfg.Temperature,
		MaxTokens:     cfg.MaxTokens,
	}
	if m, ok := req.Metadata["model"].(string); ok && m != "" {
		out.Model = m // the host may pick the model per request
	}
	if req.Temperature != nil {
		out.Temperature = req.Temperature
	}
	if req.MaxTokens > 0 {
		out.MaxTokens = req.MaxTokens
	}
	for i, m := range req.Messages {
		cm, err := mapMessage(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		out.Messages = append(out.Messages, cm)
	}
	if len(out.Messages) == 0 {
		return nil, errors.New("no messages")
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if len(params) == 0 || string(params) == "null" {
			params = emptyParameters
		}
		out.Tools = append(out.Tools, chatTool{Type: "function", Function: chatFunctionDef{
			Name: t.Name, Description: t.Description, Parameters: params,
		}})
	}
	return json.Marshal(out)
}

func mapMessage(m pdk.Message) (chatMessage, error) {
	content := m.Content
	cm := chatMessage{Role: string(m.Role), Content: &content}
	switch m.Role {
	case pdk.RoleSystem, pdk.RoleUser:
	case pdk.RoleAssistant:
		for _, tc := range m.ToolCalls {
			args := string(tc.Arguments)
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			cm.ToolCalls = append(cm.ToolCalls, chatToolCall{ID: tc.ID, Type: "function",
				Function: chatFunction{Name: tc.Name, Arguments: args}})
		}
		if len(cm.ToolCalls) > 0 && content == "" {
			cm.Content = nil
		}
	case pdk.RoleTool:
		if m.ToolCallID == "" {
			return cm, errors.New("a tool message without toolCallId")
		}
		cm.ToolCallID = m.ToolCallID
	default:
		return cm, fmt.Errorf("unknown role %q", m.Role)
	}
	return cm, nil
}
