// Package author is the plugin author's kit behind `looopy plugin`: new
// plugins from templates embedded in the binary (Go, C, Rust,
// AssemblyScript, WebAssembly text), a build that writes the module's
// sha256 into its manifest, a test that loads the plugin in the host's
// sandbox and calls every tool, and an install into a watched plugin folder
// that a watcher never sees half-written.
//
// author imports plugins, loop and pdk; never host.
package author

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

// Lang is a language a plugin is written in.
type Lang string

// The languages `looopy plugin new` and `build` know.
const (
	Go             Lang = "go"
	C              Lang = "c"
	Rust           Lang = "rust"
	AssemblyScript Lang = "assemblyscript"
	WAT            Lang = "wat"
)

// Langs lists the languages, in the order the help shows them.
var Langs = []Lang{Go, C, Rust, AssemblyScript, WAT}

// ParseLang reads a language name (a few aliases accepted).
func ParseLang(s string) (Lang, error) {
	switch strings.ToLower(s) {
	case "go", "golang":
		return Go, nil
	case "c":
		return C, nil
	case "rust", "rs":
		return Rust, nil
	case "assemblyscript", "as":
		return AssemblyScript, nil
	case "wat", "wasm-text":
		return WAT, nil
	}
	return "", fmt.Errorf("language %q: want one of go, c, rust, assemblyscript, wat", s)
}

//go:embed templates
var templates embed.FS

// TestFile holds a plugin's own test cases: calls `looopy plugin test`
// makes in the sandbox, each with the text its result must contain.
const TestFile = "plugin.test.json"

// TestCase is one call of TestFile.
type TestCase struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Expect    string          `json:"expect"`            // the result's text contains this
	IsError   bool            `json:"isError,omitempty"` // the result must be a tool error
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// NewOptions tunes New.
type NewOptions struct {
	// LooopySrc is the Looopy checkout a Go plugin is built against (its
	// go.mod's replace). Required for Go.
	LooopySrc string
}

// New writes a new plugin of lang named name into dir (which must not
// exist or be empty). Each template builds with `looopy plugin build` and
// passes `looopy plugin test` as written.
func New(dir string, lang Lang, name string, opts NewOptions) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("plugin name %q: want a lowercase letter, then up to 39 lowercase letters, digits or '-'", name)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s exists and is not empty", dir)
	}
	if lang == Go {
		if opts.LooopySrc == "" {
			return errors.New("a Go plugin needs the Looopy checkout it builds against: run looopy from a checkout's bin/, or pass -looopy-src (or set LOOOPY_SRC)")
		}
		abs, err := filepath.Abs(opts.LooopySrc)
		if err != nil {
			return err
		}
		if !IsLooopySrc(abs) {
			return fmt.Errorf("%s is not a Looopy checkout (no go.mod of github.com/looopy-go/looopy)", abs)
		}
		opts.LooopySrc = abs
	}
	data := templateData(lang, name, opts)
	root := "templates/" + string(lang)
	files := map[string][]byte{}
	err := fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := templates.ReadFile(p)
		if err != nil {
			return err
		}
		t, err := template.New(p).Delims("[[", "]]").Funcs(funcs).Parse(string(b))
		if err != nil {
			return fmt.Errorf("template %s: %w", p, err)
		}
		var out bytes.Buffer
		if err := t.Execute(&out, data); err != nil {
			return fmt.Errorf("template %s: %w", p, err)
		}
		rel := strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".tmpl")
		switch rel {
		case "plugin.c", "plugin.rs", "plugin.wat":
			rel = name + path.Ext(rel)
		}
		files[rel] = out.Bytes()
		return nil
	})
	if err != nil {
		return err
	}
	files["plugin.json"] = manifestTemplate(lang, name)
	files[TestFile] = testTemplate(data)
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// IsLooopySrc reports whether dir is a Looopy checkout.
func IsLooopySrc(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module github.com/looopy-go/looopy\n"))
}

