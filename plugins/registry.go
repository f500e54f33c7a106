package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/looopy-go/looopy/loop"
)

// Config configures a Registry. A zero field means its default.
type Config struct {
	// CacheDir holds wazero's compilation cache, so a restart does not
	// compile again; "" keeps the cache in memory only.
	CacheDir string
	// CacheOwned says CacheDir is the registry's alone (the host's default,
	// in its data folder): the compiled code of a module is removed when
	// its last plugin closes (not when the registry closes: the next start
	// reads it), and PruneCompileCache removes what no plugin loaded now is
	// made of. A folder not owned may be shared and is never pruned.
	CacheOwned bool
	// CacheWritable, when set, is asked before a module's compiled code is
	// written into CacheDir: an error (a disk nearly full) compiles it into
	// memory only. The host sets it when CacheDir is in the data folder.
	CacheWritable func() error
	// Policy is what the operator allows plugins at most.
	Policy Policy
	// Egress is the broker behind http_request; nil: plugins have no HTTP.
	Egress *Egress
	// KV backs the plugins' key-value spaces; nil: kv_* answer an error.
	KV KV
	// KVUsage tells what each plugin's key-value space already holds, the
	// start of its quota (nil: each run of the host counts from zero).
	KVUsage KVUsager
	// KVQuota, when set, checks each plugin's key-value quota in the
	// store, atomically with the write (a store several hosts share: the
	// quota then holds for all of them); KVUsage is then unused. It must
	// be the same store as KV.
	KVQuota QuotaKV
	// Artifacts backs artifact_write; nil: it answers an error.
	Artifacts ArtifactWriter
	// LookupEnv resolves the secrets manifests name; nil: os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// OnEvent is told of every load, failure and unload (may be nil). It is
	// called from the goroutine that did the work, after the change is
	// visible; it may read the registry (List, Tools) but must not call Load
	// or Unload.
	OnEvent func(Event)
	Logger  *slog.Logger // nil: discard
	// Tracer, when set, makes spans of plugin calls (plugin.call),
	// instantiations (plugin.instantiate) and loads (plugin.load, hot
	// reloads included). The context host functions see carries the call's
	// span, so egress requests continue the trace.
	Tracer trace.Tracer
	// Meter, when set, records instance creations and discards, loads,
	// call durations, pool sizes and instance memory.
	Meter metric.Meter
}

// EventKind is what happened to a plugin.
type EventKind string

// Registry events.
const (
	EventLoaded   EventKind = "loaded"   // a plugin version serves (new or replacing an older one)
	EventFailed   EventKind = "failed"   // a plugin failed to load; the previous version, if any, keeps serving
	EventUnloaded EventKind = "unloaded" // a plugin was removed; it closes once its running calls end
)

// Event reports a change of the registry.
type Event struct {
	Kind     EventKind
	Name     string // "" when even the manifest could not be read
	Version  string
	Previous string // the version replaced, on EventLoaded
	Source   string // the manifest's path
	Err      error  // on EventFailed
	Duration time.Duration
}

// Info describes a plugin for the admin API.
type Info struct {
	Name      string    `json:"name"`
	Version   string    `json:"version,omitempty"`
	Kind      string    `json:"kind,omitempty"`
	ABI       string    `json:"abi,omitempty"`
	State     string    `json:"state"`  // serving, failed
	Health    string    `json:"health"` // ok, degraded (recent call failures), failed (no version serves)
	LastError string    `json:"lastError,omitempty"`
	Tools     []string  `json:"tools,omitempty"`
	Source    string    `json:"source,omitempty"`
	SHA256    string    `json:"sha256,omitempty"`
	LoadedAt  time.Time `json:"loadedAt,omitzero"`
	Calls     int64     `json:"calls"`
	Failures  int64     `json:"failures"`
	// Busy is how many instances calls hold now, Waiting how many calls
	// wait for one (the current version's pool).
	Busy    int `json:"busy"`
	Waiting int `json:"waiting"`
}

