package plugins

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
	"go.opentelemetry.io/otel/attribute"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/loop/jsonlimit"
	"github.com/looopy-go/looopy/pdk"
)

// Errors of plugin calls. Match them with errors.Is.
var (
	// ErrTimeout: a call ran past the plugin's call timeout.
	ErrTimeout = errors.New("plugin call timed out")
	// ErrNoInstance: a call's caller ended (its turn's deadline) while the
	// call waited for a free instance, before the call ran. The call
	// timeout counts the call's run only, not this wait.
	ErrNoInstance = errors.New("no free plugin instance")
	// ErrTrap: the guest trapped, exited or ran out of memory; its
	// instance was discarded.
	ErrTrap = errors.New("plugin trapped")
	// ErrOutputLimit: the guest's output was over its limit.
	ErrOutputLimit = errors.New("plugin output over its limit")
	// ErrUnloaded: the plugin was unloaded.
	ErrUnloaded = errors.New("plugin unloaded")
	// ErrNameTaken: a plugin was refused because the plugin of that name
	// loaded from another folder serves.
	ErrNameTaken = errors.New("plugin name taken by another folder")
	// ReplacedGrace is how long the calls of a replaced version may still
	// run; past it they stop with ErrUnloaded (see RATIONALE.md).
	ReplacedGrace = 10 * time.Second
	// ErrLoadTimeout: the guest's code run while loading (start section,
	// _initialize, describe) did not finish within the load timeout; the
	// plugin was refused.
	ErrLoadTimeout = errors.New("plugin load ran past its timeout")
	// ErrCompileTimeout: compiling the plugin's module did not finish
	// within the compile timeout; the plugin was refused.
	ErrCompileTimeout = errors.New("plugin compile ran past its timeout")
)

// Plugin is one loaded version of a plugin: its compiled module, its pool of
// instances and what its describe answered. It is reference counted: turns
// pin the version they started with, and an unloaded or replaced version
// closes when the last of them lets go.
type Plugin struct {
	man      *Manifest
	grant    Grant
	redactor *strings.Replacer // the grant's secret values, nil when none
	timedOut error             // the cause of a call's context at the grant's call timeout
	hash     string
	letCache func() // lets the compile cache drop this module's code (compilecache.go)
	desc     pdk.Describe
	stopper  string // what stops a running guest: "fuel" (interrupt.go) or "wazero"
	tools    map[string]*pluginTool
	defs     []loop.ToolDefinition

	log       *slog.Logger
	kv        KV
	egress    *Egress
	artifacts ArtifactWriter

	drv   driver
	pool  *pool
	roots []*grantRoot // the granted folders, opened at load
	files *hostFiles   // the files every plugin's instances hold open (Budgets.OpenFilesTotal)

	refs atomic.Int64
	// retired ends when the version is unloaded (or, past a grace,
	// replaced): its calls in flight stop at once, later ones are refused.
	retired  context.Context
	retire   context.CancelCauseFunc
	closeMu  sync.Mutex
	closed   bool
	loadedAt time.Time

	calls, failures atomic.Int64
	lastErr         atomic.Pointer[string]

	budgets Budgets    // with defaults filled in
	logRate rateWindow // the plugin's log bytes this minute
	kvQuota *kvQuota   // shared by every version of the plugin
	kvUsage KVUsager
	quotaKV QuotaKV // set: the store checks the quota (kvQuota unused)

	tel      *telemetry
	attrs    attribute.Set // plugin, version: the labels of its metrics
	memPages atomic.Int64  // the largest memory an instance has had

	toolSets toolSets // encodings of the tool sets a model was sent lately
}

type pluginTool struct {
	def    loop.ToolDefinition
	schema *jsonschema.Schema
	agent  bool // the tool runs the agent plugin (OpRun)
}

// Name is the plugin's name (from its manifest).
func (p *Plugin) Name() string { return p.man.Name }

// Version is the plugin's version (from its manifest).
func (p *Plugin) Version() string { return p.man.Version }

// Kind is what the plugin provides.
func (p *Plugin) Kind() pdk.Kind { return p.man.Kind }