type tmplData struct {
	Name, Tool, Module, LooopySrc, Lang string
	Describe, Result                    string // JSON, without the status byte
	DescribeOut, ResultOut              string // with the status byte (WAT)
	UnsupportedOut                      string
	ResultAt, UnsupportedAt             int
	Greeting                            string
	GoVersion                           string
}

var langTitle = map[Lang]string{Go: "Go", C: "C", Rust: "Rust", AssemblyScript: "AssemblyScript", WAT: "WebAssembly text"}

func templateData(lang Lang, name string, opts NewOptions) tmplData {
	tool := strings.ReplaceAll(name, "-", "_")
	greeting := "Hello from " + name + ", a Looopy plugin in " + langTitle[lang] + "!"
	desc, _ := json.Marshal(map[string]any{
		"name": name, "version": "0.1.0", "kind": "tool",
		"tools": []map[string]any{{
			"name": tool, "description": "Answers a greeting.", "idempotent": true,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false},
		}},
	})
	res, _ := json.Marshal(map[string]any{"content": greeting})
	d := tmplData{Name: name, Tool: tool, Module: "example.com/plugins/" + name, LooopySrc: opts.LooopySrc,
		Lang: string(lang), Describe: string(desc), Result: string(res), Greeting: greeting,
		GoVersion: strings.TrimPrefix(runtime.Version(), "go")}
	d.DescribeOut = "\x00" + d.Describe
	d.ResultOut = "\x00" + d.Result
	d.UnsupportedOut = "\x01" + `{"code":"unsupported","message":"a tool plugin answers describe (0) and tool call (1)"}`
	d.ResultAt = align(16 + len(d.DescribeOut))
	d.UnsupportedAt = align(d.ResultAt + len(d.ResultOut))
	return d
}

func align(n int) int { return (n + 15) &^ 15 }

var funcs = template.FuncMap{
	"cquote":   strconv.Quote, // a Go quoted string is a valid C string literal for ASCII text
	"watquote": watQuote,
	"len":      func(s string) int { return len(s) },
}

// watQuote writes a WAT string literal: printable ASCII as it is, the rest
// as \hh escapes.
func watQuote(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			fmt.Fprintf(&sb, "\\%02x", c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

func manifestTemplate(lang Lang, name string) []byte {
	pages := 16
	if lang == Go {
		pages = 256 // a Go guest needs at least 44
	}
	m := fmt.Sprintf(`{
  "name": %q,
  "version": "0.1.0",
  "kind": "tool",
  "wasm": %q,
  "sha256": "",
  "description": "A Looopy tool plugin in %s.",
  "capabilities": {
    "memoryPages": %d,
    "callTimeout": "5s"
  }
}
`, name, name+".wasm", langTitle[lang], pages)
	return []byte(m)
}

func testTemplate(d tmplData) []byte {
	cases := []TestCase{{Tool: d.Tool, Arguments: json.RawMessage(`{}`), Expect: d.Greeting}}
	if d.Lang == string(Go) {
		cases = []TestCase{
			{Tool: d.Tool, Arguments: json.RawMessage(`{"name":"Ada"}`), Expect: "Hello, Ada!"},
			{Tool: d.Tool, Arguments: json.RawMessage(`{"name":""}`), Expect: "name is empty", IsError: true},
		}
	}
	b, _ := json.MarshalIndent(cases, "", "  ")
	return append(b, '\n')
}

// Detect tells a plugin folder's language from its files.
func Detect(dir string) (Lang, error) {
	has := func(pattern string) bool {
		m, _ := filepath.Glob(filepath.Join(dir, pattern))
		return len(m) > 0
	}
	switch {
	case has("go.mod"):
		return Go, nil
	case has("package.json") && has("assembly/*.ts"):
		return AssemblyScript, nil
	case has("*.rs"):
		return Rust, nil
	case has("*.c"):
		return C, nil
	case has("*.wat"):
		return WAT, nil
	}
	return "", fmt.Errorf("%s: no go.mod, *.rs, *.c, *.wat or AssemblyScript package.json: not a plugin folder looopy knows how to build", dir)
}

// sources lists the files of dir matching pattern, sorted.
func sources(dir, pattern string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	sort.Strings(m)
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}
