package plugins

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A Go plugin built without -buildmode=c-shared is a WASI command: its
// exports trap with runtime.notInitialized. Loading it names the flag.
func TestGoCommandModuleNamesTheMissingFlag(t *testing.T) {
	out := filepath.Join(t.TempDir(), "echo-command.wasm")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./testdata/guests/echo")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	dir := t.TempDir()
	pd := install(t, dir, "echo-command", out, nil)
	r := newRegistry(t, Config{})
	_, err := r.Load(context.Background(), pd)
	if err == nil {
		t.Fatal("a WASI command module loaded")
	}
	for _, want := range []string{"-buildmode=c-shared", "exports _start, not _initialize"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "notInitialized") {
		t.Errorf("error %q is the runtime's trap, not the cause", err)
	}
}
