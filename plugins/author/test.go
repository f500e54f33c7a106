package author

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/plugins"
)

// TestOptions tunes Test.
type TestOptions struct {
	// Policy is what the operator allows (default: the host's defaults:
	// no host, no secret, no folder but the plugin folder, default limits).
	Policy *plugins.Policy
	// CacheDir is wazero's compilation cache ("" : in memory).
	CacheDir string
}

// Test loads the built plugin in dir in the host's sandbox, as a host would
// (same checks, same grants), prints the grants it gets, calls describe and
// each tool with arguments made from its schema, then runs the cases of
// plugin.test.json. It fails when the plugin does not load, a call cannot
// be made (a trap, a timeout), or a test case does not hold; a tool error
// answered to made-up arguments is reported, not failed.
func Test(ctx context.Context, dir string, out io.Writer, opts TestOptions) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	policy := DefaultTestPolicy(dir)
	if opts.Policy != nil {
		policy = *opts.Policy
	}
	reg, err := plugins.New(plugins.Config{Policy: policy, CacheDir: opts.CacheDir})
	if err != nil {
		return err
	}
	defer reg.Close()
	info, err := reg.Load(ctx, dir)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	p, ok := reg.Plugin(info.Name)
	if !ok {
		return errors.New("load: the plugin is not serving")
	}
	fmt.Fprintf(out, "loaded %s %s (%s plugin, %s ABI), sha256 %s\n", info.Name, info.Version, info.Kind, info.ABI, info.SHA256)
	printGrant(out, p.Grant())
	if p.Kind() == "model" {
		fmt.Fprintln(out, "a model plugin: describe answered; no tool to call")
		return nil
	}
	var failures []string
	for _, def := range p.Tools() {
		args, err := SampleArguments(def.Parameters)
		if err != nil {
			failures = append(failures, fmt.Sprintf("tool %s: schema: %v", def.Name, err))
			continue
		}
		fmt.Fprintf(out, "tool %s: %s\n  call with %s\n", def.Name, oneLine(def.Description), args)
		res, err := call(ctx, reg, def.Name, args, out)
		switch {
		case err != nil:
			failures = append(failures, fmt.Sprintf("tool %s: the call failed: %v", def.Name, err))
			fmt.Fprintf(out, "  FAILED: %v\n", err)
		case res.IsError:
			fmt.Fprintf(out, "  tool error (to made-up arguments): %s\n", clip(res.Content))
		default:
			fmt.Fprintf(out, "  ok: %s\n", clip(res.Content))
		}
	}
	cases, err := readCases(dir)
	if err != nil {
		return err
	}
	for i, c := range cases {
		res, err := call(ctx, reg, c.Tool, c.Arguments, out)
		name := fmt.Sprintf("%s case %d (%s %s)", TestFile, i+1, c.Tool, oneLine(string(c.Arguments)))
		switch {
		case err != nil:
			failures = append(failures, fmt.Sprintf("%s: %v", name, err))
		case res.IsError != c.IsError:
			failures = append(failures, fmt.Sprintf("%s: isError %t, want %t (%s)", name, res.IsError, c.IsError, clip(res.Content)))
		case !strings.Contains(res.Content, c.Expect):
			failures = append(failures, fmt.Sprintf("%s: %q does not contain %q", name, clip(res.Content), c.Expect))
		default:
			fmt.Fprintf(out, "ok   %s\n", name)
			continue
		}
		fmt.Fprintf(out, "FAIL %s\n", name)
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d failed:\n  %s", len(failures), strings.Join(failures, "\n  "))
	}
	fmt.Fprintf(out, "PASS: %d tools, %d test cases\n", len(p.Tools()), len(cases))
	return nil
}

// DefaultTestPolicy is the policy Test uses for the plugin in dir (an
// absolute path) when TestOptions.Policy is nil: the host's defaults, with
// the folder holding the plugin's as the only path root.
func DefaultTestPolicy(dir string) plugins.Policy {
	return plugins.Policy{PathRoots: []string{filepath.Dir(dir)}}
}