// Registry holds every loaded plugin, the current version of each by name.
// It is the loop's toolset (all tools of tool plugins, agent plugins as
// tools) and hands out model plugins by name. Safe for concurrent use.
type Registry struct {
	env     loadEnv
	onEvent func(Event)
	log     *slog.Logger

	// closing is closed when the registry closes: loads still running stop.
	closing   chan struct{}
	closeOnce sync.Once
	// retries counts the goroutines loading again the plugins that other
	// plugins crowded out (see retryCrowded); Close waits for them.
	retries sync.WaitGroup

	loadMu    sync.Mutex // one swap (the end of a load) or unload at a time
	sourcesMu sync.Mutex
	loadingMu map[string]*sync.Mutex // manifest path -> one load of it at a time

	mu       sync.RWMutex
	plugins  map[string]*Plugin
	sources  map[string]string // manifest path -> plugin name
	failures map[string]failure
	index    *toolIndex
	closed   bool
	loading  map[string]time.Time // manifest path -> when its load began
}

type failure struct {
	source string
	err    string
	at     time.Time
	// crowded: refused because of the plugins serving (the shared tools
	// budget, a tool another plugin offers), so loaded again when one of
	// them goes or is replaced.
	crowded bool
}

// errCrowded marks a refusal that depends on the other plugins serving,
// not on the plugin itself: it may load once they change.
var errCrowded = errors.New("crowded out by the plugins serving")

// toolIndex maps each tool name to the plugin version serving it. It is
// rebuilt on every load and unload, never changed in place.
type toolIndex struct {
	tools map[string]toolRef
	defs  []loop.ToolDefinition
}

type toolRef struct {
	p *Plugin
	t *pluginTool
}

var (
	_ loop.Toolset       = (*Registry)(nil)
	_ loop.ToolsetPinner = (*Registry)(nil)
)

// New returns an empty registry.
func New(cfg Config) (*Registry, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// Two caches: wazero keys compiled code by the module alone, not by
	// whether it was compiled with close-on-context-done, so code compiled
	// without those checks (rewritten modules, see interrupt.go) must never
	// be found by a runtime that relies on them.
	caches, err := newCompileCaches(cfg.CacheDir, cfg.CacheOwned, cfg.CacheWritable)
	if err != nil {
		return nil, fmt.Errorf("plugins: cache dir: %w", err)
	}
	for _, h := range cfg.Policy.AllowedHosts {
		if h == "*" {
			continue
		}
		if err := ValidateEgressHost(h); err != nil {
			return nil, fmt.Errorf("plugins: policy: %w", err)
		}
	}
	lookup := cfg.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	tel, err := newTelemetry(cfg.Tracer, cfg.Meter)
	if err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	policy := cfg.Policy
	if cfg.CacheDir != "" {
		// the compiled code of every plugin: never granted
		policy.Reserved = append(slices.Clone(policy.Reserved), cfg.CacheDir)
	}
	r := &Registry{
		env: loadEnv{
			caches: caches, compiles: &compileCount{}, policy: policy, lookupEnv: lookup, log: log,
			kv: cfg.KV, egress: cfg.Egress, artifacts: cfg.Artifacts, tel: tel,
			kvQuotas: &kvQuotas{}, kvUsage: cfg.KVUsage, quotaKV: cfg.KVQuota,
			files: &hostFiles{limit: hostFilesLimit(int64(policy.Budgets.withDefaults().OpenFilesTotal))},
		},
		onEvent:   cfg.OnEvent,
		log:       log,
		plugins:   map[string]*Plugin{},
		sources:   map[string]string{},
		failures:  map[string]failure{},
		index:     &toolIndex{tools: map[string]toolRef{}},
		loadingMu: map[string]*sync.Mutex{},
		loading:   map[string]time.Time{},
	}
	r.closing = make(chan struct{})
	if cfg.Meter != nil {
		if err := r.registerGauges(cfg.Meter); err != nil {
			return nil, fmt.Errorf("plugins: %w", err)
		}
	}
	return r, nil
}

// Close unloads every plugin (each closes when its running calls end) and
// closes the compilation cache.
func (r *Registry) Close() error {
	r.env.caches.keep()                         // the compiled code stays for the next start
	r.mu.Lock()                                 // retryCrowded starts no goroutine once closing is closed
	r.closeOnce.Do(func() { close(r.closing) }) // loads still running stop at once
	r.mu.Unlock()
	r.retries.Wait()
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	old := r.plugins
	r.plugins = map[string]*Plugin{}
	r.index = &toolIndex{tools: map[string]toolRef{}}
	r.mu.Unlock()
	for _, p := range old {
		p.release()
	}
	closeCaches := r.env.caches.Close
	// A compile abandoned by a cancelled load still writes to the caches:
	// they close when it ends, and nothing here waits for it.
	return r.env.compiles.whenIdle(closeCaches)
}

