package author

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	"github.com/looopy-go/looopy/plugins"
)

// manifestHead is what Build needs of plugin.json before it is complete.
type manifestHead struct {
	Name string `json:"name"`
	Wasm string `json:"wasm"`
}

func readHead(dir string) (manifestHead, error) {
	var h manifestHead
	b, err := os.ReadFile(filepath.Join(dir, "plugin.json"))
	if err != nil {
		return h, fmt.Errorf("read manifest: %w", err)
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("%s: %w", filepath.Join(dir, "plugin.json"), err)
	}
	if h.Wasm == "" || filepath.Base(h.Wasm) != h.Wasm {
		return h, fmt.Errorf("%s: \"wasm\" must name a .wasm file beside it", filepath.Join(dir, "plugin.json"))
	}
	return h, nil
}

// Build compiles the plugin in dir with the toolchain of its language,
// into the file its manifest names (written beside, then renamed), and
// writes the module's sha256 into plugin.json. Commands and their output go
// to log. It returns the path of the .wasm.
func Build(ctx context.Context, dir string, log io.Writer) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	lang, err := Detect(dir)
	if err != nil {
		return "", err
	}
	head, err := readHead(dir)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, head.Wasm)
	tmp := out + ".tmp"
	_ = os.Remove(tmp)
	if err := buildLang(ctx, lang, dir, tmp, log); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("build %s plugin in %s: %w", lang, dir, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	sum, err := fileSHA256(out)
	if err != nil {
		return "", err
	}
	if err := writeSHA256(filepath.Join(dir, "plugin.json"), sum); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "built %s (sha256 %s)\n", out, sum)
	return out, nil
}

func fileSHA256(p string) (string, error) {
	b, err := plugins.ReadRegular(p, plugins.DefaultModuleBytes)
	if err != nil {
		return "", err
	}
	return sha256Hex(b), nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

var shaField = regexp.MustCompile(`"sha256"\s*:\s*"[0-9a-fA-F]*"`)

// writeSHA256 sets the manifest's sha256, keeping the rest of the file as
// it is; the file is replaced atomically.
func writeSHA256(manifest, sum string) error {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	if !shaField.Match(b) {
		return fmt.Errorf("%s has no \"sha256\" field to fill in (add \"sha256\": \"\")", manifest)
	}
	nb := shaField.ReplaceAll(b, []byte(`"sha256": "`+sum+`"`))
	if bytes.Equal(nb, b) {
		return nil
	}
	tmp := manifest + ".tmp"
	if err := os.WriteFile(tmp, nb, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, manifest)
}

// run runs a command in dir, its output to log.
func run(ctx context.Context, log io.Writer, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	fmt.Fprintf(log, "$ %s %v\n", name, args)
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("%s is not installed (%s)", name, installHint[name])
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

var installHint = map[string]string{
	"go":       "Go 1.26: https://go.dev/dl",
	"clang-14": "Debian: apt-get install clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32",
	"clang":    "Debian: apt-get install clang lld wasi-libc libclang-rt-dev-wasm32",
	"rustc":    "Debian: apt-get install rustc libstd-rust-dev-wasm32 (or rustup target add wasm32-unknown-unknown)",
	"npm":      "Node.js 20+ with npm",
	"wat2wasm": "Debian: apt-get install wabt",
}

// firstCommand returns the first of names found in PATH (or as a path).
func firstCommand(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return names[0]
}

func buildLang(ctx context.Context, lang Lang, dir, out string, log io.Writer) error {
	name := filepath.Base(out)
	switch lang {
	case Go:
		// -buildmode=c-shared makes a WASI reactor: without it the module
		// is a command whose exports trap until main runs.
		return run(ctx, log, dir, []string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"},
			"go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, ".")
	case C:
		cc := firstCommand(os.Getenv("LOOOPY_CLANG"), "clang-14", "clang")
		args := []string{"--target=wasm32-wasi", "--sysroot=/usr", "-mexec-model=reactor", "-O2", "-Wall", "-Wextra",
			"-Wl,--strip-all", "-o", out}
		return run(ctx, log, dir, nil, cc, append(args, sources(dir, "*.c")...)...)
	case Rust:
		// Debian's rustc carries the wasm32 standard library
		// (libstd-rust-dev-wasm32); a rustup one needs the target added.
		rc := firstCommand(os.Getenv("LOOOPY_RUSTC"), "/usr/bin/rustc", "rustc")
		src := sources(dir, "*.rs")
		if len(src) != 1 {
			return fmt.Errorf("want one .rs file (a crate with no dependencies), found %v", src)
		}
		return run(ctx, log, dir, nil, rc, "--edition=2021", "--crate-type=cdylib", "--target=wasm32-unknown-unknown",
			"-C", "opt-level=s", "-C", "panic=abort", "-C", "strip=symbols", "-C", "link-arg=-zstack-size=65536",
			"-o", out, src[0])
	case AssemblyScript:
		if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "asc")); err != nil {
			install := "install"
			if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err == nil {
				install = "ci"
			}
			if err := run(ctx, log, dir, nil, "npm", install, "--no-audit", "--no-fund", "--loglevel=error"); err != nil {
				return err
			}
		}
		// The package's build script names its own output; build there,
		// then move it to out.
		if err := run(ctx, log, dir, nil, "npm", "run", "--silent", "build"); err != nil {
			return err
		}
		return os.Rename(filepath.Join(dir, stripTmp(name)), out)
	case WAT:
		src := sources(dir, "*.wat")
		if len(src) != 1 {
			return fmt.Errorf("want one .wat file, found %v", src)
		}
		return run(ctx, log, dir, nil, firstCommand("wat2wasm"), src[0], "-o", out)
	}
	return fmt.Errorf("no build for %s", lang)
}

func stripTmp(name string) string { return name[:len(name)-len(".tmp")] }
