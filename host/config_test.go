package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/host"
)

func TestParseConfigIsStrict(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"addr":"x","bogus":1}`, "unknown field"},
		{`{"auth":{"enabled":true}}`, "at least one key"},
		{`{"auth":{"keys":[{"key":"k"}]}}`, "empty principal"},
		{`{"limits":{"turnTimeout":"soon"}}`, "duration"},
		{`{"logFormat":"xml"}`, "logFormat"},
		{`{} {}`, "trailing"},
	} {
		if _, err := host.ParseConfig([]byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.body, err, tc.want)
		}
	}
	c, err := host.ParseConfig([]byte(`{"addr":"127.0.0.1:1","limits":{"turnTimeout":"90s"},"auth":{"enabled":true,"keys":[{"key":"env:K","principal":"p"}]}}`))
	if err != nil || c.Addr != "127.0.0.1:1" || time.Duration(c.Limits.TurnTimeout) != 90*time.Second {
		t.Fatalf("config %+v, %v", c, err)
	}
}

func TestParseFlagsPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "looopy.json")
	if err := os.WriteFile(file, []byte(`{"addr":"127.0.0.1:1","dataDir":"/from/file","pluginDir":"/plugins/file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LOOOPY_DATA", "/from/env")
	t.Setenv("LOOOPY_ADDR", "127.0.0.1:2")
	m := host.NewMain()
	if err := m.ParseFlags([]string{"-config", file, "-addr", "127.0.0.1:3"}); err != nil {
		t.Fatal(err)
	}
	if m.Config.Addr != "127.0.0.1:3" || m.Config.DataDir != "/from/env" || m.Config.PluginDir != "/plugins/file" {
		t.Fatalf("flag > env > file not respected: %+v", m.Config)
	}
	if err := host.NewMain().ParseFlags([]string{"-nope"}); err == nil {
		t.Fatal("an unknown flag was accepted")
	}
	t.Setenv("LOOOPY_AUTH", "maybe")
	if err := host.NewMain().ParseFlags(nil); err == nil || !strings.Contains(err.Error(), "LOOOPY_AUTH") {
		t.Fatalf("bad LOOOPY_AUTH: %v", err)
	}
}

func TestExampleConfigParses(t *testing.T) {
	c, err := host.LoadConfig("../cmd/host/looopy.example.json")
	if err != nil {
		t.Fatalf("the example config does not parse: %v", err)
	}
	if !c.Auth.Enabled || len(c.Auth.Keys) != 2 || c.Model.Plugin != "scripted-model" {
		t.Fatalf("example config read as %+v", c)
	}
}