// Manifest returns the plugin's manifest.
func (p *Plugin) Manifest() *Manifest { return p.man }

// Grant returns the plugin's effective capabilities.
func (p *Plugin) Grant() Grant { return p.grant }

// ABI names the calling convention: "looopy" or "extism".
func (p *Plugin) ABI() string { return p.drv.abi() }

// Tools returns the tools the plugin offers (agents: one tool).
func (p *Plugin) Tools() []loop.ToolDefinition { return p.defs }

// SHA256 is the digest of the loaded .wasm.
func (p *Plugin) SHA256() string { return p.hash }

func (p *Plugin) egressGrant() EgressGrant {
	return EgressGrant{AllowedHosts: p.grant.AllowedHosts, AllowPrivate: p.grant.AllowPrivate, Timeout: p.grant.CallTimeout}
}

// acquire takes a reference; false when the plugin is already closed.
func (p *Plugin) acquire() bool {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed {
		return false
	}
	p.refs.Add(1)
	return true
}

// release drops a reference; the last one closes the plugin.
func (p *Plugin) release() {
	if p.refs.Add(-1) == 0 {
		p.closeMu.Lock()
		if !p.closed && p.refs.Load() == 0 {
			p.closed = true
			p.closeMu.Unlock()
			p.shutdown()
			return
		}
		p.closeMu.Unlock()
	}
}

func (p *Plugin) shutdown() {
	p.pool.close()
	if err := p.drv.close(context.Background()); err != nil {
		p.log.Warn("close plugin runtime", "err", err)
	}
	if p.letCache != nil {
		p.letCache() // the last plugin of this module: its compiled code goes
	}
	closeRoots(p.roots)
	p.log.Info("plugin closed")
}

// loadEnv is what loading a plugin needs from its registry.
type loadEnv struct {
	caches    *compileCaches // by module: plain code, and code compiled with interrupt.go's checks instead of wazero's
	compiles  *compileCount  // compiles running, abandoned ones included
	policy    Policy
	lookupEnv func(string) (string, bool)
	log       *slog.Logger
	kv        KV
	egress    *Egress
	artifacts ArtifactWriter
	tel       *telemetry
	kvQuotas  *kvQuotas
	kvUsage   KVUsager
	quotaKV   QuotaKV
	files     *hostFiles
}

// compile runs wazero's compiler on rt, bounded by the policy's compile
// timeout. wazero's compiler looks at its context only between functions,
// and only when it compiles with several workers (experimental
// WithCompilationWorkers): a compile whose time ran out, or whose load was
// cancelled (a host stopped while starting, a registry closed), returns at
// once, abandoned, and the compiler stops at the end of the function it is
// compiling (admission bounds each function, see ModuleLimits); it then
// closes what it made and rt. key names the plugin: one compile of a plugin
// runs at a time, an abandoned one included, so a file dropped again and
// again does not stack compiles; and at most Policy.MaxCompiles run at once
// in all. The caches stay open until every compile has ended
// (Registry.Close).
func compile(ctx context.Context, env *loadEnv, key string, rt wazero.Runtime, code []byte) (_ wazero.CompiledModule, _ error, abandoned bool) {
	return bounded(ctx, env, key, func(cctx context.Context) (wazero.CompiledModule, error) {
		return rt.CompileModule(cctx, code)
	}, func(cm wazero.CompiledModule) {
		if cm != nil {
			_ = cm.Close(context.Background())
		}
		_ = rt.Close(context.Background())
	})
}