func call(ctx context.Context, reg *plugins.Registry, tool string, args json.RawMessage, out io.Writer) (loop.ToolResult, error) {
	env := &loop.ToolEnv{ContextID: "plugin-test", TaskID: "plugin-test", CallID: "call-1", Auth: &loop.AuthContext{Principal: "plugin-test"},
		Emit: func(e loop.Event) {
			if p, ok := e.(*loop.ToolProgress); ok {
				fmt.Fprintf(out, "  progress %.0f%% %s\n", p.Progress*100, p.Message)
			}
		}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // the plugin's own callTimeout applies within
	defer cancel()
	return reg.Call(ctx, loop.ToolCall{ID: "call-1", Name: tool, Arguments: args}, env)
}

func readCases(dir string) ([]TestCase, error) {
	b, err := os.ReadFile(filepath.Join(dir, TestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cases []TestCase
	if err := json.Unmarshal(b, &cases); err != nil {
		return nil, fmt.Errorf("%s: %w", TestFile, err)
	}
	return cases, nil
}

func printGrant(out io.Writer, g plugins.Grant) {
	fmt.Fprintln(out, "grant (under the host's default policy):")
	fmt.Fprintf(out, "  memory %d pages (%d KiB), call timeout %s, output %d bytes, %d instances\n",
		g.MemoryPages, g.MemoryPages*64, g.CallTimeout, g.OutputLimit, g.Instances)
	var fns []string
	for f := range g.HostFunctions {
		fns = append(fns, f)
	}
	slices.Sort(fns)
	fmt.Fprintf(out, "  host functions: %s\n", listOr(fns))
	fmt.Fprintf(out, "  hosts: %s\n", listOr(g.AllowedHosts))
	var paths []string
	for _, p := range g.Paths {
		mode := "read-write"
		if p.ReadOnly {
			mode = "read-only"
		}
		paths = append(paths, p.Path+" ("+mode+")")
	}
	fmt.Fprintf(out, "  folders: %s\n", listOr(paths))
	var secrets []string
	for s := range g.Secrets {
		secrets = append(secrets, s)
	}
	slices.Sort(secrets)
	fmt.Fprintf(out, "  secrets: %s\n", listOr(secrets))
	for _, r := range g.Refused {
		fmt.Fprintf(out, "  not granted: %s\n", r)
	}
}

func listOr(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func clip(s string) string {
	s = oneLine(s)
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// SampleArguments makes an arguments object that a JSON Schema accepts in
// the common cases: each property gets its default, its first example or
// enum value, or a plain value of its type (within minimum/maximum and
// minLength).
func SampleArguments(schema json.RawMessage) (json.RawMessage, error) {
	var s map[string]any
	if len(schema) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, err
	}
	v := sample(s, 0)
	if _, ok := v.(map[string]any); !ok {
		v = map[string]any{}
	}
	return json.Marshal(v)
}

func sample(s map[string]any, depth int) any {
	if d, ok := s["default"]; ok {
		return d
	}
	if ex, ok := s["examples"].([]any); ok && len(ex) > 0 {
		return ex[0]
	}
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			if m, ok := alts[0].(map[string]any); ok {
				return sample(m, depth+1)
			}
		}
	}
	typ, _ := s["type"].(string)
	if ts, ok := s["type"].([]any); ok && len(ts) > 0 {
		typ, _ = ts[0].(string)
	}
	num := func(def float64) float64 {
		if m, ok := s["minimum"].(float64); ok && def < m {
			def = m
		}
		if m, ok := s["maximum"].(float64); ok && def > m {
			def = m
		}
		return def
	}
	switch typ {
	case "string":
		v := "example"
		if n, ok := s["minLength"].(float64); ok && int(n) > len(v) {
			v = strings.Repeat("x", int(n))
		}
		return v
	case "integer":
		return int64(num(1))
	case "number":
		return num(1.5)
	case "boolean":
		return true
	case "null":
		return nil
	case "array":
		if depth > 5 {
			return []any{}
		}
		items, _ := s["items"].(map[string]any)
		if items == nil {
			return []any{}
		}
		return []any{sample(items, depth+1)}
	}
	obj := map[string]any{}
	if depth > 5 {
		return obj
	}
	props, _ := s["properties"].(map[string]any)
	for name, p := range props {
		if m, ok := p.(map[string]any); ok {
			obj[name] = sample(m, depth+1)
		}
	}
	return obj
}
