//go:build wasip1

// Command openai is a model plugin for any OpenAI-compatible chat-completions
// server (OpenAI, vLLM, Ollama, LiteLLM, llama.cpp): streaming, tool calls
// and usage. Config: baseUrl, model, temperature, maxTokens, headers; the API
// key comes from the secret "apiKey" (the manifest names the environment
// variable that holds it).
package main

import (
	"context"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/looopy-go/looopy/pdk"
)

// maxErrorBody and maxWholeBody bound what is read of an error response and
// of a non-streamed answer.
const (
	maxErrorBody = 64 << 10
	maxWholeBody = 8 << 20
)

var config = sync.OnceValues(func() (Config, error) {
	var c Config
	if err := pdk.ConfigJSON(&c); err != nil {
		return c, err
	}
	c.APIKey = pdk.Secret("apiKey")
	return c, c.Check()
})

func init() {
	pdk.Info("openai", "1.0.0")
	pdk.Model(generate)
}

func generate(ctx context.Context, req *pdk.ModelRequest, delta func(pdk.Delta) error) (*pdk.ModelResponse, error) {
	cfg, err := config()
	if err != nil {
		return nil, &pdk.Error{Code: "bad_config", Message: err.Error()}
	}
	body, err := BuildRequest(cfg, req)
	if err != nil {
		return nil, &pdk.Error{Code: "bad_request", Message: "map the request: " + err.Error()}
	}
	headers := map[string]string{"Content-Type": "application/json", "Accept": "text/event-stream"}
	for k, v := range cfg.Headers {
		headers[k] = v
	}
	if cfg.APIKey != "" {
		headers["Authorization"] = "Bearer " + cfg.APIKey
	}
	resp, err := pdk.HTTP(ctx, &pdk.HTTPRequest{Method: "POST", URL: cfg.Endpoint(), Headers: headers, Body: string(body)})
	if err != nil {
		return nil, TransportError(err)
	}
	defer resp.Body.Close()
	if resp.Status != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		e := StatusError(resp.Status, b)
		if e.Transient {
			e.RetryAfter = pdk.Duration(RetryAfter(resp.Headers, time.Now()))
		}
		return nil, e
	}
	if strings.Contains(strings.ToLower(header(resp.Headers, "Content-Type")), "application/json") {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxWholeBody))
		if err != nil {
			return nil, TransportError(err)
		}
		return ParseResponse(b, delta)
	}
	return ParseStream(resp.Body, delta)
}

func main() {}
