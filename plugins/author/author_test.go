package author

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/looopy-go/looopy/plugins"
)

func TestSampleArgumentsFollowTheSchema(t *testing.T) {
	for schema, want := range map[string]string{
		``:                  `{}`,
		`{"type":"object"}`: `{}`,
		`{"type":"string"}`: `{}`,
		`{"type":"object","properties":{"s":{"type":"string"},"n":{"type":"integer","minimum":5},"f":{"type":"number","maximum":1},"b":{"type":"boolean"}}}`:        `{"b":true,"f":1,"n":5,"s":"example"}`,
		`{"type":"object","properties":{"e":{"enum":["x","y"]},"d":{"type":"string","default":"dft"},"x":{"type":"string","examples":["ex"]}}}`:                     `{"d":"dft","e":"x","x":"ex"}`,
		`{"type":"object","properties":{"l":{"type":"array","items":{"type":"integer"}},"o":{"type":"object","properties":{"k":{"type":"string","minLength":9}}}}}`: `{"l":[1],"o":{"k":"xxxxxxxxx"}}`,
	} {
		got, err := SampleArguments(json.RawMessage(schema))
		if err != nil || string(got) != want {
			t.Errorf("%s: %s, %v; want %s", schema, got, err, want)
		}
	}
	if _, err := SampleArguments(json.RawMessage(`{`)); err == nil {
		t.Error("a broken schema gave arguments")
	}
}

func TestNewRefusesBadNamesAndFullFolders(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"", "Caps", "1abc", "a b", "../x", strings.Repeat("a", 41)} {
		if err := New(filepath.Join(dir, "x"), WAT, name, NewOptions{}); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := New(dir, WAT, "ok", NewOptions{}); err == nil {
		t.Error("New wrote into a folder that is not empty")
	}
	if err := New(filepath.Join(dir, "g"), Go, "ok", NewOptions{LooopySrc: dir}); err == nil {
		t.Error("a Go plugin against a folder that is not a Looopy checkout")
	}
	for lang, files := range map[Lang][]string{WAT: {"w.wat"}, C: {"w.c"}, Rust: {"w.rs"}, AssemblyScript: {"package.json", "index.ts"}} {
		d := filepath.Join(t.TempDir(), "p")
		if err := New(d, lang, "w", NewOptions{}); err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		for _, f := range files {
			if m, _ := filepath.Glob(filepath.Join(d, "*", f)); len(m) == 0 {
				if _, err := os.Stat(filepath.Join(d, f)); err != nil {
					t.Errorf("%s: no %s", lang, f)
				}
			}
		}
		if got, err := Detect(d); err != nil || got != lang {
			t.Errorf("Detect of a new %s plugin: %s, %v", lang, got, err)
		}
	}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// writePlugin makes a plugin folder with a manifest whose sha256 matches
// its (fake) module.
func writePlugin(t *testing.T, dir, version string, wasm []byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	m := fmt.Sprintf(`{"name":"p","version":%q,"kind":"tool","wasm":"p.wasm","sha256":%q}`, version, sha(wasm))
	if err := os.WriteFile(filepath.Join(dir, "plugin.json"), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
}

// While versions are installed over each other, a reader that does what
// the watcher does (read plugin.json, then the module it names) never sees
// a manifest whose module is missing or has another digest.
func TestInstallIsNeverSeenHalfWritten(t *testing.T) {
	src1, src2, to := t.TempDir(), t.TempDir(), t.TempDir()
	writePlugin(t, src1, "1", []byte(strings.Repeat("one", 200000)))
	writePlugin(t, src2, "2", []byte(strings.Repeat("two!", 300000)))
	if _, err := Install(src1, to); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var seen, bad atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			m, err := plugins.ReadManifest(filepath.Join(to, "p", "plugin.json"))
			if err != nil {
				bad.Add(1)
				t.Errorf("manifest: %v", err)
				return
			}
			b, err := os.ReadFile(filepath.Join(m.Dir, m.Wasm))
			if err != nil {
				// The module was replaced since the manifest was read: a
				// watcher reads again. A mismatched digest would be a bug.
				continue
			}
			if sha(b) != m.SHA256 {
				bad.Add(1)
				t.Errorf("version %s: the module's digest is not the manifest's", m.Version)
				return
			}
			seen.Add(1)
		}
	}()
	for i := 0; i < 40 && !t.Failed(); i++ {
		src := src1
		if i%2 == 0 {
			src = src2
		}
		if _, err := Install(src, to); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() > 0 || seen.Load() == 0 {
		t.Fatalf("consistent reads %d, bad %d", seen.Load(), bad.Load())
	}
	entries, _ := os.ReadDir(filepath.Join(to, "p"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".installing-") {
			t.Errorf("a temporary file was left: %s", e.Name())
		}
	}
}

func TestInstallRefusesAnUnbuiltOrStalePlugin(t *testing.T) {
	src, to := t.TempDir(), t.TempDir()
	writePlugin(t, src, "1", []byte("module"))
	if err := os.WriteFile(filepath.Join(src, "p.wasm"), []byte("changed after the build"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(src, to); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("stale module installed: %v", err)
	}
	if entries, _ := os.ReadDir(to); len(entries) != 0 {
		t.Errorf("something was written: %v", entries)
	}
}

func TestBuildWritesTheDigest(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "plugin.json")
	if err := os.WriteFile(p, []byte("{\n  \"name\": \"x\",\n  \"sha256\": \"\",\n  \"kind\": \"tool\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha([]byte("x"))
	if err := writeSHA256(p, sum); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if want := "{\n  \"name\": \"x\",\n  \"sha256\": \"" + sum + "\",\n  \"kind\": \"tool\"\n}\n"; string(b) != want {
		t.Errorf("manifest after build:\n%s\nwant\n%s", b, want)
	}
	if err := os.WriteFile(p, []byte(`{"name":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSHA256(p, sum); err == nil {
		t.Error("a manifest without sha256 was accepted")
	}
}

// A hostile plugin folder whose module is not a file of its own (a link,
// here to a file outside the folder whose digest the manifest names; a
// link to /dev/zero takes the same path), a FIFO, or a module over the
// size limit with the right digest, is refused before its content is
// read: the installer neither fills its memory, nor waits for ever, nor
// copies a file from outside the folder into the plugin folder.
func TestInstallRefusesModulesThatAreNotPlainFiles(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(outside, []byte("module"), 0o600))
	cases := map[string]func(t *testing.T, src string){
		"link outside": func(t *testing.T, src string) {
			writePlugin(t, src, "1", []byte("module"))
			must(t, os.Remove(filepath.Join(src, "p.wasm")))
			must(t, os.Symlink(outside, filepath.Join(src, "p.wasm")))
		},
		"fifo": func(t *testing.T, src string) {
			writePlugin(t, src, "1", []byte("module"))
			must(t, os.Remove(filepath.Join(src, "p.wasm")))
			must(t, syscall.Mkfifo(filepath.Join(src, "p.wasm"), 0o644))
		},
		"over the limit": func(t *testing.T, src string) {
			big := make([]byte, plugins.DefaultModuleBytes+1)
			writePlugin(t, src, "1", big)
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			src, to := t.TempDir(), t.TempDir()
			mk(t, src)
			done := make(chan error, 1)
			go func() { _, err := Install(src, to); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("installed")
				}
				t.Logf("refused: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatal("Install still reading after 60 s")
			}
			if entries, _ := os.ReadDir(to); len(entries) != 0 {
				t.Errorf("something was written: %v", entries)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