// bounded runs run, a compile, under compile's rules: a slot of
// env.compiles for key, the policy's compile timeout, and abandonment when
// the time runs out or ctx ends. An abandoned compile's result, when it
// comes, goes to discard (with the zero T when it failed).
func bounded[T any](ctx context.Context, env *loadEnv, key string, run func(context.Context) (T, error), discard func(T)) (_ T, _ error, abandoned bool) {
	var zero T
	if ctx.Err() != nil {
		return zero, fmt.Errorf("compile: load cancelled: %w", context.Cause(ctx)), false
	}
	release, err := env.compiles.acquire(ctx, key, env.policy.maxCompiles())
	if err != nil {
		return zero, fmt.Errorf("compile: load cancelled while waiting to compile: %w", err), false
	}
	timeout := env.policy.compileTimeout()
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errCompileDeadline)
	defer cancel() // an abandoned compile stops at its next function
	cctx = experimental.WithCompilationWorkers(cctx, compileWorkers)
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		if compileHook != nil {
			compileHook()
		}
		v, err := run(cctx)
		if compileEndHook != nil {
			compileEndHook()
		}
		// Counted down before the load hears of it: a registry closed
		// after the load returned closes its caches at once.
		release()
		done <- result{v, err}
	}()
	stopped := func() error {
		if errors.Is(context.Cause(cctx), errCompileDeadline) {
			return fmt.Errorf("did not finish within %s (plugins.compileTimeout): %w", timeout, ErrCompileTimeout)
		}
		return fmt.Errorf("compile: load cancelled: %w", context.Cause(ctx))
	}
	select {
	case r := <-done:
		if r.err != nil && (errors.Is(context.Cause(cctx), errCompileDeadline) || ctx.Err() != nil) {
			return zero, stopped(), false
		}
		return r.v, r.err, false
	case <-cctx.Done():
		env.compiles.add()
		go func() {
			defer env.compiles.done()
			r := <-done
			if r.err != nil {
				r.v = zero
			}
			discard(r.v)
		}()
		return zero, stopped(), true
	}
}

// compileWorkers is how many goroutines compile one module: more than one,
// for wazero looks at the context only then.
const compileWorkers = 2

// errCompileDeadline is the cause of a compile's context ending at its
// timeout.
var errCompileDeadline = errors.New("compile timeout")

// compileHook and compileEndHook, set by tests, run before and after each
// compile.
var compileHook, compileEndHook func()

// compileCount counts the compiles running (abandoned ones included), keeps
// one per plugin and a bounded number in all, and runs one function when
// the last ends.
type compileCount struct {
	mu     sync.Mutex
	n      int
	onIdle func()
	slots  chan struct{}            // one token per compile running
	busy   map[string]chan struct{} // plugin -> closed when its compile ends
}

// acquire waits until no compile of key runs and fewer than limit compiles
// run (or ctx ends), and counts the compile in; release counts it out.
func (c *compileCount) acquire(ctx context.Context, key string, limit int) (release func(), err error) {
	c.mu.Lock()
	if c.slots == nil {
		c.slots = make(chan struct{}, limit)
		c.busy = map[string]chan struct{}{}
	}
	slots := c.slots
	for {
		prev := c.busy[key]
		if prev == nil {
			break
		}
		c.mu.Unlock()
		select {
		case <-prev:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		c.mu.Lock()
	}
	mine := make(chan struct{})
	c.busy[key] = mine
	c.n++
	c.mu.Unlock()
	giveUp := func() {
		c.mu.Lock()
		delete(c.busy, key)
		c.mu.Unlock()
		close(mine)
		c.done()
	}
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		giveUp()
		return nil, context.Cause(ctx)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-slots
			giveUp()
		})
	}, nil
}

