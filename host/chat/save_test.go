package chat

import (
	"strings"
	"testing"
)

// The name /save gives an artifact is never a dotfile or a bare name a
// tool reads, never leaves the folder, and stays short, whatever the
// agent calls the artifact.
func TestSaveNameIsTheChatsNotTheAgents(t *testing.T) {
	cases := map[string]string{
		"../.bash_login":        "artifact-1-bash_login.txt",
		".envrc":                "artifact-1-envrc.txt",
		"Makefile":              "artifact-1-Makefile.txt",
		"/etc/passwd":           "artifact-1-passwd.txt",
		"..":                    "artifact-1-artifact.txt",
		"":                      "artifact-1-artifact.txt",
		"report.csv":            "artifact-1-report.csv",
		"a\x1b]0;x\x07b.md":     "artifact-1-a]0;xb.md",
		"  . .hidden\nname.pdf": "artifact-1-hidden⏎name.pdf",
	}
	for label, want := range cases {
		if got := saveName(1, label, ".txt"); got != want {
			t.Errorf("saveName(%q) = %q, want %q", label, got, want)
		}
	}
	long := saveName(2, strings.Repeat("é", 300)+".json", ".txt")
	if len(long) > 120 || !strings.HasSuffix(long, ".json") || !strings.HasPrefix(long, "artifact-2-") {
		t.Errorf("a 600-byte name became %q (%d bytes)", long, len(long))
	}
}