// PruneCompileCache removes from the compile cache the code of every module
// no plugin loaded (or being loaded) now is made of: versions replaced or
// removed while the host was stopped, and what an older layout of the
// cache kept. A module's code already goes when its last plugin closes;
// the host calls this once its first loads are done. It returns how many
// entries it removed.
func (r *Registry) PruneCompileCache() int { return r.env.caches.Prune() }

// Load reads the plugin at path (a manifest, or a folder holding
// plugin.json), compiles and validates it, and makes it the serving version
// of its name. On failure the previous version, if any, keeps serving.
//
// Loads of different plugins run at the same time; loads of one manifest
// run one after the other. The guest's code that loading runs (its start
// section, _initialize, describe) must finish within the policy's load
// timeout, and stops when ctx is done or the registry closes: a plugin that
// loops forever there is refused (ErrLoadTimeout) without holding up
// anything else.
func (r *Registry) Load(ctx context.Context, path string) (Info, error) {
	start := time.Now()
	source, _ := filepath.Abs(path)
	if fi, err := os.Stat(source); err == nil && fi.IsDir() {
		source = filepath.Join(source, ManifestFile)
	}
	unlock := r.lockSource(source)
	defer unlock()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func(done <-chan struct{}) {
		select {
		case <-r.closing:
			stop()
		case <-done:
		}
	}(ctx.Done())
	ctx, span := r.startLoad(ctx, path)
	r.setLoading(source, start)
	defer r.setLoading(source, time.Time{})

	m, err := ReadManifest(source)
	if err == nil {
		err = r.checkOpen()
	}
	var p *Plugin
	if err == nil {
		p, err = loadPlugin(ctx, &r.env, m)
	}
	var old, renamed *Plugin
	r.mu.RLock()
	prevName := r.sources[source] // the name this folder owned before, if any
	r.mu.RUnlock()
	if err == nil {
		old, renamed, err = r.swap(p, m, source)
		if err != nil {
			p.release()
			err = fmt.Errorf("plugin %q (%s): %w", m.Name, source, err)
		}
	}
	if err != nil {
		name := ""
		if m != nil && !errors.Is(err, ErrNameTaken) {
			name = m.Name
		}
		// A folder refused because another owns its name is listed by
		// its path: the owner's entry stays the owner's.
		r.recordFailure(name, source, err)
		r.log.ErrorContext(ctx, "plugin failed to load", "source", source, "err", err)
		ev := Event{Kind: EventFailed, Name: name, Source: source, Err: err, Duration: time.Since(start)}
		r.endLoad(ctx, span, ev)
		r.emit(ev)
		return Info{}, err
	}
	ev := Event{Kind: EventLoaded, Name: m.Name, Version: m.Version, Source: source, Duration: time.Since(start)}
	if old != nil {
		ev.Previous = old.Version()
		// The old version's calls in flight (and a pinned turn's later
		// ones) may finish within a grace, then stop.
		cause := fmt.Errorf("replaced by version %s, and the %s its calls had to finish ran out: %w", m.Version, ReplacedGrace, ErrUnloaded)
		time.AfterFunc(ReplacedGrace, func() { old.retire(cause) })
		old.release()
	}
	if renamed != nil {
		// The folder's manifest now names another plugin: the name it
		// named before is free, and its plugin goes as if removed.
		renamed.retire(ErrUnloaded)
		renamed.release()
		r.log.Info("plugin unloaded: its folder now names another plugin", "plugin", renamed.Name(),
			"version", renamed.Version(), "now", m.Name, "source", source)
		r.emit(Event{Kind: EventUnloaded, Name: renamed.Name(), Version: renamed.Version(), Source: source})
	}
	if old != nil || renamed != nil || (prevName != "" && prevName != m.Name) {
		// The new version may offer fewer tools, or others; a name freed
		// (also one whose plugin the admin had unloaded) may be claimed
		// by a folder waiting for it.
		r.retryCrowded(source)
	}
	r.log.InfoContext(ctx, "plugin loaded", "plugin", m.Name, "version", m.Version, "abi", p.ABI(),
		"stopper", p.stopper, "previous", ev.Previous, "grant", p.grant.String(), "took", ev.Duration)
	r.endLoad(ctx, span, ev)
	r.emit(ev)
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.info(p), nil
}

