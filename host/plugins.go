package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/looopy-go/looopy/host/mcp"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/plugins"
)

// PluginsConfig is what the operator lets plugins have at most (see
// plugins.Policy). Zero grants no host, no secret, and folders only inside
// the grants folder beside the plugin folder.
type PluginsConfig struct {
	// AllowedHosts are the host patterns plugins may be granted ("*": any).
	AllowedHosts []string `json:"allowedHosts,omitempty"`
	// AllowPrivateNetwork lets plugins that ask reach private addresses.
	AllowPrivateNetwork bool `json:"allowPrivateNetwork,omitempty"`
	// PathRoots are folders under which plugins may be granted folders
	// (default: the folder "grants" beside the plugin folder). A grant is
	// resolved through its links when the plugin loads and must land
	// inside one of them.
	PathRoots []string `json:"pathRoots,omitempty"`
	// Reserved are more paths no plugin is ever granted, nor a folder
	// inside or containing one. The plugin folder, the data folder, the
	// compilation cache and the config file are always reserved.
	Reserved []string `json:"reserved,omitempty"`
	// Secrets are the environment variables plugins may read as secrets.
	Secrets []string `json:"secrets,omitempty"`
	// CallerAuth names the plugins (names or globs) that may receive the
	// credentials of the client that sent a turn's message (principal,
	// scopes, token) through the credential host function; every other
	// plugin that asks is refused. Default: none.
	CallerAuth []string `json:"callerAuth,omitempty"`
	// Only, when set, loads just these plugins (folder names) of the folder.
	Only []string `json:"only,omitempty"`
	// NoWatch turns hot reload off: the folder is read once at start.
	// (Only also reads it once.)
	NoWatch bool `json:"noWatch,omitempty"`
	// LoadTimeout bounds the guest code loading a plugin runs (its start
	// section, _initialize, describe; default 10s): a plugin past it is
	// refused and reported, and holds up neither the other plugins nor the
	// start of the host.
	LoadTimeout Duration `json:"loadTimeout,omitempty"`
	// CompileTimeout bounds compiling a plugin's module to machine code
	// (default 3m): a plugin past it is refused and reported, and the
	// compiler stops at its next function.
	CompileTimeout Duration `json:"compileTimeout,omitempty"`
	// ModuleLimits bound what a module may declare, checked before it is
	// compiled (plugins.ModuleLimits: module and function size,
	// instructions, branches, locals, nesting, br_table, table, section
	// entries; a zero field is its default, a negative one no limit), e.g.
	// {"moduleBytes": 134217728}.
	ModuleLimits plugins.ModuleLimits `json:"moduleLimits"`
	// ModuleFactsBytes bounds the memory the process keeps of what loading
	// learned of the modules it loaded last (their measure and their code
	// with the interrupt checks added, by sha256), so that loading the same
	// module again (a reload, a rollback, the same module in two folders)
	// does not walk it again: default 128 MiB; -1 keeps nothing. A module
	// whose code takes more than a quarter of it is never kept. It is the
	// process's, shared by every host in it: the last one started sets it.
	ModuleFactsBytes int64 `json:"moduleFactsBytes,omitempty"`
	// MaxCompiles is how many modules compile at once (default: the
	// number of CPUs, at least 2).
	MaxCompiles int `json:"maxCompiles,omitempty"`
	// Budgets bound what each plugin writes through the host: log,
	// events, key-value, artifacts, HTTP, tool definitions, open files
	// (plugins.Budgets:
	// a zero field is its default, a negative one no limit), e.g.
	// {"kvQuotaBytes": 134217728, "maxTools": 64}.
	Budgets plugins.Budgets `json:"budgets"`
	// CacheDir is wazero's compilation cache (default <data>/wasm-cache).
	CacheDir string `json:"cacheDir,omitempty"`
	// MaxCallTimeout is the longest callTimeout a manifest may have
	// (default 30s). One that asks for more gets this, and the log and
	// /admin/plugins say it was capped.
	MaxCallTimeout Duration `json:"maxCallTimeout,omitempty"`
	// ReservedInstances is how many instances of each plugin are kept for
	// principals holding none of that plugin's instances: a principal
	// already holding one takes another only while more than this many are
	// free, so that one principal's slow calls (a model upstream that
	// hangs) cannot hold every instance while another principal waits.
	// Default: 1 with auth on; none with auth off (every request is the
	// same principal). -1: none. Capped at each plugin's instances less one.
	ReservedInstances int `json:"reservedInstances,omitempty"`
}

// reservedInstances is the plugins' reserve for principals holding none
// (plugins.Policy.ReservedInstances): with auth off every turn is one
// principal's, and a reserve would only idle instances.
func (c Config) reservedInstances() int {
	if c.Plugins.ReservedInstances == 0 && !c.Auth.Enabled {
		return -1
	}
	return c.Plugins.ReservedInstances
}

