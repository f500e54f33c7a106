package mcp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A server answering one message past MaxMessageBytes over stdio: the line
// is refused as it is read (never decoded whole), the call fails saying so,
// the server is restarted and serves the next call.
func TestClientRefusesAMessagePastTheLimitStdio(t *testing.T) {
	ts := startToolset(t, ClientConfig{MaxMessageBytes: 1 << 20, MaxResultBytes: 1000})
	if res := call(t, ts, "test_flood", `{"bytes":500000}`, nil); res.IsError || !strings.Contains(res.Content, "[cut at 1000 bytes]") {
		t.Fatalf("an answer under the limit: %+v", res.Content[:min(len(res.Content), 200)])
	}
	res := call(t, ts, "test_flood", `{"bytes":20000000}`, nil)
	if !res.IsError || !strings.Contains(res.Content, "larger than 1048576 bytes") {
		t.Fatalf("an answer of 20 MB past a limit of 1 MiB: IsError %v, %q", res.IsError, res.Content[:min(len(res.Content), 300)])
	}
	waitState(t, ts, "serving")
	if res := call(t, ts, "test_echo", `{"text":"again"}`, nil); res.IsError || !strings.Contains(res.Content, "again") {
		t.Fatalf("after the restart: %+v", res)
	}
}

// The same over streamable HTTP, for a server answering plain JSON (the
// body is read through the limit) and one answering an event stream (each
// event is): the server never gets its whole answer read.
func TestClientRefusesAMessagePastTheLimitHTTP(t *testing.T) {
	for _, jsonResponse := range []bool{true, false} {
		name := "sse"
		if jsonResponse {
			name = "json"
		}
		t.Run(name, func(t *testing.T) {
			s := sdk.NewServer(&sdk.Implementation{Name: "big", Version: "1"}, nil)
			sdk.AddTool(s, &sdk.Tool{Name: "flood", Description: "answers many bytes"},
				func(_ context.Context, _ *sdk.CallToolRequest, a struct {
					Bytes int `json:"bytes"`
				}) (*sdk.CallToolResult, any, error) {
					return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", a.Bytes)}}}, nil, nil
				})
			sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "returns its text"},
				func(_ context.Context, _ *sdk.CallToolRequest, a struct {
					Text string `json:"text"`
				}) (*sdk.CallToolResult, any, error) {
					return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: a.Text}}}, nil, nil
				})
			hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s },
				&sdk.StreamableHTTPOptions{JSONResponse: jsonResponse}))
			t.Cleanup(hs.Close)
			ts := startToolset(t, ClientConfig{Name: "big", URL: hs.URL, MaxMessageBytes: 1 << 20, MaxResultBytes: 1000})
			if res := call(t, ts, "big_flood", `{"bytes":500000}`, nil); res.IsError || !strings.Contains(res.Content, "[cut at 1000 bytes]") {
				t.Fatalf("an answer under the limit: %q", res.Content[:min(len(res.Content), 300)])
			}
			res := call(t, ts, "big_flood", `{"bytes":20000000}`, nil)
			if !res.IsError || !strings.Contains(res.Content, "larger than 1048576 bytes") {
				t.Fatalf("an answer of 20 MB past a limit of 1 MiB: IsError %v, %q", res.IsError, res.Content[:min(len(res.Content), 300)])
			}
			waitState(t, ts, "serving")
			if res := call(t, ts, "big_echo", `{"text":"again"}`, nil); res.IsError || res.Content != "again" {
				t.Fatalf("after the restart: %+v", res)
			}
		})
	}
}

// The host as an MCP server over stdio reads one client message up to
// ServerConfig.MaxMessageBytes (mcp.maxMessageBytes): a longer line ends
// the session before it is decoded; one within the bound is answered.
func TestServerStdioRefusesAMessagePastTheLimit(t *testing.T) {
	s, err := NewServer(ServerConfig{Tools: newGoTools(), Principal: "me", MaxMessageBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctr, str := io.Pipe()
	srd, cwr := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.ServeStdio(context.Background(), srd, str) }()
	go func() { _, _ = io.Copy(io.Discard, ctr) }() // the answers
	ping := func(pad int) error {
		_, err := fmt.Fprintf(cwr, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":%q}}}`+"\n", strings.Repeat("x", pad))
		return err
	}
	if err := ping(1 << 10); err != nil {
		t.Fatalf("a message within the bound: %v", err)
	}
	// 64 KiB: past the 4 KiB bound (and far under the default 8 MiB).
	go func() { _ = ping(64 << 10) }() // the server may stop reading it halfway
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the session ended without saying why")
		}
	case <-time.After(time.Minute):
		t.Fatal("a message past the bound did not end the session")
	}
	_ = srd.Close()
	_ = cwr.Close()
}
