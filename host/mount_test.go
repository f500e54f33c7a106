package host_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/looopy-go/looopy/host"
)

// TestMountedRoutesKeepTheHostsRules: served from an application's own
// Fiber app, the host's routes still answer errors the host's way (JSON-RPC
// on the A2A routes, in the route's version) and hold bodies to the host's
// limit, while the application's routes keep the application's rules.
func TestMountedRoutesKeepTheHostsRules(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String() + "/agent"
	cfg := baseConfig(t.TempDir())
	cfg.PublicURL = base
	cfg.Limits.MaxBodyBytes = 4 << 10
	m := host.NewMain()
	m.Stdout = io.Discard
	m.Config = cfg
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: func(c *fiber.Ctx, err error) error {
		return c.Status(599).SendString("application handler: " + err.Error())
	}})
	app.Get("/own", func(c *fiber.Ctx) error { return fiber.ErrTeapot })
	m.Server().Register(app.Group("/agent"))
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })

	big := `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"` + strings.Repeat("x", 8<<10) + `"}}`
	_, r := rpc(t, base+"/a2a/v0.3", "", big)
	if r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, "4096 bytes") {
		t.Fatalf("oversized body on the mounted 0.3 route: %s", r.raw)
	}
	_, r = rpc(t, base, "", `{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"id":"nope"}}`)
	if r.Error == nil || r.Error.Code != -32001 || string(r.ID) != "7" {
		t.Fatalf("unknown task on the mounted 1.0 route: %s", r.raw)
	}
	resp, err := http.Get(base + "/events/unknown-context")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"error"`) {
		t.Fatalf("mounted /events of an unknown context: %d %s", resp.StatusCode, b)
	}
	// The browser guard holds on mounted routes, in the route's version.
	st, r := rpc(t, base+"/a2a/v0.3", "", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`, "Origin", "http://attacker.example")
	if st != http.StatusForbidden || r.Error == nil || r.Error.Code != -32600 {
		t.Fatalf("a foreign origin on the mounted 0.3 route: %d %s", st, r.raw)
	}
	st, r = rpc(t, base, "", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"nope"}}`, "Content-Type", "text/plain")
	if st != http.StatusUnsupportedMediaType || r.Error == nil {
		t.Fatalf("a text/plain body on the mounted 1.0 route: %d %s", st, r.raw)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign Host on a mounted route: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/own", nil)
	req.Header.Set("Origin", "http://attacker.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 599 || !strings.HasPrefix(string(b), "application handler") {
		t.Fatalf("the application's own route: %d %s", resp.StatusCode, b)
	}
}
