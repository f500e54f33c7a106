package host_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

func TestAdminAPI(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Admin.Token = "root-token"
	h := startHost(t, cfg)
	call := func(method, path, token string) (int, map[string]any) {
		req, _ := http.NewRequest(method, h.URL()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		return resp.StatusCode, out
	}
	if st, _ := call("GET", "/admin/plugins", ""); st != 401 {
		t.Fatalf("no credential: %d, want 401", st)
	}
	if st, _ := call("GET", "/admin/plugins", "wrong"); st != 401 {
		t.Fatalf("wrong credential: %d, want 401", st)
	}
	names := func() map[string]bool {
		st, out := call("GET", "/admin/plugins", "root-token")
		if st != 200 {
			t.Fatalf("list: %d %v", st, out)
		}
		got := map[string]bool{}
		for _, p := range out["plugins"].([]any) {
			m := p.(map[string]any)
			got[m["name"].(string)] = m["healthy"].(bool)
		}
		return got
	}
	if got := names(); !got["scripted-model"] || !got["calculator"] || len(got) != 2 {
		t.Fatalf("plugins %v, want scripted-model and calculator, healthy", got)
	}
	if st, out := call("DELETE", "/admin/plugins/calculator", "root-token"); st != 200 {
		t.Fatalf("unload: %d %v", st, out)
	}
	if got := names(); got["calculator"] {
		t.Fatalf("calculator still listed after unload: %v", got)
	}
	if st, out := call("POST", "/admin/plugins/echo/load", "root-token"); st != 200 {
		t.Fatalf("load: %d %v", st, out)
	}
	if got := names(); !got["echo"] {
		t.Fatalf("echo not listed after load: %v", got)
	}
	if st, _ := call("POST", "/admin/plugins/..%2Fetc/load", "root-token"); st == 200 {
		t.Fatal("a path outside the plugin folder was loaded")
	}
	if st, out := call("GET", "/admin/health", "root-token"); st != 200 || out["ready"] != true {
		t.Fatalf("health: %d %v", st, out)
	}
	// The A2A credential is not the admin one, and the admin API is off
	// without its own token.
	if st, _ := call("GET", "/healthz", ""); st != 200 {
		t.Fatalf("healthz: %d", st)
	}
	h2 := startHost(t, baseConfig(t.TempDir()))
	req, _ := http.NewRequest("GET", h2.URL()+"/admin/plugins", nil)
	req.Header.Set("Authorization", "Bearer root-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("admin API without a configured token: %d, want 403", resp.StatusCode)
	}
}
