package plugins

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// fsGuest is the hostile escape guest loaded with the given folder grants.
type fsGuest struct {
	t *testing.T
	r *Registry
}

func loadEscape(t *testing.T, cfg Config, dir string, grants ...map[string]any) (*fsGuest, *Plugin) {
	t.Helper()
	return loadEscapeGuest(t, "escape", cfg, dir, grants...)
}

// loadEscapeGuest loads guest (escape, the Looopy ABI, or xescape, the same
// tool built with Extism's PDK) with the given folder grants.
func loadEscapeGuest(t *testing.T, guest string, cfg Config, dir string, grants ...map[string]any) (*fsGuest, *Plugin) {
	t.Helper()
	r := newRegistry(t, cfg)
	pd := install(t, dir, guest, guestWasm(t, guest), func(m map[string]any) {
		if len(grants) > 0 {
			caps(m)["allowedPaths"] = grants
		}
	})
	if _, err := r.Load(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Plugin(guest)
	return &fsGuest{t: t, r: r}, p
}

// do runs one file operation in the guest: its answer, and whether it
// failed.
func (g *fsGuest) do(op, path string, kv ...string) (string, bool) {
	g.t.Helper()
	args := map[string]string{"op": op, "path": path}
	for i := 0; i+1 < len(kv); i += 2 {
		args[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(args)
	res, err := g.r.Call(context.Background(), call("fs", string(b)), &loop.ToolEnv{})
	if err != nil {
		g.t.Fatalf("fs %s %s: %v", op, path, err)
	}
	return res.Content, res.IsError
}

// mustFail asserts that the guest's operation was refused.
func (g *fsGuest) mustFail(op, path string, kv ...string) string {
	g.t.Helper()
	out, failed := g.do(op, path, kv...)
	if !failed {
		g.t.Errorf("%s %s %v: allowed (answered %d bytes)", op, path, kv, len(out))
	}
	return out
}

func (g *fsGuest) mustDo(op, path string, kv ...string) string {
	g.t.Helper()
	out, failed := g.do(op, path, kv...)
	if failed {
		g.t.Fatalf("%s %s %v: %s", op, path, kv, out)
	}
	return out
}

// sandboxLayout makes a root the policy allows, with a granted folder and,
// beside it, a folder and a file the plugin must never reach.
func sandboxLayout(t *testing.T) (root, granted, outside, secret string) {
	t.Helper()
	root = t.TempDir()
	granted = filepath.Join(root, "granted")
	outside = filepath.Join(root, "outside")
	for _, d := range []string{granted, outside, filepath.Join(granted, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret = filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("TOPSECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(granted, "in.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, granted, outside, secret
}

// A guest granted one read-write folder tries every way out of it: links it
// makes itself (symbolic with relative and absolute targets, hard), links
// planted in the folder by someone else, and paths that climb. It reaches
// nothing outside: not a file of a sibling folder, not the host's
// environment, not the root of the machine.
func TestGuestCannotLeaveItsFolder(t *testing.T) { guestCannotLeaveItsFolder(t, "escape") }

// An Extism-ABI plugin's folders (the Extism manifest's allowed_paths are
// never used: the host mounts the confined roots in each instance) hold
// against the same attacks.
func TestExtismGuestCannotLeaveItsFolder(t *testing.T) { guestCannotLeaveItsFolder(t, "xescape") }

func guestCannotLeaveItsFolder(t *testing.T, guest string) {
	root, granted, outside, secret := sandboxLayout(t)
	// Links planted inside the grant (by an operator, a previous process, or
	// another plugin sharing the folder).
	for name, target := range map[string]string{
		"planted-file": secret, "planted-dir": outside, "planted-root": "/",
		"planted-rel": "../outside/secret.txt", "planted-write": filepath.Join(outside, "victim.txt"),
	} {
		if err := os.Symlink(target, filepath.Join(granted, name)); err != nil {
			t.Fatal(err)
		}
	}
	g, _ := loadEscapeGuest(t, guest, Config{Policy: Policy{PathRoots: []string{root}}}, t.TempDir(),
		map[string]any{"path": granted})
	in := func(p string) string { return filepath.Join(granted, p) }

	// The grant works for what lies inside.
	if got := g.mustDo("read", in("in.txt")); got != "inside" {
		t.Fatalf("read in.txt = %q", got)
	}

	// Symbolic links the guest makes: refused, whatever the target.
	ups := strings.Repeat("../", strings.Count(granted, "/")+2)
	for name, target := range map[string]string{
		"esc": ups, "esc-abs": "/", "esc-rel": "../outside", "esc-inside": "in.txt",
	} {
		g.mustFail("symlink", in(name), "to", target)
		if _, err := os.Lstat(in(name)); err == nil {
			t.Errorf("a link %s -> %s exists in the grant", name, target)
		}
	}
	// Had a link been made, the reads through it must fail as well.
	pid := os.Getpid()
	for _, p := range []string{
		in("esc/proc/self/environ"), in("esc" + "/proc/" + strconv.Itoa(pid) + "/environ"),
		in("esc" + secret), in("esc-rel/secret.txt"), in("esc-abs/etc/hostname"),
	} {
		if out := g.mustFail("read", p); strings.Contains(out, "TOPSECRET") || strings.Contains(out, "PATH=") {
			t.Fatalf("read %s leaked what lies outside (%d bytes)", p, len(out))
		}
	}

	// Planted links that lead out are not followed: no read, no list, no
	// write through them.
	for _, p := range []string{in("planted-file"), in("planted-rel"), in("planted-dir/secret.txt"), in("planted-root/etc/hostname")} {
		if out := g.mustFail("read", p); strings.Contains(out, "TOPSECRET") {
			t.Fatalf("read %s leaked the secret", p)
		}
	}
	g.mustFail("list", in("planted-dir"))
	g.mustFail("list", in("planted-root"))
	g.mustFail("write", in("planted-write"), "text", "forged")
	g.mustFail("write", in("planted-dir/new.txt"), "text", "forged")
	g.mustFail("append", in("planted-file"), "text", "forged")
	g.mustFail("mkdir", in("planted-dir/newdir"))
	g.mustFail("rename", in("in.txt"), "to", in("planted-dir/moved.txt"))
	g.mustFail("chmod", in("planted-file"))
	g.mustFail("utimes", in("planted-file"))
	// Hard links: neither of a file reached through a planted link, nor of
	// one inside.
	g.mustFail("link", in("hard"), "to", in("planted-dir/secret.txt"))
	g.mustFail("link", in("hard-in"), "to", in("in.txt"))
	// Climbing by name.
	for _, p := range []string{in("../outside/secret.txt"), in("sub/../../outside/secret.txt"), secret, "/etc/hostname", "/proc/self/environ"} {
		g.mustFail("read", p)
	}
	g.mustFail("list", filepath.Dir(granted))
	g.mustFail("list", "/")

	// Nothing outside changed.
	if b, _ := os.ReadFile(secret); string(b) != "TOPSECRET" {
		t.Fatalf("the secret file changed: %q", b)
	}
	es, _ := os.ReadDir(outside)
	if len(es) != 1 {
		t.Fatalf("the outside folder changed: %v", es)
	}
	if _, err := os.Lstat(in("hard")); err == nil {
		t.Fatal("a hard link to an outside file was made")
	}

	// Removing a planted link removes the link, never its target.
	g.mustDo("remove", in("planted-file"))
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("removing a link removed its target: %v", err)
	}
}

// Inside its folder a read-write grant works as a folder should: create,
// write, append, read, list, stat, make and remove folders, rename, remove,
// set times; a link made by someone else that stays inside is followed.
func TestReadWriteGrantWorks(t *testing.T) {
	root, granted, _, _ := sandboxLayout(t)
	if err := os.Symlink("in.txt", filepath.Join(granted, "alias")); err != nil {
		t.Fatal(err)
	}
	g, _ := loadEscape(t, Config{Policy: Policy{PathRoots: []string{root}}}, t.TempDir(),
		map[string]any{"path": granted})
	in := func(p string) string { return filepath.Join(granted, p) }
	g.mustDo("write", in("a.txt"), "text", "hello")
	g.mustDo("append", in("a.txt"), "text", " world")
	if got := g.mustDo("read", in("a.txt")); got != "hello world" {
		t.Fatalf("read a.txt = %q", got)
	}
	g.mustDo("create", in("b.txt"))
	g.mustFail("create", in("b.txt")) // O_EXCL
	g.mustDo("mkdir", in("d"))
	g.mustDo("rename", in("b.txt"), "to", in("d/b.txt"))
	if got := g.mustDo("list", in("d")); got != "b.txt" {
		t.Fatalf("list d = %q", got)
	}
	if got := g.mustDo("list", granted); got != "a.txt,alias,d,in.txt,sub" {
		t.Fatalf("list = %q", got)
	}
	g.mustDo("utimes", in("a.txt"))
	if fi, err := os.Stat(in("a.txt")); err != nil || fi.ModTime().Unix() != 1 {
		t.Fatalf("utimes: %v %v", fi.ModTime(), err)
	}
	if got := g.mustDo("read", in("alias")); got != "inside" {
		t.Fatalf("read through an inside link = %q", got)
	}
	if got := g.mustDo("readlink", in("alias")); got != "in.txt" {
		t.Fatalf("readlink = %q", got)
	}
	g.mustDo("truncate", in("a.txt"))
	if got := g.mustDo("stat", in("a.txt")); !strings.HasPrefix(got, "-rw") || !strings.Contains(got, " 0 ") {
		t.Fatalf("stat after truncate = %q", got)
	}
	g.mustFail("rmdir", in("d")) // not empty
	g.mustDo("remove", in("d/b.txt"))
	g.mustDo("rmdir", in("d"))
	g.mustDo("remove", in("a.txt"))
	if got := g.mustDo("list", granted); got != "alias,in.txt,sub" {
		t.Fatalf("list after removes = %q", got)
	}
}

// A read-only grant refuses every operation that changes anything: writing,
// creating, truncating, appending, mkdir, chmod, rename, unlink, rmdir,
// times, links.
func TestReadOnlyGrantIsReadOnly(t *testing.T) {
	for _, guest := range []string{"escape", "xescape"} {
		t.Run(guest, func(t *testing.T) { readOnlyGrantIsReadOnly(t, guest) })
	}
}

func readOnlyGrantIsReadOnly(t *testing.T, guest string) {
	root, granted, _, _ := sandboxLayout(t)
	old := time.Unix(1_000_000, 0)
	if err := os.Chtimes(filepath.Join(granted, "in.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	g, _ := loadEscapeGuest(t, guest, Config{Policy: Policy{PathRoots: []string{root}}}, t.TempDir(),
		map[string]any{"path": granted, "readOnly": true})
	in := func(p string) string { return filepath.Join(granted, p) }
	if got := g.mustDo("read", in("in.txt")); got != "inside" {
		t.Fatalf("read = %q", got)
	}
	g.mustDo("list", granted)
	g.mustFail("write", in("in.txt"), "text", "x")
	g.mustFail("write", in("new.txt"), "text", "x")
	g.mustFail("create", in("new2.txt"))
	g.mustFail("append", in("in.txt"), "text", "x")
	g.mustFail("truncate", in("in.txt"))
	g.mustFail("mkdir", in("d"))
	g.do("chmod", in("in.txt")) // WASI has no chmod: a Go guest's is a stat; the mode is checked below
	g.mustFail("rename", in("in.txt"), "to", in("moved.txt"))
	g.mustFail("remove", in("in.txt"))
	g.mustFail("rmdir", in("sub"))
	g.mustFail("utimes", in("in.txt"))
	g.mustFail("symlink", in("l"), "to", "in.txt")
	g.mustFail("link", in("h"), "to", in("in.txt"))
	fi, err := os.Stat(in("in.txt"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(in("in.txt"))
	if string(b) != "inside" || fi.Mode().Perm() != 0o644 || !fi.ModTime().Equal(old) {
		t.Fatalf("the read-only file changed: %q %v %v", b, fi.Mode(), fi.ModTime())
	}
	if got, _ := os.ReadDir(granted); len(got) != 2 {
		t.Fatalf("the read-only folder changed: %v", got)
	}
}

// Grants are resolved when the plugin loads: a path that is a link (to the
// root of the machine, or anywhere outside the operator's roots), a path
// that is, contains or lies inside what the host owns (the plugin folder,
// the plugin's own folder, the data folder, the config file), or one that
// does not exist, is not granted, and the guest reaches nothing through it.
func TestGrantsResolvedAtLoad(t *testing.T) {
	top := t.TempDir()
	pluginDir := filepath.Join(top, "plugins")
	dataDir := filepath.Join(top, "data")
	roots := filepath.Join(top, "grants")
	for _, d := range []string{pluginDir, filepath.Join(pluginDir, "other"), filepath.Join(dataDir, "badger"), filepath.Join(roots, "ok"), filepath.Join(top, "outside")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(top, "looopy.json")
	os.WriteFile(config, []byte(`{"admin":{"token":"TOPSECRET"}}`), 0o600)
	os.WriteFile(filepath.Join(top, "outside", "secret.txt"), []byte("TOPSECRET"), 0o600)
	// A link the plugin ships in its own folder, and one in the roots.
	own := filepath.Join(pluginDir, "escape")
	os.MkdirAll(own, 0o755)
	if err := os.Symlink("/", filepath.Join(own, "data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(top, "outside"), filepath.Join(roots, "link-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ok", filepath.Join(roots, "link-in")); err != nil {
		t.Fatal(err)
	}
	policy := Policy{
		// The operator allows a whole tree, the host's own folders included:
		// reservation beats it.
		PathRoots: []string{top},
		Reserved:  []string{pluginDir, dataDir, config},
	}
	cases := []struct {
		path   string
		reason string
	}{
		{filepath.Join(own, "data"), "outside"},       // data -> / (shipped with the plugin)
		{filepath.Join(roots, "link-out"), "outside"}, // resolves outside the operator's roots? no: inside top, but see below
		{own, "host"},       // its own folder
		{pluginDir, "host"}, // the whole plugin folder
		{filepath.Join(pluginDir, "other"), "host"}, // inside the plugin folder
		{dataDir, "host"},                                // the data folder
		{filepath.Join(dataDir, "badger"), "host"},       // inside it
		{top, "host"},                                    // contains all of them
		{filepath.Join(roots, "missing"), "not resolve"}, // does not exist
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			if c.path == filepath.Join(roots, "link-out") {
				// resolves to top/outside: inside the operator's root, so
				// only a narrower policy refuses it
				pol := policy
				pol.PathRoots = []string{roots}
				g := pol.Grant(&Manifest{Name: "x", Dir: own, Capabilities: Capabilities{AllowedPaths: []PathGrant{{Path: c.path}}}}, nil)
				if len(g.Paths) != 0 || !strings.Contains(strings.Join(g.Refused, ";"), c.reason) {
					t.Fatalf("granted %v, refused %v", g.Paths, g.Refused)
				}
				return
			}
			g := policy.Grant(&Manifest{Name: "escape", Dir: own, Capabilities: Capabilities{AllowedPaths: []PathGrant{{Path: c.path, ReadOnly: true}}}}, nil)
			if len(g.Paths) != 0 {
				t.Fatalf("granted %v", g.Paths)
			}
			if len(g.Refused) != 1 || !strings.Contains(g.Refused[0], c.reason) {
				t.Fatalf("refused %v, want a reason with %q", g.Refused, c.reason)
			}
		})
	}
	// A link inside the roots to a folder inside them is granted as the
	// folder it names.
	g := policy.Grant(&Manifest{Name: "x", Dir: own, Capabilities: Capabilities{AllowedPaths: []PathGrant{{Path: filepath.Join(roots, "link-in")}}}}, nil)
	if len(g.Paths) != 1 || g.Paths[0].Resolved != filepath.Join(roots, "ok") {
		t.Fatalf("link-in: %+v refused %v", g.Paths, g.Refused)
	}

	// Through a loaded guest: the shipped data -> / link and the plugin
	// folder are not mounted; the guest reads neither /etc/hostname nor the
	// config file nor another plugin's manifest.
	other := filepath.Join(pluginDir, "other")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, ManifestFile), []byte(`{"name":"other"}`), 0o644)
	r := newRegistry(t, Config{Policy: policy})
	install(t, pluginDir, "escape", guestWasm(t, "escape"), func(m map[string]any) {
		caps(m)["allowedPaths"] = []map[string]any{{"path": filepath.Join(own, "data"), "readOnly": true}, {"path": pluginDir}, {"path": top}}
	})
	if _, err := r.Load(context.Background(), own); err != nil {
		t.Fatal(err)
	}
	p, _ := r.Plugin("escape")
	if len(p.Grant().Paths) != 0 {
		t.Fatalf("granted %+v", p.Grant().Paths)
	}
	guest := &fsGuest{t: t, r: r}
	for _, path := range []string{filepath.Join(own, "data", "etc", "hostname"), config, filepath.Join(other, ManifestFile), filepath.Join(top, "outside", "secret.txt")} {
		if out := guest.mustFail("read", path); strings.Contains(out, "TOPSECRET") || strings.Contains(out, `"name"`) {
			t.Fatalf("read %s: %q", path, out)
		}
	}
	guest.mustFail("write", filepath.Join(pluginDir, "dropped", ManifestFile), "text", "{}")
	guest.mustFail("list", pluginDir)
}
