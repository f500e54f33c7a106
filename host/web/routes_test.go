package web_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/host/web"
)

// The page and its files are served from the binary with a policy that
// keeps the browser on the host; nothing else is served from /ui/, and a
// host with the page off answers 404 at GET / while A2A goes on at POST /.
func TestPageRoutes(t *testing.T) {
	m := startHost(t, config(t.TempDir(), "127.0.0.1:0", true))
	for _, c := range []struct{ path, typ string }{
		{"/", "text/html"}, {"/ui/app.js", "javascript"}, {"/ui/style.css", "text/css"},
	} {
		res, err := http.Get(m.URL() + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), c.typ) || len(body) == 0 {
			t.Fatalf("GET %s: %d %q (%d bytes)", c.path, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "script-src 'self'") {
			t.Fatalf("GET %s: Content-Security-Policy %q", c.path, csp)
		}
	}
	for _, p := range []string{"/ui/nope.js", "/ui/../web.go", "/ui/%2e%2e/web.go", "/ui/static/app.js", "/ui/"} {
		if code := rawGet(t, m.Addr(), p); code != 404 {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}

	off := config(t.TempDir(), "127.0.0.1:0", false)
	off.Web.Disabled = true
	m2 := startHost(t, off)
	if code := rawGet(t, m2.Addr(), "/"); code == 200 {
		t.Fatalf("GET / with the page off: %d", code)
	}
	res, err := http.Post(m2.URL()+"/", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `"result"`) {
		t.Fatalf("A2A with the page off: %d %s", res.StatusCode, b)
	}
}

// rawGet sends the path as written (no cleaning by the client).
func rawGet(t *testing.T, addr, path string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// The page names no other origin: everything it loads or calls is
// relative to the host.
func TestPageFetchesNothingElse(t *testing.T) {
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+`)
	for _, name := range []string{"index.html", "app.js", "style.css"} {
		b, _, ok := web.Asset(name)
		if !ok {
			t.Fatalf("%s is not embedded", name)
		}
		for _, u := range url.FindAllString(string(b), -1) {
			// The extension's URI is a name, never fetched.
			if u == "https://github.com" && strings.Contains(string(b), "https://github.com/looopy-go/looopy/blob/main/docs/A2A_EXTENSION.md#v1") && name == "app.js" {
				continue
			}
			t.Errorf("%s names another origin: %s", name, u)
		}
	}
	if _, _, ok := web.Asset("../web.go"); ok {
		t.Fatal("Asset serves a file outside the page")
	}
}
