package host_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/store"
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

// A config file's error names the file, the line and column, and the
// field; a bare number where a duration goes is refused naming the field.
func TestConfigErrorsSayWhere(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, body, want string }{
		{"bare-duration", "{\n  \"limits\": {\n    \"turnTimeout\": 10\n  }\n}\n", `:3:20: limits.turnTimeout: duration 10: write a string with a unit, like "10s"`},
		{"unknown-field", "{\n  \"plugins\": {\"loadTimeout\": \"3s\",\n    \"laodTimeout\": \"4s\"}\n}", `:3:5: plugins.laodTimeout: unknown field "laodTimeout"`},
		{"wrong-type", "{\"addr\": \"x\",\n \"inMemory\": \"yes\"}", `:2:14: inMemory: json: cannot unmarshal string`},
		{"syntax", "{\n \"addr\": \"x\",\n}", `:3:1: invalid character '}'`},
		{"truncated", "{\n \"addr\": \"x\"", `:2:13: unexpected EOF`},
		{"trailing", "{}\n{}", `:2:1: trailing data`},
		{"invalid", `{"logFormat":"xml"}`, `invalid.json: config: logFormat`},
		// after containers of each kind: an array of objects, an object
		{"after-array-of-objects", "{\"auth\": {\"keys\": [{\"key\": \"k\", \"principal\": \"p\"}],\n  \"adminTokn\": \"x\"}}", `:2:3: auth.adminTokn: unknown field "adminTokn"`},
		{"after-object", "{\"limits\": {\"turnTimeout\": \"1s\"},\n \"zz\": 1}", `:2:2: zz: unknown field "zz"`},
		{"after-nested-arrays", "{\"remoteAgents\": [{\"name\": \"a\", \"url\": \"http://x\", \"headers\": {\"h\": \"v\"}}],\n \"zz\": [[1], [2]]}", `:2:2: zz: unknown field "zz"`},
	} {
		file := filepath.Join(dir, tc.name+".json")
		if err := os.WriteFile(file, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := host.LoadConfig(file)
		if err == nil || !strings.HasPrefix(err.Error(), file) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %s%s", tc.name, err, file, tc.want)
		}
	}
}

// A damaged data folder is one plain message: the folder once, what to do.
func TestCorruptDataFolderMessage(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte("this is not a badger manifest, at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := host.NewMain()
	m.Config = host.Config{Addr: "127.0.0.1:0", DataDir: dir}
	m.Stdout = io.Discard
	err := m.Run(context.Background())
	if err == nil {
		_ = m.Close()
		t.Fatal("a damaged data folder opened")
	}
	msg := err.Error()
	if strings.Count(msg, dir) != 1 || !strings.Contains(msg, "does not open as a Looopy database") || !strings.Contains(msg, "move it aside") {
		t.Fatalf("message: %s", msg)
	}
}

// A data folder another host has open is reported as in use (ErrDataDirInUse,
// decided by probing the database's lock, not by the store's words), and
// `looopy mcp` on it adds how to reach that host instead.
func TestDataFolderInUseMessage(t *testing.T) {
	dir := t.TempDir()
	held, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	m := host.NewMain()
	m.Config = host.Config{Addr: "127.0.0.1:0", DataDir: dir}
	m.Stdout = io.Discard
	err = m.Run(context.Background())
	if err == nil {
		_ = m.Close()
		t.Fatal("a data folder in use opened")
	}
	if !errors.Is(err, host.ErrDataDirInUse) || strings.Count(err.Error(), dir) != 1 {
		t.Fatalf("data folder in use: %v, want ErrDataDirInUse naming the folder once", err)
	}
	m = host.NewMain()
	m.Config = host.Config{Addr: "127.0.0.1:0", DataDir: dir}
	m.Stdout = io.Discard
	err = m.ServeMCPStdio(context.Background(), io.NopCloser(strings.NewReader("")), nopWriteCloser{io.Discard})
	if !errors.Is(err, host.ErrDataDirInUse) || !strings.Contains(err.Error(), "is a host already serving this data folder?") {
		t.Fatalf("looopy mcp on a data folder in use: %v", err)
	}
	// A damaged folder that nobody holds is not "in use".
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte("not a manifest"), 0o600); err != nil {
		t.Fatal(err)
	}
	m = host.NewMain()
	m.Config = host.Config{Addr: "127.0.0.1:0", DataDir: dir}
	m.Stdout = io.Discard
	if err := m.Run(context.Background()); err == nil || errors.Is(err, host.ErrDataDirInUse) {
		if err == nil {
			_ = m.Close()
		}
		t.Fatalf("damaged folder nobody holds: %v", err)
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// A plugin folder that is not there is named as such, not reported as a
// missing model plugin.
func TestMissingPluginFolderMessage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-plugins")
	m := host.NewMain()
	m.Config = host.Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), PluginDir: missing}
	m.Stdout = io.Discard
	err := m.Run(context.Background())
	if err == nil {
		_ = m.Close()
		t.Fatal("a host started on a plugin folder that does not exist")
	}
	if !strings.Contains(err.Error(), "plugin folder "+missing+" does not exist") || strings.Contains(err.Error(), "model plugin") {
		t.Fatalf("message: %v", err)
	}
}

// The default bounds on running turns follow the memory and the CPUs, and
// stay within their floor and ceiling.
func TestDefaultTurnBounds(t *testing.T) {
	for _, c := range []struct {
		mem  int64
		cpus int
		want int
	}{
		{8 << 30, 2, 128},    // CPUs bound it
		{1 << 30, 8, 32},     // memory bounds it: 512 MiB at 16 MiB a turn
		{256 << 20, 1, 16},   // the floor
		{1 << 40, 128, 1024}, // the ceiling
	} {
		if got := host.DefaultMaxRunning(c.mem, c.cpus); got != c.want {
			t.Errorf("DefaultMaxRunning(%d MiB, %d CPUs) = %d, want %d", c.mem>>20, c.cpus, got, c.want)
		}
	}
	if got := host.DefaultMaxRunningPerPrincipal(128); got != 32 {
		t.Errorf("DefaultMaxRunningPerPrincipal(128) = %d, want 32", got)
	}
	if got := host.DefaultMaxRunningPerPrincipal(2); got != 1 {
		t.Errorf("DefaultMaxRunningPerPrincipal(2) = %d, want 1", got)
	}
	if m := host.MemoryLimit(); m <= 0 {
		t.Errorf("MemoryLimit() = %d", m)
	}
	// Badger's memory: a sixteenth of the host's, within [64 MiB, 512 MiB].
	for mem, want := range map[int64]int64{18 << 30: 512 << 20, 2 << 30: 128 << 20, 256 << 20: 64 << 20} {
		if got := host.DefaultStoreMemory(mem); got != want {
			t.Errorf("DefaultStoreMemory(%d MiB) = %d MiB, want %d MiB", mem>>20, got>>20, want>>20)
		}
	}
	for _, bad := range []string{`{"limits":{"maxRunning":-2}}`, `{"limits":{"maxRunningPerPrincipal":-2}}`, `{"store":{"memoryBytes":-1}}`} {
		if _, err := host.ParseConfig([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