// swap makes a loaded plugin the serving version of its name and returns
// the version it replaced, and (renamed) the plugin its folder served
// under another name before, now removed.
//
// A plugin name belongs to the folder it was first loaded from, as long as
// that folder serves it: another folder naming it is refused
// (ErrNameTaken), and loads by itself once the owner is removed or renamed.
func (r *Registry) swap(p *Plugin, m *Manifest, source string) (old, renamed *Plugin, err error) {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	if err := r.checkOpen(); err != nil {
		return nil, nil, err
	}
	if err := r.checkOwner(m.Name, source); err != nil {
		return nil, nil, err
	}
	if err := r.checkConflicts(p, source); err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.sources[source]; ok && prev != m.Name {
		renamed = r.plugins[prev]
		delete(r.plugins, prev)
		delete(r.failures, prev)
	}
	old = r.plugins[m.Name]
	r.plugins[m.Name] = p
	for src, n := range r.sources {
		if n == m.Name && src != source {
			delete(r.sources, src)
		}
	}
	r.sources[source] = m.Name
	delete(r.failures, m.Name)
	delete(r.failures, source)
	r.rebuildLocked()
	return old, renamed, nil
}

// checkOwner refuses a plugin whose name belongs to another folder: one
// whose plugin serves under it, or was unloaded by the admin (Unload) and
// is still there.
func (r *Registry) checkOwner(name, source string) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for src, n := range r.sources {
		if n == name && src != source {
			unloaded := ""
			if r.plugins[name] == nil {
				unloaded = ", unloaded by the admin while its folder stays"
			}
			return fmt.Errorf("the name %q belongs to the plugin loaded from %s%s (%w; this folder loads by itself once that "+
				"one is removed or names another plugin; give this plugin its own name): %w", name, filepath.Dir(src), unloaded, errCrowded, ErrNameTaken)
		}
	}
	return nil
}

// lockSource serializes the loads of one manifest.
func (r *Registry) lockSource(source string) (unlock func()) {
	r.sourcesMu.Lock()
	mu := r.loadingMu[source]
	if mu == nil {
		mu = &sync.Mutex{}
		r.loadingMu[source] = mu
	}
	r.sourcesMu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// setLoading records that a manifest is being loaded (zero: no longer).
func (r *Registry) setLoading(source string, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if since.IsZero() {
		delete(r.loading, source)
	} else {
		r.loading[source] = since
	}
}

// Loading lists the manifests being loaded now.
func (r *Registry) Loading() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.loading))
	for src := range r.loading {
		out = append(out, src)
	}
	sort.Strings(out)
	return out
}

// Unload removes a plugin by name (DELETE /admin/plugins/{name}). Its
// calls in flight stop at once with ErrUnloaded, and turns that pinned it
// get ErrUnloaded from its tools; it closes when the last of them lets go.
//
// The name stays its folder's while that folder is there: another folder
// naming it is still refused (ErrNameTaken), as at a start, where the
// owner's folder would load again. The owner's folder changed, or loaded
// again (Load), serves it again; removed, it frees the name, and a folder
// waiting for it loads by itself.
func (r *Registry) Unload(ctx context.Context, name string) error {
	return r.unload(ctx, name, true)
}

// unload is Unload; keepName false (the folder is gone) frees the name.
func (r *Registry) unload(ctx context.Context, name string, keepName bool) error {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	r.mu.Lock()
	p := r.plugins[name]
	if p == nil {
		_, failed := r.failures[name]
		delete(r.failures, name)
		r.mu.Unlock()
		if failed {
			return nil
		}
		return &loop.NotFoundError{What: "plugin", ID: name}
	}
	delete(r.plugins, name)
	for src, n := range r.sources {
		if n == name {
			if !keepName {
				delete(r.sources, src)
			}
			r.dropFailuresLocked(src)
		}
	}
	r.rebuildLocked()
	r.mu.Unlock()
	p.retire(ErrUnloaded)
	p.release()
	r.log.Info("plugin unloaded", "plugin", name, "version", p.Version())
	r.emit(Event{Kind: EventUnloaded, Name: name, Version: p.Version(), Source: p.man.File})
	r.retryCrowded("")
	return nil
}

