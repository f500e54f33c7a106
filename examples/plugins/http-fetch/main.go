//go:build wasip1

// Command http-fetch is a tool plugin that fetches a URL through the host's
// egress broker: only the hosts the manifest lists (and the operator allows)
// are reachable, redirects included.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/looopy-go/looopy/pdk"
)

// FetchArgs are the arguments of fetch.
type FetchArgs struct {
	URL      string `json:"url" desc:"an http or https URL on an allowed host"`
	MaxBytes int    `json:"maxBytes,omitempty" desc:"read at most this many bytes of the body (default 65536, at most 1048576)"`
}

func init() {
	pdk.Info("http-fetch", "1.0.0")
	pdk.Tool("fetch", "Fetches a web page or API response (GET) from an allowed host and returns its status and text.", fetch, pdk.Idempotent())
}

func fetch(ctx context.Context, a FetchArgs) (pdk.ToolResult, error) {
	if err := CheckURL(a.URL); err != nil {
		return pdk.ToolResult{}, err
	}
	resp, err := pdk.HTTP(ctx, &pdk.HTTPRequest{Method: "GET", URL: a.URL, Headers: map[string]string{"Accept": "text/*, application/json;q=0.9, */*;q=0.1"}})
	if err != nil {
		return pdk.ToolResult{}, err
	}
	defer resp.Body.Close()
	ct := Header(resp.Headers, "Content-Type")
	data := map[string]any{"status": resp.Status, "contentType": ct}
	if !Textual(ct) {
		b, _ := json.Marshal(data)
		return pdk.ToolResult{Content: Format(resp.Status, ct, fmt.Sprintf("[a %s body is not shown]", ct), false), Data: b}, nil
	}
	text, truncated, err := ReadText(resp.Body, Limit(a.MaxBytes))
	if err != nil {
		return pdk.ToolResult{}, fmt.Errorf("fetch %s: %w", a.URL, err)
	}
	data["truncated"], data["bytes"] = truncated, len(text)
	b, _ := json.Marshal(data)
	return pdk.ToolResult{Content: Format(resp.Status, ct, text, truncated), Data: b, IsError: resp.Status >= 400}, nil
}

func main() {}