// loadPlugins loads every plugin of the plugin folder into a registry and
// returns the configured model, the toolsets and the admin view.
func (m *Main) loadPlugins(ctx context.Context, cfg Config) (loop.Model, []loop.Toolset, PluginAdmin, error) {
	dc := cfg.withDefaults()
	dir := cfg.PluginDir
	if dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, nil, nil, fmt.Errorf("plugin folder %s does not exist or is not a folder (set -plugins, LOOOPY_PLUGINS or pluginDir to the folder holding the plugins)", dir)
		}
	}
	if dir == "" {
		if st, err := os.Stat(DefaultPluginDir); err == nil && st.IsDir() {
			dir = DefaultPluginDir
		}
	}
	if dir == "" {
		if m.Model != nil {
			return m.Model, nil, nil, nil
		}
		return nil, nil, nil, fmt.Errorf("no plugin folder (-plugins) and %s does not exist here: no model to serve", DefaultPluginDir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("plugin folder %s: %w", dir, err)
	}
	m.pluginDir = abs
	plugins.SetModuleFactsBytes(cfg.Plugins.ModuleFactsBytes)
	var egress *plugins.Egress
	if len(cfg.Plugins.AllowedHosts) > 0 {
		egress = plugins.NewEgress(plugins.EgressConfig{Logger: m.log.With("component", "egress"), UserAgent: "looopy"})
		m.closers = append(m.closers, egress.Close)
	}
	log := m.log.With("component", "plugins")
	cacheDir := cfg.Plugins.CacheDir
	if cacheDir == "" {
		cacheDir = filepath.Join(dc.DataDir, "wasm-cache")
	}
	roots := cfg.Plugins.PathRoots
	if len(roots) == 0 {
		roots = []string{filepath.Join(filepath.Dir(abs), "grants")}
	}
	// What the host owns is never granted: the plugins (a plugin could read
	// or change another, or drop a new one in), the data (Badger, the
	// artifacts), the compiled code, the config (the admin token).
	reserved := append([]string{abs, dc.DataDir, cacheDir}, cfg.Plugins.Reserved...)
	if m.configFile != "" {
		reserved = append(reserved, m.configFile)
	}
	// The key-value quota starts from what the store holds, where the
	// backend can tell (Badger); a store several hosts share (Redis)
	// checks it with each write, so that it holds for all of them.
	kvUsage, _ := m.store.(plugins.KVUsager)
	quotaKV, _ := m.store.(plugins.QuotaKV)
	// The compiled code of the plugins is written into the data folder's
	// filesystem (by default): like every other write there, it asks the
	// store's check of the disk first, and is kept in memory only while the
	// disk is below store.minFreeBytes.
	// A cache in the data folder (the default) is the host's own: the
	// code of modules no longer loaded is removed (each plugin update used
	// to leave its old code for ever). One elsewhere may be shared.
	owned := insideDir(cacheDir, dc.DataDir)
	var cacheWritable func() error
	if sp, ok := m.store.(interface{ Admit() error }); ok && owned {
		cacheWritable = sp.Admit
	}
	reg, err := plugins.New(plugins.Config{
		CacheDir:      cacheDir,
		CacheOwned:    owned,
		CacheWritable: cacheWritable,
		Policy: plugins.Policy{
			AllowedHosts:        cfg.Plugins.AllowedHosts,
			AllowPrivateNetwork: cfg.Plugins.AllowPrivateNetwork,
			PathRoots:           roots,
			Reserved:            reserved,
			Secrets:             cfg.Plugins.Secrets,
			CallerAuth:          cfg.Plugins.CallerAuth,
			LoadTimeout:         time.Duration(cfg.Plugins.LoadTimeout),
			CompileTimeout:      time.Duration(cfg.Plugins.CompileTimeout),
			ModuleLimits:        cfg.Plugins.ModuleLimits,
			MaxCompiles:         cfg.Plugins.MaxCompiles,
			Budgets:             cfg.Plugins.Budgets,
			MaxCallTimeout:      time.Duration(cfg.Plugins.MaxCallTimeout),
			ReservedInstances:   cfg.reservedInstances(),
		},
		Egress:    egress,
		KV:        m.store,
		KVUsage:   kvUsage,
		KVQuota:   quotaKV,
		Artifacts: m.artifacts,
		// The registry logs each load, failure and unload itself.
		Logger: log,
		Tracer: m.tel.tracer,
		Meter:  m.tel.meter,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("plugin registry: %w", err)
	}
	m.closers = append(m.closers, reg.Close)
	start := time.Now()
	// The first start compiles every plugin to machine code (seconds each);
	// later starts read the compile cache. Each load logs its own line.
	log.Info("loading plugins", "folder", abs, "count", countPlugins(abs, cfg.Plugins.Only), "compile_cache", cacheDir)
	if len(cfg.Plugins.Only) == 0 && !cfg.Plugins.NoWatch {
		// The whole folder, hot-reloaded: a new or changed plugin is loaded
		// (replacing the old version once it validated), a removed one
		// unloaded.
		w, err := plugins.NewWatcher(reg, plugins.WatchConfig{Dir: abs, Logger: log})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("plugin watcher: %w", err)
		}
		w.Scan(ctx)
		wctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		m.closers = append(m.closers, func() error { stop(); return <-done })
	} else {
		entries, err := os.ReadDir(abs)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("plugin folder: %w", err)
		}
		// Side by side: a plugin slow to load (at worst its load timeout)
		// holds up no other.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for _, e := range entries {
			if !e.IsDir() || (len(cfg.Plugins.Only) > 0 && !slices.Contains(cfg.Plugins.Only, e.Name())) {
				continue
			}
			if _, err := os.Stat(filepath.Join(abs, e.Name(), plugins.ManifestFile)); err != nil {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				_, _ = reg.Load(ctx, filepath.Join(abs, e.Name())) // failures reported through OnEvent
			}()
		}
		wg.Wait()
	}
	if ctx.Err() != nil {
		return nil, nil, nil, fmt.Errorf("loading plugins: %w", context.Cause(ctx))
	}
	log.Info("plugins loaded", "folder", abs, "count", len(reg.List()), "took", time.Since(start).String())
	// The compiled code of modules no longer loaded (versions replaced or
	// removed while the host was stopped) goes: the cache holds only what
	// serves.
	if n := reg.PruneCompileCache(); n > 0 {
		log.Info("compile cache pruned", "removed", n, "compile_cache", cacheDir)
	}
	admin := &pluginAdmin{reg: reg, dir: abs}
	if m.Model != nil {
		return m.Model, []loop.Toolset{reg}, admin, nil
	}
	model, err := reg.Model(dc.Model.Plugin)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("model plugin %q: %w", dc.Model.Plugin, err)
	}
	return model, []loop.Toolset{reg}, admin, nil
}