// retryCrowded loads again, in the background and one after the other,
// every plugin refused because of the plugins serving (the shared tools
// budget, a tool offered twice): called when one of those was unloaded or
// replaced, which may have made room. A plugin still crowded out is
// refused again and waits for the next change. except is the manifest
// that just loaded.
func (r *Registry) retryCrowded(except string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sources []string
	for _, f := range r.failures {
		if f.crowded && f.source != "" && f.source != except && !slices.Contains(sources, f.source) {
			sources = append(sources, f.source)
		}
	}
	select {
	case <-r.closing:
		return
	default:
	}
	if len(sources) == 0 {
		return
	}
	sort.Strings(sources)
	r.retries.Add(1)
	go func() {
		defer r.retries.Done()
		for _, src := range sources {
			select {
			case <-r.closing:
				return
			default:
			}
			if !r.stillCrowded(src) {
				continue // loaded, removed or changed meanwhile
			}
			r.log.Info("loading a plugin again: another plugin made room", "source", src)
			_, _ = r.Load(context.Background(), src) // the load logs and reports its outcome
		}
	}()
}

// stillCrowded reports whether a manifest's latest failure is still a
// crowded-out refusal.
func (r *Registry) stillCrowded(source string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, f := range r.failures {
		if f.source == source && f.crowded {
			return true
		}
	}
	return false
}

// unloadSource unloads the plugin loaded from a manifest path (the watcher
// saw it go away).
func (r *Registry) unloadSource(ctx context.Context, source string) error {
	r.mu.Lock()
	// Every failure recorded for this manifest goes with its folder,
	// whatever the failure (a bad manifest is keyed by path, a budget or
	// a conflict refusal by the plugin's name).
	r.dropFailuresLocked(source)
	name, ok := r.sources[source]
	if ok && r.plugins[name] == nil {
		// An owner the admin unloaded (Unload): its folder gone, its
		// name is free for a folder waiting for it.
		delete(r.sources, source)
		r.mu.Unlock()
		r.retryCrowded("")
		return nil
	}
	r.mu.Unlock()
	if !ok {
		return nil
	}
	return r.unload(ctx, name, false)
}

// Plugin returns the serving version of a plugin.
func (r *Registry) Plugin(name string) (*Plugin, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.plugins[name]
	return p, ok
}

// List describes every plugin: those serving and those that failed to load.
func (r *Registry) List() []Info {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Info
	for _, p := range r.plugins {
		out = append(out, r.info(p))
	}
	for key, f := range r.failures {
		if _, serving := r.plugins[key]; serving {
			continue
		}
		if filepath.IsAbs(key) {
			// failures of a manifest whose name is known are listed by name
			if name, ok := r.sources[key]; ok && r.plugins[name] != nil {
				continue
			}
		}
		out = append(out, Info{Name: key, State: "failed", Health: "failed", LastError: f.err, Source: f.source})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (r *Registry) info(p *Plugin) Info {
	in := Info{
		Name: p.Name(), Version: p.Version(), Kind: string(p.Kind()), ABI: p.ABI(),
		State: "serving", Health: "ok", Source: p.man.File, SHA256: p.hash, LoadedAt: p.loadedAt,
		Calls: p.calls.Load(), Failures: p.failures.Load(),
	}
	if p.pool != nil {
		live, idle, _ := p.pool.stats()
		in.Busy, in.Waiting = live-idle, p.pool.waiting()
	}
	for _, d := range p.defs {
		in.Tools = append(in.Tools, d.Name)
	}
	if e := p.lastErr.Load(); e != nil {
		in.LastError = *e
		in.Health = "degraded"
	}
	if f, ok := r.failures[p.Name()]; ok {
		in.LastError = f.err // a newer version failed to load; this one keeps serving
		in.Health = "degraded"
	}
	return in
}

func (r *Registry) checkOpen() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return errors.New("registry closed")
	}
	return nil
}

