package plugins

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/looopy-go/looopy/pdk"
)

// Defaults of a plugin's limits when its manifest asks for none.
const (
	DefaultMemoryPages = 256 // 16 MiB
	DefaultCallTimeout = 30 * time.Second
	DefaultOutputLimit = 1 << 20
	DefaultInstances   = 4
	// DefaultReservedInstances is how many of each plugin's instances are
	// kept for principals holding none of them (Policy.ReservedInstances).
	DefaultReservedInstances = 1
	// DefaultLoadTimeout bounds the guest code a load runs (start section,
	// _initialize, describe).
	DefaultLoadTimeout = 10 * time.Second
	// DefaultCompileTimeout bounds compiling a module: the largest example
	// plugin (a Go one, 6 MB) compiles in seconds, and in over a minute on a
	// loaded machine under the race detector.
	DefaultCompileTimeout = 3 * time.Minute
	// MinGoMemoryPages is what a Go guest needs to start at all.
	MinGoMemoryPages = 44
)

// Policy is what the operator allows plugins at most. A plugin gets the
// intersection of what its manifest asks for and what the policy allows. The
// zero Policy allows no host, no private network, no folder, no secret, and
// caps the limits at their defaults.
type Policy struct {
	// AllowedHosts are the host patterns plugins may be granted (same syntax
	// as EgressGrant.AllowedHosts). "*" lets a plugin have any host it asks
	// for. A requested host is kept when some pattern here covers it.
	AllowedHosts []string
	// AllowPrivateNetwork lets plugins that ask for it reach loopback and
	// private addresses.
	AllowPrivateNetwork bool
	// PathRoots are the folders under which plugins may be granted paths.
	// A requested path is resolved (every link followed) when the plugin
	// loads, and granted only when what it resolves to lies inside one of
	// them (resolved the same way).
	PathRoots []string
	// Reserved are the paths the host owns: the plugin folder, the data
	// folder, the config file, caches. A grant that is one of them, lies
	// inside one or contains one is refused, whatever PathRoots says. Each
	// plugin's own folder and the registry's compilation cache are always
	// reserved.
	Reserved []string
	// ReadOnlyPaths forces every granted path read-only.
	ReadOnlyPaths bool
	// Secrets are the environment variables plugins may name as secrets
	// ("*": any).
	Secrets []string
	// HostFunctions the host lends (nil: every host function; the egress and
	// the folders stay gated by the fields above).
	HostFunctions []string
	// CallerAuth names the plugins (names or path.Match globs) that may
	// receive the credentials of the client that sent a turn's message
	// (its principal, scopes and token) through the credential host
	// function. Every other plugin asking for them is refused.
	CallerAuth []string
	// Maxima of the limits; zero means the default of each limit.
	MaxMemoryPages uint32
	MaxCallTimeout time.Duration
	MaxOutputLimit int64
	MaxInstances   int
	// ReservedInstances is how many instances of each plugin are kept for
	// principals (plugins.WithPrincipal) holding none of that plugin's
	// instances: a principal already holding one takes another only while
	// more than this many are free, so that one principal's slow calls
	// never hold every instance while another principal waits. 0 means
	// DefaultReservedInstances, a negative value none (one principal may
	// hold them all). It is capped at the plugin's instances less one; a
	// plugin of one instance has no reserve.
	ReservedInstances int
	// Budgets bound what each plugin writes through the host (log,
	// events, key-value, artifacts, HTTP, tool definitions).
	Budgets Budgets
	// LoadTimeout bounds the guest code loading a plugin runs: its start
	// section and _initialize, then describe (default DefaultLoadTimeout).
	// A plugin past it is refused.
	LoadTimeout time.Duration
	// CompileTimeout bounds compiling a plugin's module to machine code
	// (default DefaultCompileTimeout). A plugin past it is refused
	// (ErrCompileTimeout); wazero's compiler stops at its next function.
	CompileTimeout time.Duration
	// ModuleLimits bound what a module may declare; a module over one is
	// refused before it is compiled (ErrModuleLimit).
	ModuleLimits ModuleLimits
	// MaxCompiles is how many modules compile at once, all plugins
	// together (default: the number of CPUs, at least 2). A compile that
	// ran out of time holds its place until the compiler has stopped.
	MaxCompiles int
}

