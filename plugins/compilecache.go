package plugins

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
)

// compileCaches is the registry's compilation cache. wazero's cache on disk
// keeps the code of every module it ever compiled and never removes any,
// so a plugin updated again and again (each version about four times its
// module's size, twice: with and without the interrupt rewrite) filled the
// data folder's filesystem. Here each module (by the sha256 of its .wasm)
// gets a folder of its own, <dir>/<sha256>/ (wazero's plain cache) and
// <dir>/<sha256>/interruptible/, used while a load of that module runs or a
// plugin of it is loaded; when the last of them ends the folder is removed.
// Prune removes the folders no load holds (the code of modules that are
// gone) and what an older layout left.
//
// Only a folder the registry owns (Config.CacheOwned: the host's default,
// inside its data folder) is laid out so and pruned; one the operator names
// may be shared (hosts, test runs, `looopy plugin test -cache-dir`) and
// keeps wazero's own layout and everything in it.
//
// writable, when set, is asked before a module's folder is used: a disk
// below the store's floor gets no compiled code (the module is compiled
// into memory only, as with no folder at all).
type compileCaches struct {
	dir      string
	owned    bool // the registry may remove what it no longer needs from dir
	byModule bool // dir holds a folder per module (else wazero's own layout)
	writable func() error

	// mem are caches in memory only (a disk too full); shared are the
	// caches every module uses when dir is not laid out by module (in
	// memory without a dir). All close with the registry.
	mem, imem       wazero.CompilationCache
	shared, ishared wazero.CompilationCache

	mu      sync.Mutex
	mods    map[string]*moduleCache // by sha256, while held
	retired []wazero.CompilationCache
	closing bool // the registry closes: the code stays for the next start
}

// moduleCache is one module's pair of caches and how many hold it.
type moduleCache struct {
	cache, icache wazero.CompilationCache
	holds         int
	lock          *os.File // a shared lock on the folder's lock file, while held
}

func newCompileCaches(dir string, owned bool, writable func() error) (*compileCaches, error) {
	c := &compileCaches{dir: dir, owned: owned && dir != "", writable: writable, mods: map[string]*moduleCache{},
		mem: wazero.NewCompilationCache(), imem: wazero.NewCompilationCache()}
	c.shared, c.ishared = c.mem, c.imem
	if dir == "" {
		return c, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A folder the registry owns is laid out by module; any other keeps
	// wazero's own layout, one cache for every module.
	c.byModule = c.owned
	if c.byModule {
		return c, nil
	}
	idir := filepath.Join(dir, "interruptible")
	if err := os.MkdirAll(idir, 0o755); err != nil {
		return nil, err
	}
	plain, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, err
	}
	intr, err := wazero.NewCompilationCacheWithDir(idir)
	if err != nil {
		return nil, err
	}
	c.shared, c.ishared = plain, intr
	return c, nil
}

// hold returns the caches for the module whose sha256 is hash (hex), and
// the function that lets them go (safe to call more than once). While it
// is held, the module's folder stays.
func (c *compileCaches) hold(hash string) (cache, icache wazero.CompilationCache, release func()) {
	if !c.byModule || !isDigest(hash) {
		return c.shared, c.ishared, func() {}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	mc := c.mods[hash]
	if mc == nil {
		if c.writable != nil && c.writable() != nil {
			return c.mem, c.imem, func() {}
		}
		dir := filepath.Join(c.dir, hash)
		// Another process may share the folder (a second host, `looopy
		// plugin test -cache-dir`): a shared lock on the module's lock
		// file says it is in use, and only an exclusive one removes it.
		lock, err := lockShared(dir)
		if err != nil {
			return c.mem, c.imem, func() {}
		}
		plain, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			_ = lock.Close()
			return c.mem, c.imem, func() {}
		}
		intr, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "interruptible"))
		if err != nil {
			_ = lock.Close()
			c.retired = append(c.retired, plain)
			return c.mem, c.imem, func() {}
		}
		mc = &moduleCache{cache: plain, icache: intr, lock: lock}
		c.mods[hash] = mc
	}
	mc.holds++
	var once sync.Once
	return mc.cache, mc.icache, func() { once.Do(func() { c.let(hash, mc) }) }
}

// let drops one hold of a module's caches; the last removes its folder.
// The caches themselves stay open until the registry closes (a compile
// abandoned by its load may still use them; wazero frees a module's code
// when the module closes), and a later hold of the same module makes new
// ones in a new folder.
func (c *compileCaches) let(hash string, mc *moduleCache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	mc.holds--
	if mc.holds > 0 || c.mods[hash] != mc {
		return
	}
	delete(c.mods, hash)
	c.retired = append(c.retired, mc.cache, mc.icache)
	_ = mc.lock.Close()
	if c.owned && !c.closing {
		removeUnlocked(filepath.Join(c.dir, hash))
	}
}

// Prune removes from the cache folder everything no load or loaded plugin
// holds now: the folders of modules no longer loaded, and the files of the
// older layout (one cache for every module). It returns how many entries
// it removed.
func (c *compileCaches) Prune() int {
	if c.dir == "" || !c.owned {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if _, held := c.mods[name]; held {
			continue
		}
		switch {
		case isDigest(name):
			if removeUnlocked(filepath.Join(c.dir, name)) {
				n++
			}
		case name == "interruptible" || strings.HasPrefix(name, "wazero-"):
			// the older layout: one cache for every module ever compiled
			if os.RemoveAll(filepath.Join(c.dir, name)) == nil {
				n++
			}
		}
	}
	return n
}

// keep makes the folders outlive the registry: closing it (the host
// stopping) lets every module go, and their code must stay for the next
// start.
func (c *compileCaches) keep() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
}

// lockFile is the file of a module's folder that processes lock.
const lockFile = ".lock"

// removeUnlocked removes a module's folder unless a process holds it (a
// shared lock on its lock file), and says whether it did.
func removeUnlocked(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false
	}
	defer f.Close()
	if !tryLockExclusive(f) {
		return false // in use by another process
	}
	return os.RemoveAll(dir) == nil
}

// lockShared makes dir and takes a shared lock on its lock file, again
// when the file it locked was removed meanwhile (by a process that found
// the folder unused just before).
func lockShared(dir string) (*os.File, error) {
	for range 8 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, lockFile)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			continue // the folder went between the two calls
		}
		if err := lockSharedWait(f); err != nil {
			_ = f.Close()
			return nil, err
		}
		if sameFile(f, path) {
			return f, nil
		}
		_ = f.Close()
	}
	return nil, errors.New("compile cache: the module's folder keeps being removed")
}

// sameFile says whether f is still the file at path.
func sameFile(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// Close closes every cache made.
func (c *compileCaches) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	errs := []error{c.mem.Close(context.Background()), c.imem.Close(context.Background())}
	if c.shared != c.mem {
		errs = append(errs, c.shared.Close(context.Background()), c.ishared.Close(context.Background()))
	}
	for _, mc := range c.mods {
		errs = append(errs, mc.cache.Close(context.Background()), mc.icache.Close(context.Background()), mc.lock.Close())
	}
	for _, cc := range c.retired {
		errs = append(errs, cc.Close(context.Background()))
	}
	c.mods, c.retired = map[string]*moduleCache{}, nil
	return errors.Join(errs...)
}

// isDigest says whether s is a sha256 in hex (a folder name of the cache).
func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