// pluginAdmin serves the admin API from the registry.
type pluginAdmin struct {
	reg *plugins.Registry
	dir string
	mcp []*mcp.Toolset // outside MCP servers, listed among the plugins
}

var _ PluginAdmin = (*pluginAdmin)(nil)

func (p *pluginAdmin) Plugins(ctx context.Context) ([]PluginStatus, error) {
	var out []PluginStatus
	for _, in := range p.reg.List() {
		ps := PluginStatus{Name: in.Name, Version: in.Version, Kind: in.Kind, SHA256: in.SHA256,
			Tools: in.Tools, Healthy: in.Health == "ok", State: in.State, Health: in.Health, Error: in.LastError,
			Calls: in.Calls, Failures: in.Failures, Busy: in.Busy, Waiting: in.Waiting, Sandboxed: true, Source: in.Source}
		if pl, ok := p.reg.Plugin(in.Name); ok && in.State == "serving" {
			ps.Grant = grantView(pl.Grant())
		}
		out = append(out, ps)
	}
	// A load still running (a compile, say) is listed as loading, under
	// its folder's name, beside the version it would replace if any.
	for _, src := range p.reg.Loading() {
		out = append(out, PluginStatus{Name: filepath.Base(filepath.Dir(src)), State: "loading", Health: "loading",
			Sandboxed: true, Source: src})
	}
	for _, t := range p.mcp {
		out = append(out, mcpStatus(t.Status()))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (p *pluginAdmin) Load(ctx context.Context, name string) error {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return fmt.Errorf("%w: plugin name %q: a folder name of the plugin folder", loop.ErrInvalid, name)
	}
	_, err := p.reg.Load(ctx, filepath.Join(p.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return &loop.NotFoundError{What: "plugin", ID: name}
	}
	return err
}

func (p *pluginAdmin) Unload(ctx context.Context, name string) error {
	return p.reg.Unload(ctx, name)
}

// turnContext derives a turn's context from the request that started it:
// the request's trace, and its principal, so that the turn's plugin calls
// get that principal's fair share of each plugin's instances.
func turnContext(turn, req context.Context) context.Context {
	turn = withRequestTrace(turn, req)
	if p := plugins.PrincipalOf(req); p != "" {
		turn = plugins.WithPrincipal(turn, p)
	}
	return turn
}

// countPlugins is how many plugin folders (with a manifest) dir holds,
// among only when only is not empty.
func countPlugins(dir string, only []string) int {
	entries, _ := os.ReadDir(dir)
	n := 0
	for _, e := range entries {
		if !e.IsDir() || (len(only) > 0 && !slices.Contains(only, e.Name())) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), plugins.ManifestFile)); err == nil {
			n++
		}
	}
	return n
}

// insideDir says whether path is dir or lies inside it (both made absolute).
func insideDir(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
