package host_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// inspector returns the official MCP inspector's launcher, installed from
// host/testdata/inspector's lock file (npm ci; .ci/run does it first). The
// test is skipped, loudly, only when npm itself is missing.
func inspector(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs("testdata/inspector")
	bin := filepath.Join(dir, "node_modules", ".bin", "mcp-inspector")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("SKIPPED LOUDLY: npm is not installed, so the official MCP inspector (@modelcontextprotocol/inspector) cannot run; install Node.js 20+ and npm to run this test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return bin
}

func runInspector(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--cli"}, args...)...)
	cmd.Env = append(os.Environ(), "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "catalog.json"), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("inspector %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// The inspector's four runs (a Node.js process each) wait on Node and on
// the host: the test runs beside the others.
func TestMCPInspectorCLI(t *testing.T) {
	t.Parallel()
	bin := inspector(t)
	th := startHost(t, mcpHostConfig(t))
	url := th.URL() + "/mcp"
	auth := "Authorization: Bearer k-alice"

	out := runInspector(t, bin, url, "--transport", "http", "--header", auth, "--method", "tools/list")
	for _, want := range []string{`"calc"`, `"make_dataset"`, `"ask_agent"`} {
		if !strings.Contains(out, want) {
			t.Errorf("tools/list from the inspector lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "outside_") {
		t.Errorf("the inspector sees an outside MCP server's tool on /mcp:\n%s", out)
	}
	out = runInspector(t, bin, url, "--transport", "http", "--header", auth,
		"--method", "tools/call", "--tool-name", "calc", "--tool-arg", "expression=6*7")
	if !strings.Contains(out, "42") {
		t.Errorf("tools/call calc from the inspector:\n%s", out)
	}
	// Without a credential the inspector is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--cli", url, "--transport", "http", "--method", "tools/list")
	cmd.Env = append(os.Environ(), "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "catalog.json"))
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("the inspector listed tools with no credential:\n%s", out)
	}

	// The stdio command, as the inspector starts it.
	looopy, _ := binaries(t)
	cfgFile := filepath.Join(t.TempDir(), "looopy.json")
	cfg := fmt.Sprintf(`{"dataDir":%q,"pluginDir":%q,"plugins":{"only":["scripted-model","calculator"],"cacheDir":%q}}`,
		t.TempDir(), absPath(t, "../examples/plugins"), wasmCache)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out = runInspector(t, bin, looopy, "mcp", "-e", "LOOOPY_CONFIG="+cfgFile, "--connect-timeout", "180000",
		"--method", "tools/call", "--tool-name", "calc", "--tool-arg", "expression=1+2*3")
	if !strings.Contains(out, "7") {
		t.Errorf("tools/call over `looopy mcp` from the inspector:\n%s", out)
	}
}

func absPath(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
