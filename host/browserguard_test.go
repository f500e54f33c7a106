package host

import (
	"strings"
	"testing"
)

// TestBrowserGuardNames: which Host and Origin headers the guard lets
// through for each configuration: the loopback default, a public name in
// publicUrl, listed names and origins, "*", a bind on every interface.
func TestBrowserGuardNames(t *testing.T) {
	type probe struct {
		host, origin string
		want         bool
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		probes []probe
	}{
		{"loopback default", Config{Addr: "127.0.0.1:8080"}, []probe{
			{"127.0.0.1:8080", "", true},
			{"localhost:8080", "http://localhost:8080", true},
			{"LOCALHOST.:8080", "", true},
			{"[::1]:8080", "http://[::1]:8080", true},
			{"app.localhost:8080", "", true},
			{"10.1.2.3:8080", "", true}, // an address cannot be rebound
			{"localhost:9000", "http://localhost:9000", true},
			{"attacker.example:8080", "", false},
			{"attacker.example:8080", "http://attacker.example:8080", false},
			{"localhost.attacker.example", "", false},
			{"127.0.0.1:8080", "http://attacker.example", false},
			{"127.0.0.1:8080", "http://127.0.0.1:8081", false},
			{"127.0.0.1:8080", "null", false},
			{"127.0.0.1:8080", "http://127.0.0.1:8080/path", false},
			{"127.0.0.1:8080", "http://127.0.0.1:8080", true},
			{"127.0.0.1", "http://127.0.0.1", true},
			{"127.0.0.1:80", "http://127.0.0.1", true},
		}},
		{"behind a proxy", Config{Addr: "127.0.0.1:8080", PublicURL: "https://agent.example.com/"}, []probe{
			{"agent.example.com", "https://agent.example.com", true},
			{"127.0.0.1:8080", "https://agent.example.com", true}, // a proxy that rewrites Host
			{"agent.example.com:443", "https://agent.example.com:443", true},
			{"127.0.0.1:8080", "http://agent.example.com", false},
			{"other.example.com", "", false},
		}},
		{"listed", Config{Addr: "localhost:8080", Server: ServerConfig{AllowedHosts: []string{"Looopy.internal"}, AllowedOrigins: []string{"https://app.example:3000"}}}, []probe{
			{"looopy.internal:8080", "https://app.example:3000", true},
			{"looopy.internal:8080", "https://app.example", false},
			{"attacker.example:8080", "", false},
		}},
		{"every interface", Config{Addr: ":8080"}, []probe{
			{"looopy:8080", "", true},
			{"looopy:8080", "http://looopy:8080", true},
			{"looopy:8080", "http://attacker.example", false},
		}},
		{"every interface, listed", Config{Addr: "0.0.0.0:8080", Server: ServerConfig{AllowedHosts: []string{"looopy"}}}, []probe{
			{"looopy:8080", "", true},
			{"192.168.1.5:8080", "", true},
			{"attacker.example:8080", "", false},
		}},
		{"any", Config{Addr: "127.0.0.1:8080", Server: ServerConfig{AllowedHosts: []string{"*"}, AllowedOrigins: []string{"*"}}}, []probe{
			{"anything.example", "http://elsewhere.example", true},
		}},
	} {
		g := newBrowserGuard(tc.cfg.withDefaults())
		for _, p := range tc.probes {
			got := g.hostAllowed(p.host) && g.originAllowed(p.origin, p.host)
			if got != p.want {
				t.Errorf("%s: Host %q Origin %q: allowed %v, want %v", tc.name, p.host, p.origin, got, p.want)
			}
		}
	}
}

func TestServerConfigValidation(t *testing.T) {
	for _, bad := range []ServerConfig{
		{AllowedHosts: []string{""}},
		{AllowedHosts: []string{"http://x.example"}},
		{AllowedHosts: []string{"x.example:8080"}},
		{AllowedHosts: []string{"x.example/path"}},
		{AllowedOrigins: []string{"x.example"}},
		{AllowedOrigins: []string{"http://x.example/path"}},
		{AllowedOrigins: []string{"ftp://x.example"}},
		{AllowedOrigins: []string{"null"}},
	} {
		err := (Config{Server: bad}).Validate()
		if err == nil || !strings.Contains(err.Error(), "server.allowed") {
			t.Errorf("%+v: %v, want an error naming the setting", bad, err)
		}
	}
	for _, good := range []ServerConfig{
		{AllowedHosts: []string{"*"}, AllowedOrigins: []string{"*"}},
		{AllowedHosts: []string{"agent.example.com", "[::1]"}, AllowedOrigins: []string{"https://app.example.com", "http://localhost:3000/"}},
	} {
		if err := (Config{Server: good}).Validate(); err != nil {
			t.Errorf("%+v: %v", good, err)
		}
	}
}

func TestDownloadHeaders(t *testing.T) {
	for typ, want := range map[string]string{
		"text/html":                "text/html",
		"text/csv; charset=utf-8":  "text/csv; charset=utf-8",
		"text/html\r\nX-Evil: 1":   "application/octet-stream",
		"":                         "application/octet-stream",
		"not a type":               "application/octet-stream",
		"application/json;x=\"a\"": "application/json; x=a",
	} {
		if got := downloadType(typ); got != want {
			t.Errorf("downloadType(%q) = %q, want %q", typ, got, want)
		}
	}
	for _, tc := range []struct{ name, id, want string }{
		{"report.html", "art-1", `attachment; filename=report.html`},
		{"", "art-1", `attachment; filename=art-1`},
		{"a\r\nb/c\".txt", "art-1", `attachment; filename="a__b_c\".txt"`},
	} {
		if got := attachment(tc.name, tc.id); got != tc.want {
			t.Errorf("attachment(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
