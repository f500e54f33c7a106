package author

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/looopy-go/looopy/plugins"
)

// Install copies the built plugin in dir (plugin.json and its .wasm) into
// pluginDir/<name>/, so that a host watching pluginDir never reads it
// half-written:
//
//   - the module is written under a new name (<name>-<sha256 prefix>.wasm,
//     through a temporary file renamed into place): the manifest already
//     there still names the old module, which is untouched;
//   - the manifest, pointing at the new module, is written to a temporary
//     name and renamed over plugin.json: one atomic step switches versions;
//   - modules no manifest names any more are removed.
//
// The manifest is checked (strictly, sha256 included) before anything is
// written. It returns the installed folder.
func Install(dir, pluginDir string) (string, error) {
	m, err := plugins.ReadManifest(filepath.Join(dir, plugins.ManifestFile))
	if err != nil {
		return "", fmt.Errorf("install: %w (run `looopy plugin build` first)", err)
	}
	// The module is read once, bounded, and only if it is a regular file
	// of the folder itself: a link (to /dev/zero, a FIFO, or a file outside
	// the folder) is refused rather than followed.
	wasmPath := filepath.Join(m.Dir, m.Wasm)
	if fi, err := os.Lstat(wasmPath); err != nil {
		return "", fmt.Errorf("install: %w", err)
	} else if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("install: %s is not a regular file (%s): a plugin folder's module must be the file itself", wasmPath, fi.Mode().Type())
	}
	wasm, err := plugins.ReadRegular(wasmPath, plugins.DefaultModuleBytes)
	if err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	if sum := sha256Hex(wasm); sum != m.SHA256 {
		return "", fmt.Errorf("install: %s has sha256 %s, the manifest says %s (run `looopy plugin build`)", m.Wasm, sum, m.SHA256)
	}
	target := filepath.Join(pluginDir, m.Name)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	newWasm := fmt.Sprintf("%s-%s.wasm", m.Name, m.SHA256[:12])
	if err := writeAtomic(filepath.Join(target, newWasm), wasm); err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	mb, err := plugins.ReadRegular(m.File, plugins.MaxManifestBytes)
	if err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	mb, err = renameWasm(mb, m.Wasm, newWasm)
	if err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	if err := writeAtomic(filepath.Join(target, plugins.ManifestFile), mb); err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	// Old modules of this plugin, no longer named by the manifest.
	entries, _ := os.ReadDir(target)
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".wasm") && n != newWasm {
			_ = os.Remove(filepath.Join(target, n))
		}
	}
	return target, nil
}

// writeAtomic writes b to a temporary name beside p (which the watcher
// does not read: it reads plugin.json and the module it names) and renames
// it into place.
func writeAtomic(p string, b []byte) error {
	var r [6]byte
	_, _ = rand.Read(r[:])
	tmp := filepath.Join(filepath.Dir(p), ".installing-"+hex.EncodeToString(r[:])+"-"+filepath.Base(p))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// renameWasm sets the manifest's "wasm" to name, keeping the rest as it is.
func renameWasm(manifest []byte, old, name string) ([]byte, error) {
	from := fmt.Sprintf("%q", old)
	i := strings.Index(string(manifest), `"wasm"`)
	if i < 0 {
		return nil, fmt.Errorf("manifest has no \"wasm\" field")
	}
	j := strings.Index(string(manifest[i:]), from)
	if j < 0 {
		return nil, fmt.Errorf("manifest's \"wasm\" is not %s", from)
	}
	j += i
	out := append([]byte{}, manifest[:j]...)
	out = append(out, fmt.Sprintf("%q", name)...)
	return append(out, manifest[j+len(from):]...), nil
}