func (p Policy) compileTimeout() time.Duration {
	if p.CompileTimeout > 0 {
		return p.CompileTimeout
	}
	return DefaultCompileTimeout
}

func (p Policy) maxCompiles() int {
	if p.MaxCompiles > 0 {
		return p.MaxCompiles
	}
	return max(2, runtime.GOMAXPROCS(0))
}

func (p Policy) loadTimeout() time.Duration {
	if p.LoadTimeout > 0 {
		return p.LoadTimeout
	}
	return DefaultLoadTimeout
}

// Grant is a plugin's effective capabilities: requested ∩ allowed, with the
// defaults filled in.
type Grant struct {
	AllowedHosts []string
	AllowPrivate bool
	Paths        []PathGrant
	MemoryPages  uint32
	CallTimeout  time.Duration
	OutputLimit  int64
	Instances    int
	// ReservedInstances of Instances are kept for principals holding none
	// (Policy.ReservedInstances, at most Instances-1).
	ReservedInstances int
	HostFunctions     map[string]bool
	Secrets           map[string]string // secret name -> value
	// CallerAuth: the plugin may receive the caller's credentials
	// (Policy.CallerAuth).
	CallerAuth bool
	// Refused lists what was asked for and not granted, for the log.
	Refused []string
}

// Grant computes the effective capabilities of m. lookupEnv resolves
// secrets (nil: no secret resolves).
func (p Policy) Grant(m *Manifest, lookupEnv func(string) (string, bool)) Grant {
	c := m.Capabilities
	g := Grant{HostFunctions: map[string]bool{}, Secrets: map[string]string{}}

	for _, h := range c.AllowedHosts {
		if hostCovered(p.AllowedHosts, h) {
			g.AllowedHosts = append(g.AllowedHosts, h)
		} else {
			g.Refused = append(g.Refused, "host "+h)
		}
	}
	if c.AllowPrivateNetwork {
		if p.AllowPrivateNetwork {
			g.AllowPrivate = true
		} else {
			g.Refused = append(g.Refused, "private network")
		}
	}
	if len(c.AllowedPaths) > 0 {
		roots := resolveAll(p.PathRoots)
		reserved := resolveAll(append([]string{m.Dir}, p.Reserved...))
		for _, pg := range c.AllowedPaths {
			clean := filepath.Clean(pg.Path)
			resolved, why := resolveGrant(clean, roots, reserved)
			if why != "" {
				g.Refused = append(g.Refused, "path "+clean+" ("+why+")")
				continue
			}
			g.Paths = append(g.Paths, PathGrant{Path: clean, ReadOnly: pg.ReadOnly || p.ReadOnlyPaths, Resolved: resolved})
		}
	}

	g.MemoryPages = limit(c.MemoryPages, DefaultMemoryPages, p.MaxMemoryPages)
	g.CallTimeout = limit(time.Duration(c.CallTimeout), DefaultCallTimeout, p.MaxCallTimeout)
	g.OutputLimit = limit(c.OutputLimit, DefaultOutputLimit, p.MaxOutputLimit)
	g.Instances = limit(c.Instances, DefaultInstances, p.MaxInstances)
	switch {
	case p.ReservedInstances < 0:
	case p.ReservedInstances == 0:
		g.ReservedInstances = min(DefaultReservedInstances, g.Instances-1)
	default:
		g.ReservedInstances = min(p.ReservedInstances, g.Instances-1)
	}
	// A limit asked for above the policy's maximum is capped, and said so.
	capped := func(what string, asked, got any, over bool) {
		if over {
			g.Refused = append(g.Refused, fmt.Sprintf("%s %v capped at %v by the host's policy", what, asked, got))
		}
	}
	capped("memoryPages", c.MemoryPages, g.MemoryPages, c.MemoryPages > g.MemoryPages)
	capped("callTimeout", time.Duration(c.CallTimeout), g.CallTimeout, time.Duration(c.CallTimeout) > g.CallTimeout)
	capped("outputLimit", c.OutputLimit, g.OutputLimit, c.OutputLimit > g.OutputLimit)
	capped("instances", c.Instances, g.Instances, c.Instances > g.Instances)

	for _, f := range c.HostFunctions {
		if p.HostFunctions == nil || slices.Contains(p.HostFunctions, f) {
			g.HostFunctions[f] = true
		} else {
			g.Refused = append(g.Refused, "host function "+f)
		}
	}
	// result_read is the other half of every function that answers; it
	// comes with any of them.
	if len(g.HostFunctions) > 0 {
		g.HostFunctions[pdk.HostResultRead] = true
	}

	for _, pat := range p.CallerAuth {
		if ok, _ := path.Match(pat, m.Name); ok {
			g.CallerAuth = true
		}
	}
	for name, env := range m.Secrets {
		if !slices.Contains(p.Secrets, "*") && !slices.Contains(p.Secrets, env) {
			g.Refused = append(g.Refused, "secret "+name+" ($"+env+")")
			continue
		}
		if lookupEnv != nil {
			if v, ok := lookupEnv(env); ok {
				g.Secrets[name] = v
			}
		}
	}
	return g
}

