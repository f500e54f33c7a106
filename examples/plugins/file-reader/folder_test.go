package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testFolder(t *testing.T) (Folder, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "granted")
	must(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "notes.txt"), []byte("hello notes"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "sub", "deep.txt"), []byte("deep"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "bin.dat"), []byte{0xff, 0xfe, 0x00, 0x81}, 0o644))
	must(t, os.WriteFile(filepath.Join(base, "secret.txt"), []byte("top secret"), 0o644))
	must(t, os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(root, "link-out")))
	return Folder{Root: root}, base
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestReadFile(t *testing.T) {
	f, _ := testFolder(t)
	for _, p := range []string{"notes.txt", "./notes.txt", "sub/../notes.txt", filepath.Join(f.Root, "notes.txt")} {
		text, trunc, err := f.ReadFile(p, 0)
		if strings.Contains(p, "..") {
			if !errors.Is(err, errEscape) {
				t.Errorf("%s: %v, want the escape error", p, err)
			}
			continue
		}
		if err != nil || text != "hello notes" || trunc {
			t.Errorf("%s: %q %v %v", p, text, trunc, err)
		}
	}
	if text, _, err := f.ReadFile("sub/deep.txt", 0); err != nil || text != "deep" {
		t.Errorf("sub/deep.txt: %q %v", text, err)
	}
	text, trunc, err := f.ReadFile("notes.txt", 5)
	if err != nil || text != "hello" || !trunc {
		t.Errorf("truncated read: %q %v %v", text, trunc, err)
	}
}

func TestReadFileTruncatesOnACharacterBoundary(t *testing.T) {
	f, _ := testFolder(t)
	must(t, os.WriteFile(filepath.Join(f.Root, "utf8.txt"), []byte("aé€"), 0o644)) // 1 + 2 + 3 bytes
	text, trunc, err := f.ReadFile("utf8.txt", 4)
	if err != nil || text != "aé" || !trunc {
		t.Errorf("got %q %v %v, want \"aé\" truncated", text, trunc, err)
	}
}

func TestReadFileRefusesEscapes(t *testing.T) {
	f, base := testFolder(t)
	for _, p := range []string{"../secret.txt", "sub/../../secret.txt", "..", `..\secret.txt`, filepath.Join(base, "secret.txt"), "/etc/passwd", "link-out"} {
		_, _, err := f.ReadFile(p, 0)
		if !errors.Is(err, errEscape) {
			t.Errorf("%s: error %v, want %v", p, err, errEscape)
		}
	}
}

func TestReadFileErrors(t *testing.T) {
	f, _ := testFolder(t)
	tests := map[string]string{
		"missing.txt": "no such file",
		"sub":         "is a folder; use list_dir",
		"bin.dat":     "not a text file (4 bytes)",
	}
	for p, want := range tests {
		if _, _, err := f.ReadFile(p, 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", p, err, want)
		}
	}
	if _, _, err := (Folder{}).ReadFile("x", 0); err == nil || !strings.Contains(err.Error(), "no folder configured") {
		t.Errorf("no root: %v", err)
	}
}

func TestListDir(t *testing.T) {
	f, _ := testFolder(t)
	es, err := f.ListDir("")
	if err != nil {
		t.Fatal(err)
	}
	got := FormatListing(es)
	want := "bin.dat\t4 bytes\nlink-out@\nnotes.txt\t11 bytes\nsub/\n"
	if got != want {
		t.Errorf("listing:\n%s\nwant\n%s", got, want)
	}
	if es, err := f.ListDir("sub"); err != nil || len(es) != 1 || es[0].Name != "deep.txt" {
		t.Errorf("sub: %v %v", es, err)
	}
	if _, err := f.ListDir("../"); !errors.Is(err, errEscape) {
		t.Errorf("../: %v", err)
	}
	if _, err := f.ListDir("notes.txt"); err == nil {
		t.Error("listing a file gave no error")
	}
	must(t, os.Mkdir(filepath.Join(f.Root, "empty"), 0o755))
	if es, err := f.ListDir("empty"); err != nil || FormatListing(es) != "(empty folder)" {
		t.Errorf("empty: %v %v", es, err)
	}
}
