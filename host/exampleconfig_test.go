package host_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/host"
)

// The configuration the repository ships starts with its environment set:
// the plugins of the example folder that ask for more than it grants are
// logged (through the redacting handler, with list attributes) and the host
// serves, and no secret reaches the log.
func TestExampleConfigStartsWithSecretsSet(t *testing.T) {
	cfg, err := host.LoadConfig("../cmd/host/looopy.example.json")
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{
		"LOOOPY_KEY_ALICE":             "alice-key-0123456789",
		"LOOOPY_KEY_BOB":               "bob-key-0123456789",
		"LOOOPY_ADMIN_TOKEN":           "admin-token-0123456789",
		"OPENAI_API_KEY":               "sk-openai-0123456789",
		"NOTES_TOKEN":                  "notes-token-0123456789",
		"SEARCH_MCP_TOKEN":             "search-token-0123456789",
		"RESEARCH_AGENT_AUTHORIZATION": "Bearer research-token-0123456789",
		"LOOOPY_METRICS_TOKEN":         "metrics-token-0123456789",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	cfg.Addr = "127.0.0.1:0"
	cfg.PublicURL = ""
	cfg.DataDir = t.TempDir()
	cfg.PluginDir = "../examples/plugins"
	cfg.Plugins.CacheDir = wasmCache
	cfg.Plugins.NoWatch = true
	var log syncBuffer
	m := host.NewMain()
	m.Config = cfg
	m.Stdout = &log
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("run host: %v\n%s", err, log.String())
	}
	t.Cleanup(func() { _ = m.Close() })
	resp, err := http.Get(m.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
	out := log.String()
	if !strings.Contains(out, "not granted") {
		t.Fatalf("no plugin was refused a capability, so the list attribute path was not taken:\n%s", out)
	}
	for name, v := range secrets {
		if strings.Contains(out, v) {
			t.Fatalf("the value of %s reached the log", name)
		}
	}
}

// The operator sets the plugins' budgets, load timeout and reserved paths
// in the config file; a misspelt budget is an error.
func TestPluginBudgetsInConfig(t *testing.T) {
	c, err := host.ParseConfig([]byte(`{"plugins":{"loadTimeout":"3s","reserved":["/srv/secrets"],"budgets":{"logBytesPerCall":1024,"kvQuotaBytes":-1,"maxTools":8}}}`))
	if err != nil {
		t.Fatal(err)
	}
	b := c.Plugins.Budgets
	if b.LogBytesPerCall != 1024 || b.KVQuotaBytes != -1 || b.MaxTools != 8 || c.Plugins.LoadTimeout != host.Duration(3*time.Second) || c.Plugins.Reserved[0] != "/srv/secrets" {
		t.Fatalf("plugins config = %+v", c.Plugins)
	}
	if _, err := host.ParseConfig([]byte(`{"plugins":{"budgets":{"logBytesPerCal":1}}}`)); err == nil {
		t.Fatal("a misspelt budget was accepted")
	}
}
