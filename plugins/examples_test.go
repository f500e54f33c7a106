package plugins_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/plugins"
)

// The non-Go example plugins, loaded from their committed fixtures in
// examples/plugins through the registry, the way the host loads them.
var examplePlugins = []struct {
	dir   string
	abi   string
	tools []string
}{
	{"c-textstats", "looopy", []string{"word_count"}},
	{"rust-hash", "looopy", []string{"hash"}},
	{"as-slugify", "looopy", []string{"case", "slugify"}},
	{"wat-add", "looopy", []string{"add"}},
	{"as-extism-reverse", "extism", []string{"reverse"}},
}

// lockedBuffer collects the registry's log.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// examplesCache is the compilation cache of the package's other tests
// (helpers_test.go), shared across runs as the host's own disk cache is:
// each example compiles once, not in every test and every run.
var examplesCache = filepath.Join(os.TempDir(), "looopy-plugins-test-wasm-cache")

func loadExamples(t *testing.T) (*plugins.Registry, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	r, err := plugins.New(plugins.Config{CacheDir: examplesCache, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	ctx := context.Background()
	for _, ex := range examplePlugins {
		dir := filepath.Join("..", "examples", "plugins", ex.dir)
		info, err := r.Load(ctx, dir)
		if err != nil {
			t.Fatalf("load %s: %v", ex.dir, err)
		}
		wasm, err := os.ReadFile(filepath.Join(dir, ex.dir+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(wasm)
		tools := slices.Sorted(slices.Values(info.Tools))
		if info.Name != ex.dir || info.ABI != ex.abi || info.Kind != "tool" || !slices.Equal(tools, ex.tools) ||
			info.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("load %s: %+v, want abi %s, kind tool, tools %v, sha256 %x", ex.dir, info, ex.abi, ex.tools, sum)
		}
	}
	return r, logs
}

func callExample(t *testing.T, r *plugins.Registry, name, args string) loop.ToolResult {
	t.Helper()
	res, err := r.Call(context.Background(), loop.ToolCall{ID: "call-" + name, Name: name, Arguments: json.RawMessage(args)},
		&loop.ToolEnv{ContextID: "ctx-examples", TaskID: "task-examples"})
	if err != nil {
		t.Fatalf("%s(%s): %v", name, args, err)
	}
	if res.ToolCallID != "call-"+name {
		t.Errorf("%s: result for call %q", name, res.ToolCallID)
	}
	return res
}

// TestExamplePlugins loads every non-Go example through the registry and
// calls each tool through the host's whole tool path (schema check, pool,
// call, result).
func TestExamplePlugins(t *testing.T) {
	r, logs := loadExamples(t)

	defs, err := r.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Description == "" || !json.Valid(d.Parameters) {
			t.Errorf("tool %s: description %q, parameters %s", d.Name, d.Description, d.Parameters)
		}
	}

	abc := sha256.Sum256([]byte("abc"))
	for _, tc := range []struct{ tool, args, want string }{
		{"word_count", `{"text":"two words\nand a line"}`, "words: 5, lines: 2, chars: 20, bytes: 20"},
		{"hash", `{"text":"abc"}`, hex.EncodeToString(abc[:])},
		{"hash", `{"text":"abc","algorithm":"fnv1a64"}`, "e71fa2190541574b"},
		{"slugify", `{"text":"Crème Brûlée, 2 servings!"}`, "creme-brulee-2-servings"},
		{"case", `{"text":"user ID from JSONPayload","style":"camel"}`, "userIdFromJsonPayload"},
		{"add", `{"a":19,"b":23}`, "42"},
		{"reverse", `{"text":"stressed desserts","words":true}`, "desserts stressed"},
		{"reverse", `{"text":"drawer"}`, "reward"},
	} {
		res := callExample(t, r, tc.tool, tc.args)
		if res.IsError || res.Content != tc.want {
			t.Errorf("%s(%s) = %+v, want %q", tc.tool, tc.args, res, tc.want)
		}
	}

	// The host checks arguments against the plugin's schema and does not
	// call the plugin with bad ones.
	for _, tc := range []struct{ tool, args string }{
		{"add", `{"a":"19","b":23}`},
		{"hash", `{"text":"x","algorithm":"md5"}`},
		{"word_count", `{}`},
		{"case", `{"text":"x","style":"sarcastic"}`},
	} {
		res := callExample(t, r, tc.tool, tc.args)
		if !res.IsError || !strings.Contains(res.Content, "invalid arguments") {
			t.Errorf("%s(%s) = %+v, want the host's invalid-arguments result", tc.tool, tc.args, res)
		}
	}

	// The C plugin logs through looopy.log, with the call's context.
	log := logs.String()
	if !strings.Contains(log, `msg="word_count: 5 words in 20 bytes"`) || !strings.Contains(log, "contextId=ctx-examples") {
		t.Errorf("the registry's log lacks the C plugin's line with its context:\n%s", log)
	}
	// The Extism-PDK plugin logs through looopy.log the Extism way.
	if !strings.Contains(log, `msg="reverse: 6 UTF-16 units"`) {
		t.Errorf("the registry's log lacks the Extism plugin's line:\n%s", log)
	}
}

// TestExamplePluginNeedsItsGrant: the C example imports looopy.log; a host
// that does not lend log refuses it, naming the import, and a host that does
// loads it.
func TestExamplePluginNeedsItsGrant(t *testing.T) {
	dir := filepath.Join("..", "examples", "plugins", "c-textstats")
	for _, tc := range []struct {
		lend []string
		ok   bool
	}{{[]string{"kv_get", "kv_set", "result_read"}, false}, {[]string{"log"}, true}} {
		r, err := plugins.New(plugins.Config{CacheDir: examplesCache, Policy: plugins.Policy{HostFunctions: tc.lend}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Load(context.Background(), dir)
		if tc.ok && err != nil {
			t.Errorf("host lends %v: %v", tc.lend, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "looopy.log")) {
			t.Errorf("host lends %v: load error %v, want one naming looopy.log", tc.lend, err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExamplePluginsConcurrent calls every example from several goroutines
// at once: each call must get its own answer.
func TestExamplePluginsConcurrent(t *testing.T) {
	r, _ := loadExamples(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8*40)
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				a, b := g*1000+i, i
				res, err := r.Call(context.Background(), loop.ToolCall{ID: "c", Name: "add", Arguments: json.RawMessage(fmt.Sprintf(`{"a":%d,"b":%d}`, a, b))}, nil)
				if err != nil || res.Content != fmt.Sprint(a+b) {
					errs <- fmt.Errorf("add(%d, %d) = %+v, %v", a, b, res, err)
				}
				word := strings.Repeat("x", g+1) + fmt.Sprint(i)
				res, err = r.Call(context.Background(), loop.ToolCall{ID: "c", Name: "reverse", Arguments: json.RawMessage(`{"text":"` + word + `"}`)}, nil)
				if want := reverse(word); err != nil || res.Content != want {
					errs <- fmt.Errorf("reverse(%s) = %+v, %v; want %s", word, res, err, want)
				}
				res, err = r.Call(context.Background(), loop.ToolCall{ID: "c", Name: "word_count", Arguments: json.RawMessage(`{"text":"` + strings.Repeat("w ", g+i) + `"}`)}, nil)
				if want := fmt.Sprintf("words: %d,", g+i); err != nil || !strings.HasPrefix(res.Content, want) {
					errs <- fmt.Errorf("word_count of %d words = %+v, %v", g+i, res, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func reverse(s string) string {
	r := []rune(s)
	slices.Reverse(r)
	return string(r)
}

// BenchmarkExampleLoad is the host's cold start of each example: a new
// registry loads it (read and check the manifest, compile, instantiate, ask
// describe, compile the tools' schemas), without a compilation cache and with
// a disk cache already filled (a restart of the host).
func BenchmarkExampleLoad(b *testing.B) {
	ctx := context.Background()
	langs := map[string]string{"c-textstats": "c", "rust-hash": "rust", "as-slugify": "assemblyscript", "wat-add": "wat", "as-extism-reverse": "assemblyscript-extism"}
	for _, ex := range examplePlugins {
		dir := filepath.Join("..", "examples", "plugins", ex.dir)
		for _, cached := range []bool{false, true} {
			name := langs[ex.dir] + "/nocache"
			cacheDir := ""
			if cached {
				name = langs[ex.dir] + "/diskcache"
				cacheDir = b.TempDir()
			}
			b.Run(name, func(b *testing.B) {
				load := func() {
					r, err := plugins.New(plugins.Config{CacheDir: cacheDir})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := r.Load(ctx, dir); err != nil {
						b.Fatal(err)
					}
					if err := r.Close(); err != nil {
						b.Fatal(err)
					}
				}
				if cached {
					load() // fill the cache
				}
				for b.Loop() {
					load()
				}
			})
		}
	}
}