func (c *compileCount) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *compileCount) done() {
	c.mu.Lock()
	c.n--
	var f func()
	if c.n == 0 {
		f, c.onIdle = c.onIdle, nil
	}
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

func (c *compileCount) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// whenIdle runs f now when no compile runs, and returns its error; else it
// runs f when the last compile ends, its error unheard, and returns nil.
func (c *compileCount) whenIdle(f func() error) error {
	c.mu.Lock()
	if c.n > 0 {
		c.onIdle = func() { _ = f() }
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	return f()
}

// loadPlugin reads, verifies, compiles and validates a plugin. It returns a
// plugin holding one reference, or an error naming the file and the problem.
func loadPlugin(ctx context.Context, env *loadEnv, m *Manifest) (_ *Plugin, err error) {
	wasmPath := filepath.Join(m.Dir, m.Wasm)
	defer func() {
		if err != nil {
			err = fmt.Errorf("plugin %q (%s): %w", m.Name, wasmPath, err)
		}
	}()
	lim := env.policy.ModuleLimits.withDefaults()
	bin, err := readModule(wasmPath, lim.ModuleBytes)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(bin)
	hash := hex.EncodeToString(sum[:])
	if hash != m.SHA256 {
		return nil, fmt.Errorf("sha256 is %s, the manifest says %s", hash, m.SHA256)
	}
	// The module's compiled code is kept (on disk) while this load runs
	// and, once loaded, until the plugin closes.
	cache, icache, letCache := env.caches.hold(hash)
	defer func() {
		if err != nil {
			letCache()
		}
	}()
	// What the compiler is given is bounded first: wazero cannot be
	// stopped inside a function (see compile).
	facts, err := moduleFactsOf(sum, bin, lim)
	if err != nil {
		return nil, fmt.Errorf("refused before compiling: %w", err)
	}
	g := env.policy.Grant(m, env.lookupEnv)
	p := &Plugin{
		man: m, grant: g, hash: hash, redactor: newRedactor(g.Secrets),
		timedOut: fmt.Errorf("%w: the plugin's call timeout of %s ran out", context.DeadlineExceeded, g.CallTimeout),
		log:      env.log.With("plugin", m.Name, "version", m.Version),
		kv:       env.kv, egress: env.egress, artifacts: env.artifacts,
		loadedAt: time.Now(), tel: env.tel,
		budgets: env.policy.Budgets.withDefaults(), kvQuota: env.kvQuotas.of(m.Name), kvUsage: env.kvUsage, quotaKV: env.quotaKV,
		files: env.files,
		attrs: attribute.NewSet(attribute.String("plugin", m.Name), attribute.String("version", m.Version)),
	}
	p.retired, p.retire = context.WithCancelCause(context.Background())
	if len(g.Refused) > 0 {
		p.log.Warn("capabilities asked for and not granted", "refused", g.Refused)
	}
	if p.roots, err = openRoots(g.Paths); err != nil {
		return nil, err
	}
	keepRoots := false
	defer func() {
		if !keepRoots {
			closeRoots(p.roots)
		}
	}()

	// A guest is stopped by the checks addInterrupt compiles in, or, for a
	// module it does not rewrite, by wazero's (see interrupt.go).
	code, intr, why := facts.code, facts.intr, facts.why
	if code == nil {
		return nil, why
	}
	if why != nil && !errors.Is(why, errSkip) {
		p.log.Info("guest compiled with wazero's interrupt checks (slower)", "reason", why)
	}
	newRuntime := func(intr *interruptible) wazero.Runtime {
		cfg := wazero.NewRuntimeConfig().WithMemoryLimitPages(g.MemoryPages)
		if intr != nil {
			cfg = cfg.WithCompilationCache(icache)
		} else {
			cfg = cfg.WithCloseOnContextDone(true).WithCompilationCache(cache)
		}
		return wazero.NewRuntimeWithConfig(ctx, cfg)
	}
	rt := newRuntime(intr)
	closeRT := true
	defer func() {
		if closeRT {
			_ = rt.Close(context.Background())
		}
	}()
	cm, err, abandoned := compile(ctx, env, m.File, rt, code)
	if abandoned {
		closeRT = false // the compile closes it when it ends
	} else if err != nil && intr != nil {
		// The rewrite of a module wazero takes should compile too; if it
		// does not, the module runs as it came, under wazero's checks.
		_ = rt.Close(context.Background())
		rewriteErr := err
		code, intr, rt = bin, nil, newRuntime(nil)
		cm, err, abandoned = compile(ctx, env, m.File, rt, code)
		if abandoned {
			closeRT = false
		} else if err == nil {
			p.log.Warn("guest compiled with wazero's interrupt checks (slower): its rewrite did not compile", "err", rewriteErr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	p.stopper = "wazero"
	if intr != nil {
		p.stopper = "fuel"
	}
	abi, err := abiOf(cm)
	if err != nil {
		return nil, err
	}
	if err := checkImports(cm, g.HostFunctions, abi == "extism"); err != nil {
		return nil, err
	}
	switch abi {
	case "looopy":
		if err := checkLooopyExports(cm); err != nil {
			return nil, err
		}
		if _, err := wasiInstantiate(ctx, rt); err != nil {
			return nil, fmt.Errorf("wasi: %w", err)
		}
		if err := instantiateHostModule(ctx, rt, g.HostFunctions); err != nil {
			return nil, fmt.Errorf("host functions: %w", err)
		}
		p.drv = &looopyDriver{p: p, rt: rt, compiled: cm, modCfg: moduleConfig(m, g, intr), intr: intr}
	case "extism":
		p.stopper = "wazero" // the Extism SDK's runtime, on the module as it came
		if err := checkExtismExports(cm, m.Kind); err != nil {
			return nil, err
		}
		_ = rt.Close(ctx)
		// The SDK compiles the module again (a read of the compilation
		// cache when its key matches the compile above; a full compile when
		// the cache is cold or gone), under the same bounds.
		drv, err, _ := bounded(ctx, env, m.File, func(cctx context.Context) (*extismDriver, error) {
			return newExtismDriver(cctx, p, bin, cache)
		}, func(d *extismDriver) {
			if d != nil {
				_ = d.close(context.Background())
			}
		})
		if err != nil {
			return nil, fmt.Errorf("compile: %w", err)
		}
		p.drv = drv
	}
	closeRT = false
	keepRoots = true // from here on, the plugin's shutdown closes them
	p.pool = newPool(g.Instances, g.ReservedInstances, p.newInstance)
	p.refs.Store(1)
	defer func() {
		if err != nil {
			p.release()
		}
	}()

	// describe must answer, and match the manifest. Instantiating (the
	// start section, _initialize) and describing run guest code: both are
	// bounded by the load timeout and stop when the load is cancelled.
	lctx, cancel := context.WithTimeout(ctx, env.policy.loadTimeout())
	defer cancel()
	first, err := p.newInstance(lctx)
	if err != nil {
		return nil, loadStepError(ctx, lctx, "instantiate (start section, _initialize)", env.policy.loadTimeout(), err)
	}
	out, err := first.call(lctx, pdk.OpDescribe, []byte("{}"))
	if err != nil {
		first.close()
		return nil, loadStepError(ctx, lctx, "describe", env.policy.loadTimeout(), err)
	}
	if err := jsonlimit.Check(out, jsonlimit.MaxDepth); err != nil {
		first.close()
		return nil, fmt.Errorf("describe: answer refused: %w", err)
	}
	if err := json.Unmarshal(out, &p.desc); err != nil {
		first.close()
		return nil, fmt.Errorf("describe: answer does not decode: %w", err)
	}
	p.noteMemory(first)
	p.pool.add(first)
	if err := p.indexTools(); err != nil {
		return nil, err
	}
	p.letCache = letCache
	return p, nil
}

// mountFiles makes an instance's mounts of the granted folders and the
// count of the files it opens through them; nil, nil when none is granted.
func (p *Plugin) mountFiles() (wazero.FSConfig, *openFiles) {
	if len(p.roots) == 0 {
		return nil, nil
	}
	files := newOpenFiles(int64(p.budgets.OpenFilesPerInstance), p.files)
	return mountGrants(p.roots, files), files
}

// loadStepError says why a load step that ran guest code failed: the load
// was cancelled, the step ran past the load timeout, or the guest failed.
func loadStepError(parent, lctx context.Context, step string, timeout time.Duration, err error) error {
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("%s: load cancelled: %w", step, parent.Err())
	case errors.Is(lctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%s did not finish within %s: %w", step, timeout, ErrLoadTimeout)
	}
	return fmt.Errorf("%s: %w", step, err)
}

// indexTools checks describe's answer against the manifest and compiles each
// tool's argument schema.
func (p *Plugin) indexTools() error {
	d := p.desc
	if d.Kind != "" && d.Kind != p.man.Kind {
		return fmt.Errorf("describe says kind %q, the manifest %q", d.Kind, p.man.Kind)
	}
	p.tools = map[string]*pluginTool{}
	if n := len(d.Tools); n > p.budgets.MaxTools {
		return fmt.Errorf("describe: %d tools, over the limit of %d per plugin: %w", n, p.budgets.MaxTools, ErrBudget)
	}
	add := func(def loop.ToolDefinition, agent bool) error {
		if def.Name == "" {
			return errors.New("describe: a tool without a name")
		}
		if n := int64(len(def.Name) + len(def.Description) + len(def.Parameters)); n > p.budgets.MaxSchemaBytes {
			return fmt.Errorf("describe: tool %q: definition of %d bytes, over the limit of %d: %w", def.Name, n, p.budgets.MaxSchemaBytes, ErrBudget)
		}
		if _, dup := p.tools[def.Name]; dup {
			return fmt.Errorf("describe: tool %q listed twice", def.Name)
		}
		if len(def.Parameters) == 0 {
			def.Parameters = json.RawMessage(`{"type":"object"}`)
		}
		sch, err := compileSchema(def.Name, def.Parameters)
		if err != nil {
			return err
		}
		p.tools[def.Name] = &pluginTool{def: def, schema: sch, agent: agent}
		p.defs = append(p.defs, def)
		return nil
	}
	switch p.man.Kind {
	case pdk.KindTool:
		if len(d.Tools) == 0 {
			return errors.New("describe: a tool plugin that offers no tool")
		}
		for _, t := range d.Tools {
			if err := add(t, false); err != nil {
				return err
			}
		}
	case pdk.KindAgent:
		def := loop.ToolDefinition{
			Name:        p.man.Name,
			Description: p.man.Description,
			Parameters:  json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string","description":"what to ask the agent"}},"required":["prompt"]}`),
		}
		if d.Agent != nil {
			if d.Agent.Name != "" {
				def.Name = d.Agent.Name
			}
			if d.Agent.Description != "" {
				def.Description = d.Agent.Description
			}
			if len(d.Agent.Parameters) > 0 {
				def.Parameters = d.Agent.Parameters
			}
		}
		if def.Description == "" {
			def.Description = "Sub-agent " + p.man.Name
		}
		return add(def, true)
	}
	return nil
}

func compileSchema(tool string, schema json.RawMessage) (_ *jsonschema.Schema, err error) {
	// The schema is the guest's: whatever the compiler makes of it, a
	// panic is a refused schema, not a dead host.
	defer recoverInto(&err, "tool %q: parameters schema", tool)
	// The compiler's cost grows faster than linearly with nesting ({"not":
	// ...} a few thousand deep compiles for minutes, and the compiler takes
	// no deadline): the nesting is bounded before it runs.
	if err := jsonlimit.CheckSchema(schema); err != nil {
		return nil, fmt.Errorf("tool %q: parameters schema: %w", tool, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("tool %q: parameters schema: %w", tool, err)
	}
	c := jsonschema.NewCompiler()
	// A schema may refer only inside itself: no file, no URL is ever read
	// (a $ref to file:///... would read the host's files and quote them in
	// errors).
	c.UseLoader(jsonschema.SchemeURLLoader{})
	url := "mem://tool/" + tool + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("tool %q: parameters schema: %w", tool, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("tool %q: parameters schema: %w", tool, err)
	}
	return sch, nil
}

// moduleConfig is the WASI sandbox of a Looopy-ABI instance: no arguments,
// no environment but the config and secrets, real clocks, crypto
// randomness; each instance mounts its granted folders (mountFiles).
func moduleConfig(m *Manifest, g Grant, intr *interruptible) wazero.ModuleConfig {
	start := []string{"_initialize"}
	if intr != nil {
		start = nil // the driver calls them, with the interrupt armed
	}
	cfg := wazero.NewModuleConfig().
		WithStartFunctions(start...).
		WithSysWalltime().WithSysNanotime().
		WithRandSource(rand.Reader)
	if len(m.Config) > 0 {
		b, _ := json.Marshal(m.Config)
		cfg = cfg.WithEnv(pdk.EnvConfig, string(b))
	}
	for name, v := range g.Secrets {
		cfg = cfg.WithEnv(pdk.EnvSecretPrefix+name, v)
	}
	return cfg
}

// invoke runs one operation on a pooled instance under the call timeout.
// decode reads the output before the instance goes back to the pool.
func (p *Plugin) invoke(ctx context.Context, op pdk.Op, in []byte, setup func(*callState), decode func([]byte) error) (err error) {
	return p.invokeWith(ctx, op, func(*callState) ([]byte, error) { return in, nil }, setup, decode)
}

// invokeWith is invoke with an input made for the instance that runs the
// call (its state says what the instance already holds).
func (p *Plugin) invokeWith(ctx context.Context, op pdk.Op, input func(*callState) ([]byte, error), setup func(*callState), decode func([]byte) error) (err error) {
	p.calls.Add(1)
	began := time.Now()
	ctx, span := p.startCall(ctx, op)
	discarded := false
	defer func() { p.endCall(ctx, span, op, began, discarded, err) }()
	if p.retired.Err() != nil {
		return p.failed(ctx, op, fmt.Errorf("plugin %q: %s refused: %w", p.Name(), op, context.Cause(p.retired)))
	}
	// The wait for a free instance is not the call's run: the call
	// timeout starts once the call has its instance. The wait is bounded
	// by the caller (its cancel, its turn's deadline), by an unload of
	// the version, and shared out fairly by the pool.
	principal := PrincipalOf(ctx)
	waited := time.Now()
	inst, err := p.pool.acquire(ctx, p.retired.Done())
	if err != nil {
		return p.failed(ctx, op, p.waitError(ctx, op, err, time.Since(waited)))
	}
	// The cause names the limit, so that whatever the deadline cuts off
	// (a host function, an HTTP read) says which one it was.
	cctx, cancel := context.WithTimeoutCause(ctx, p.grant.CallTimeout, p.timedOut)
	defer cancel()
	// Unloading the version stops the call at once (the guest is
	// interrupted as at its timeout), whatever its call timeout. It ends
	// the call's own context rather than one more layered on it (a layer
	// and a closure cost 8 allocations and 600 bytes a call): what the
	// call was stopped for is told by classify, which looks at p.retired.
	unhook := context.AfterFunc(p.retired, cancel)
	defer unhook()
	if inst == nil {
		// A slot to make an instance in: making it is part of the run.
		if inst, err = p.pool.create(cctx, principal); err != nil {
			return p.failed(ctx, op, p.classify(ctx, cctx, op, err, ""))
		}
	}
	st := inst.state()
	if setup != nil {
		setup(st)
	}
	in, err := input(st)
	if err != nil {
		st.reset()
		p.pool.put(principal, inst, true)
		return err
	}
	out, err := inst.call(cctx, op, in)
	healthy := true
	switch {
	case ctx.Err() != nil:
		// The caller cancelled. Whatever the guest answered after that
		// (the error of a host function the cancel cut short, or an
		// answer built on one) the call ends cancelled: the outcome must
		// not depend on whether the interrupt or the guest's own return
		// came first.
		if err != nil && !isGuestError(err) {
			healthy = false
		}
		err = fmt.Errorf("plugin %q: %s cancelled: %w", p.Name(), op, ctx.Err())
	case err != nil:
		if !isGuestError(err) {
			healthy = false
			err = p.classify(ctx, cctx, op, err, inst.stderrTail())
		}
	case decode != nil:
		// What the host keeps of an answer is stored inside records of its
		// own, a few levels deeper: an answer nested past jsonlimit.MaxDepth
		// is refused (a tool call's becomes an error result for the model),
		// so no stored record nests past what a decoder reads back.
		if derr := jsonlimit.Check(out, jsonlimit.MaxDepth); derr != nil {
			err = &pdk.Error{Code: pdk.CodeToolFailed, Message: fmt.Sprintf("plugin %q: %s: answer refused: %v", p.Name(), op, derr)}
		} else if derr := decode(out); derr != nil {
			err = fmt.Errorf("plugin %q: %s: answer does not decode: %w", p.Name(), op, derr)
		}
	}
	st.reset()
	if healthy {
		p.noteMemory(inst)
	}
	discarded = !healthy
	p.pool.put(principal, inst, healthy)
	if err != nil {
		return p.failed(ctx, op, err)
	}
	return nil
}

// isGuestError reports whether err is (or wraps) the guest's own error.
// The target errors.As needs escapes to the heap: made only when there is
// an error to look at, not on every call.
func isGuestError(err error) bool {
	var pe *pdk.Error
	return errors.As(err, &pe)
}

func (p *Plugin) failed(ctx context.Context, op pdk.Op, err error) error {
	var pe *pdk.Error
	if errors.As(err, &pe) {
		return err
	}
	p.failures.Add(1)
	msg := err.Error()
	p.lastErr.Store(&msg)
	if ctx.Err() == nil {
		p.log.WarnContext(ctx, "plugin call failed", "op", op.String(), "err", err)
	}
	return err
}

// waitError says why a call ended while it waited for a free instance,
// before it ran: never the call timeout, which had not started.
func (p *Plugin) waitError(ctx context.Context, op pdk.Op, err error, waited time.Duration) error {
	name := p.Name()
	switch {
	case errors.Is(err, errPoolClosed):
		return fmt.Errorf("plugin %q: %w", name, ErrUnloaded)
	case errors.Is(err, errStopped):
		return fmt.Errorf("plugin %q: %s stopped: %w", name, op, context.Cause(p.retired))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		_, _, size := p.pool.stats()
		return fmt.Errorf("plugin %q: %s got no free instance (all %d busy) within its caller's deadline; waited %s, it did not run: %w: %w",
			name, op, size, waited.Round(time.Millisecond), ErrNoInstance, ctx.Err())
	}
	return fmt.Errorf("plugin %q: %s cancelled: %w", name, op, ctx.Err())
}

// classify turns a failed call into an error that says what happened.
func (p *Plugin) classify(parent, cctx context.Context, op pdk.Op, err error, stderr string) error {
	name := p.Name()
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("plugin %q: %s cancelled: %w", name, op, parent.Err())
	case p.retired.Err() != nil:
		return fmt.Errorf("plugin %q: %s stopped: %w", name, op, context.Cause(p.retired))
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("plugin %q: %s ran past its timeout of %s: %w", name, op, p.grant.CallTimeout, ErrTimeout)
	case errors.Is(err, errPoolClosed):
		return fmt.Errorf("plugin %q: %w", name, ErrUnloaded)
	case errors.Is(err, ErrOutputLimit):
		return fmt.Errorf("plugin %q: %s: %w", name, op, err)
	}
	var exit *sys.ExitError
	detail, _, _ := strings.Cut(err.Error(), "\n")
	if errors.As(err, &exit) {
		detail = fmt.Sprintf("exited with code %d", exit.ExitCode())
	}
	if why := fatalLine(stderr); why != "" {
		detail += " (" + why + ")"
	}
	return fmt.Errorf("plugin %q: %s: %w: %s", name, op, ErrTrap, detail)
}

// fatalLine picks what a guest said about its own death from its stderr:
// a Go runtime's "fatal error: …" or "panic: …", else the last line.
func fatalLine(stderr string) string {
	if stderr == "" {
		return ""
	}
	lines := strings.Split(stderr, "\n")
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "runtime: out of memory") {
			return lastLine(l, 200)
		}
	}
	return "stderr: " + lastLine(strings.TrimSpace(lines[len(lines)-1]), 200)
}

func lastLine(s string, max int) string {
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return s
}

func decodeGuestError(b []byte) error {
	var pe pdk.Error
	if err := json.Unmarshal(b, &pe); err != nil || pe.Message == "" {
		return &pdk.Error{Code: pdk.CodeInternal, Message: string(b)}
	}
	return &pe
}

// recoverInto turns a panic of code handling a guest's data into an error
// (deferred: defer recoverInto(&err, "what %s", arg)).
func recoverInto(err *error, format string, args ...any) {
	if v := recover(); v != nil {
		*err = fmt.Errorf(format+": internal error handling it: %v", append(args, v)...)
	}
}
