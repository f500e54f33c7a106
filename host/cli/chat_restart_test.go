//go:build linux

package cli_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/host/chat"
)

// A chat whose host stops gracefully mid-turn follows the task again once
// the host is back, and shows the rest of the answer. The stream's end
// (SHUTTING_DOWN, "subscribe again") used to end the turn on screen with
// an error: the answer the restarted host finished was never shown, while
// after a kill -9 (a dropped connection) it was.
func TestChatFollowsTheTaskAcrossAGracefulRestart(t *testing.T) {
	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins")
	if err := copyExamplePlugin(plugins, "scripted-model", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	cfg := host.Config{
		Addr:      "127.0.0.1:0",
		DataDir:   filepath.Join(dir, "data"),
		PluginDir: plugins,
		Plugins: host.PluginsConfig{
			Only:     []string{"scripted-model"},
			CacheDir: filepath.Join(os.TempDir(), "looopy-host-test-wasm-cache"),
			NoWatch:  true,
		},
		Limits: host.LimitsConfig{Heartbeat: host.Duration(100 * time.Millisecond), ShutdownGrace: host.Duration(100 * time.Millisecond)},
	}
	start := func() *host.Main {
		t.Helper()
		m := host.NewMain()
		m.Config = cfg
		m.Stdout = io.Discard
		if err := m.Run(context.Background()); err != nil {
			t.Fatalf("start the host: %v", err)
		}
		return m
	}
	m := start()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = m.Close()
		}
	})
	cfg.Addr = m.Addr() // the restarted host listens where the chat looks

	in, out, _ := runChat(t, chat.Options{URL: m.URL()})
	out.expect(t, "you> ")
	fmt.Fprintln(in, "SLOW 8s")
	out.expect(t, " tick2")
	if err := m.Close(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	stopped = true
	out.expect(t, "following task")
	m = start()
	stopped = false
	rest := out.expect(t, "Done.")
	if !strings.Contains(rest, " tick8") {
		t.Fatalf("the rest of the answer is not shown:\n%s", out.String())
	}
	out.expect(t, "you> ")
	fmt.Fprintln(in, "/quit")
}