// checkConflicts refuses a plugin offering a tool another plugin offers,
// or one whose tools would take the host over its total of tools.
func (r *Registry) checkConflicts(p *Plugin, source string) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	total := len(p.tools)
	for name, other := range r.plugins {
		if name == p.Name() || name == r.sources[source] {
			continue // the versions this load replaces
		}
		total += len(other.tools)
		if max := p.budgets.MaxToolsTotal; total > max {
			return fmt.Errorf("the plugins would offer more than %d tools together (%w; raise plugins.budgets.maxToolsTotal, "+
				"or it loads by itself once another plugin is removed or offers fewer tools): %w", max, errCrowded, ErrBudget)
		}
		for t := range p.tools {
			if _, dup := other.tools[t]; dup {
				return fmt.Errorf("tool %q is already offered by plugin %q (%w; it loads by itself once that plugin is removed "+
					"or no longer offers it): %w", t, name, errCrowded, loop.ErrToolConflict)
			}
		}
	}
	return nil
}

// dropFailuresLocked forgets the failures recorded for a manifest, by
// whatever key they were recorded. Called with r.mu held.
func (r *Registry) dropFailuresLocked(source string) {
	for key, f := range r.failures {
		if key == source || f.source == source {
			delete(r.failures, key)
		}
	}
}

func (r *Registry) recordFailure(name, source string, err error) {
	key := name
	if key == "" {
		key = source
	}
	r.mu.Lock()
	r.failures[key] = failure{source: source, err: err.Error(), at: time.Now(), crowded: errors.Is(err, errCrowded)}
	r.mu.Unlock()
}

func (r *Registry) rebuildLocked() {
	idx := &toolIndex{tools: map[string]toolRef{}}
	for _, p := range r.plugins {
		if p.Kind() == "model" {
			continue
		}
		for _, d := range p.defs {
			idx.tools[d.Name] = toolRef{p: p, t: p.tools[d.Name]}
			idx.defs = append(idx.defs, d)
		}
	}
	slices.SortFunc(idx.defs, func(a, b loop.ToolDefinition) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	r.index = idx
}

func (r *Registry) emit(ev Event) {
	if r.onEvent != nil {
		r.onEvent(ev)
	}
}

// Tools lists the tools of every serving tool and agent plugin.
func (r *Registry) Tools(ctx context.Context) ([]loop.ToolDefinition, error) {
	r.mu.RLock()
	defs := r.index.defs
	r.mu.RUnlock()
	return slices.Clone(defs), nil
}

// Call runs a tool on the plugin serving it now.
func (r *Registry) Call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	r.mu.RLock()
	ref, ok := r.index.tools[call.Name]
	if ok && !ref.p.acquire() {
		ok = false
	}
	r.mu.RUnlock()
	if !ok {
		return loop.ToolResult{}, fmt.Errorf("plugins: %w", &loop.NotFoundError{What: "tool", ID: call.Name})
	}
	defer ref.p.release()
	return ref.p.callTool(ctx, ref.t, call, env)
}

// PinToolset returns the tools serving now, held for a whole turn: a plugin
// replaced meanwhile keeps serving this turn until release, for
// ReplacedGrace; one unloaded answers ErrUnloaded.
func (r *Registry) PinToolset() (loop.Toolset, func()) {
	r.mu.RLock()
	idx := r.index
	var held []*Plugin
	for _, p := range r.plugins {
		if p.Kind() != "model" && p.acquire() {
			held = append(held, p)
		}
	}
	r.mu.RUnlock()
	var once sync.Once
	return &pinnedToolset{idx: idx}, func() {
		once.Do(func() {
			for _, p := range held {
				p.release()
			}
		})
	}
}

type pinnedToolset struct{ idx *toolIndex }

var (
	_ loop.Toolset   = (*pinnedToolset)(nil)
	_ loop.SelfTimed = (*pinnedToolset)(nil)
	_ loop.SelfTimed = (*Registry)(nil)
)

// TimesCalls reports true: a plugin's call is bounded by its own call
// timeout, which counts its run, not its wait for a free instance.
func (t *pinnedToolset) TimesCalls(string) bool { return true }

// TimesCalls reports true: a plugin's call is bounded by its own call
// timeout, which counts its run, not its wait for a free instance.
func (r *Registry) TimesCalls(string) bool { return true }

func (t *pinnedToolset) Tools(ctx context.Context) ([]loop.ToolDefinition, error) {
	return slices.Clone(t.idx.defs), nil
}

func (t *pinnedToolset) Call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	ref, ok := t.idx.tools[call.Name]
	if !ok {
		return loop.ToolResult{}, fmt.Errorf("plugins: %w", &loop.NotFoundError{What: "tool", ID: call.Name})
	}
	return ref.p.callTool(ctx, ref.t, call, env)
}