// limit returns the requested value, or def when zero, capped at max (its
// own default when zero) and never above it.
func limit[T int | int64 | uint32 | time.Duration](req, def, max T) T {
	if max == 0 {
		max = def
	}
	v := req
	if v == 0 {
		v = def
	}
	return min(v, max)
}

// hostCovered reports whether a requested host pattern is within one of the
// allowed patterns.
func hostCovered(allowed []string, req string) bool {
	reqHost, reqPort := splitPattern(req)
	for _, a := range allowed {
		if a == "*" && !isIPPattern(reqHost) {
			return true
		}
		aHost, aPort := splitPattern(a)
		if aPort != "" && aPort != reqPort {
			continue
		}
		if strings.EqualFold(aHost, reqHost) {
			return true
		}
		if suffix, ok := strings.CutPrefix(aHost, "*."); ok {
			rh := strings.TrimPrefix(reqHost, "*.")
			if strings.HasSuffix(strings.ToLower(rh), "."+strings.ToLower(suffix)) {
				return true
			}
		}
	}
	return false
}

func splitPattern(p string) (host, port string) {
	if strings.HasPrefix(p, "[") {
		if i := strings.Index(p, "]"); i > 0 {
			host, rest := p[:i+1], p[i+1:]
			return host, strings.TrimPrefix(rest, ":")
		}
	}
	if i := strings.LastIndex(p, ":"); i > 0 && !strings.Contains(p[:i], ":") {
		return p[:i], p[i+1:]
	}
	return p, ""
}

func isIPPattern(h string) bool {
	if strings.HasPrefix(h, "[") {
		return true
	}
	for _, r := range h {
		if (r < '0' || r > '9') && r != '.' {
			return false
		}
	}
	return h != ""
}

// resolveGrant resolves a requested folder through every link and checks
// it: it must be a folder inside one of the (resolved) roots, and must not
// be, lie inside or contain a (resolved) reserved path. It returns the
// resolved path, or why the grant is refused.
func resolveGrant(path string, roots, reserved []string) (string, string) {
	if !filepath.IsAbs(path) {
		return "", "not an absolute path"
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", "does not resolve to a folder"
	}
	if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
		return "", "does not resolve to a folder"
	}
	inRoot := false
	for _, r := range roots {
		if within(resolved, r) {
			inRoot = true
			break
		}
	}
	if !inRoot {
		if resolved != path {
			return "", "resolves to " + resolved + ", outside the folders the policy allows"
		}
		return "", "outside the folders the policy allows"
	}
	for _, r := range reserved {
		if within(resolved, r) || within(r, resolved) {
			return "", "the host owns " + r
		}
	}
	return resolved, ""
}

// resolveAll resolves paths through their links; a path that does not
// exist (yet) is kept as written, cleaned and made absolute.
func resolveAll(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		out = append(out, filepath.Clean(p))
	}
	return out
}

// within reports whether p is root or lies inside it (both clean and
// absolute).
func within(p, root string) bool {
	if p == root || root == string(filepath.Separator) {
		return true
	}
	return strings.HasPrefix(p, root+string(filepath.Separator))
}

// String summarizes a grant for the log.
func (g Grant) String() string {
	var fns []string
	for f := range g.HostFunctions {
		fns = append(fns, f)
	}
	slices.Sort(fns)
	return fmt.Sprintf("memory=%d pages timeout=%s output=%d instances=%d hosts=%v paths=%v functions=%v",
		g.MemoryPages, g.CallTimeout, g.OutputLimit, g.Instances, g.AllowedHosts, g.Paths, fns)
}
