package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBlackBoxConnectionFloodKeepsServing: a client without a key opens
// connections past the process's open-file limit (the host runs with a
// limit of 256), each with an unfinished request. The host must neither
// stop its server (an accept that fails for want of descriptors is retried)
// nor run out of descriptors (connections past the cap are closed at once):
// once the flood is gone a normal client is served, and SIGTERM ends the
// process.
func TestBlackBoxConnectionFloodKeepsServing(t *testing.T) {
	t.Parallel()
	bin := sandboxHostBinary(t)
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Fatal("prlimit (util-linux) is needed to run the host with a low open-file limit")
	}
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	installPlugin(t, pluginDir, "scripted-model", "model", readExample(t, "scripted-model"),
		map[string]any{"hostFunctions": []string{"emit", "kv_get", "kv_set", "kv_delete", "result_read"}},
		map[string]any{"script": `{"default":{"steps":[{"text":"ok"}]}}`})
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := map[string]any{
		"addr": fmt.Sprintf("127.0.0.1:%d", port), "publicUrl": base,
		"dataDir": filepath.Join(top, "data"), "pluginDir": pluginDir,
		"plugins": map[string]any{"cacheDir": blackboxCache()},
		"limits":  map[string]any{"shutdownGrace": "2s"},
	}
	cb, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(top, "looopy.json")
	if err := os.WriteFile(cfgPath, cb, 0o600); err != nil {
		t.Fatal(err)
	}
	h := &sandboxHost{base: base, out: &syncBuf{}}
	cmd := exec.Command("prlimit", "--nofile=256:256", bin, "-config", cfgPath, "-log-format", "text")
	cmd.Dir = top
	cmd.Stdout, cmd.Stderr = h.out, h.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.watch(cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("host output:\n%s", h.out.String())
		}
	})
	h.waitFor(t, "the host to listen", 5*time.Minute, h.ready)

	// The flood: more connections than the host has descriptors, each
	// with an unfinished request, held open together.
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			_ = c.Close()
		}
	}()
	for i := 0; i < 400; i++ {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
		if err != nil {
			continue // the backlog is full: the flood is as big as it gets
		}
		_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n"))
		flood = append(flood, c)
	}
	time.Sleep(time.Second) // let the host accept what it will
	for _, c := range flood {
		_ = c.Close()
	}
	flood = nil

	h.waitFor(t, "the host to serve again after the flood", time.Minute, h.ready)
	if out := h.out.String(); strings.Contains(out, "server stopped") {
		t.Fatalf("the server stopped during the flood:\n%s", out)
	}
	if !strings.Contains(h.out.String(), "connection cap reached") {
		t.Fatalf("no connection was closed over the cap: the flood did not reach it")
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-h.exited:
		if err != nil {
			t.Fatalf("the host exited with %v after SIGTERM", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the host did not exit within a minute of SIGTERM")
	}
}
