package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Colours are for terminals only: a pipe, a buffer or a file gets none.
func TestChatColoursOnlyOnATerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Fatal("a buffer taken for a terminal")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if isTerminal(f) {
		t.Fatal("a regular file taken for a terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(); _ = w.Close() }()
	if isTerminal(w) {
		t.Fatal("a pipe taken for a terminal")
	}
}

// Bad flags and arguments are refused with the usage code, before any
// connection is tried.
func TestChatRefusesBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"chat", "-color", "purple"},
		{"chat", "http://a", "http://b"},
		{"chat", "-no-such-flag"},
	} {
		code, _, stderr := run(args...)
		if code != 2 || !strings.Contains(stderr, "looopy chat:") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
	code, stdout, _ := run("chat", "-h")
	if code != 0 || !strings.Contains(stdout, "-context") || !strings.Contains(stdout, "-api-key") {
		t.Errorf("chat -h: exit %d, %q", code, stdout)
	}
}
