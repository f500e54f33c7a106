package abitest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/looopy-go/looopy/pdk"
)

// TestManifestsMatchModules checks each manifest against its module: the
// digest, the name of the .wasm, the exports of its ABI, and that every
// import is a host function the manifest asks for.
func TestManifestsMatchModules(t *testing.T) {
	ctx := context.Background()
	for _, f := range fixtures {
		t.Run(f.dir, func(t *testing.T) {
			m, wasm := load(t, f)
			if m.Name != f.dir || m.Wasm != f.dir+".wasm" || m.Kind != string(pdk.KindTool) || m.Version == "" {
				t.Fatalf("manifest %+v: want name %s, wasm %s.wasm, kind tool and a version", m, f.dir, f.dir)
			}
			rt := wazero.NewRuntime(ctx)
			defer rt.Close(ctx)
			cm, err := rt.CompileModule(ctx, wasm)
			if err != nil {
				t.Fatal(err)
			}
			exports := cm.ExportedFunctions()
			for _, imp := range cm.ImportedFunctions() {
				mod, name, _ := imp.Import()
				switch {
				case f.abi == "extism" && mod == "extism:host/env":
				case mod == pdk.HostModule && slices.Contains(m.Capabilities.HostFunctions, name):
				default:
					t.Errorf("imports %s.%s, which the manifest does not ask for", mod, name)
				}
			}
			if len(cm.ImportedMemories()) != 0 {
				t.Errorf("imports a memory")
			}
			if len(cm.ExportedMemories()) != 1 {
				t.Errorf("exports %d memories, want 1", len(cm.ExportedMemories()))
			}
			i32, i64 := api.ValueTypeI32, api.ValueTypeI64
			want := map[string][2][]api.ValueType{
				pdk.ExportABIMarker: {nil, nil},
				pdk.ExportAlloc:     {{i32}, {i32}},
				pdk.ExportCall:      {{i32, i32, i32}, {i64}},
			}
			if f.abi == "extism" {
				want = map[string][2][]api.ValueType{"describe": {nil, {i32}}, "call_tool": {nil, {i32}}}
				for _, other := range []string{"generate", "run"} {
					if _, ok := exports[other]; ok {
						t.Errorf("a tool plugin exports %s", other)
					}
				}
			}
			for name, sig := range want {
				fn, ok := exports[name]
				if !ok {
					t.Errorf("does not export %s", name)
					continue
				}
				if !slices.Equal(fn.ParamTypes(), sig[0]) || !slices.Equal(fn.ResultTypes(), sig[1]) {
					t.Errorf("%s: params %v results %v, want %v %v", name, fn.ParamTypes(), fn.ResultTypes(), sig[0], sig[1])
				}
			}
		})
	}
}

// TestDescribe checks each plugin's describe answer: the manifest's name and
// version, kind tool, and tools whose parameters compile as JSON Schema.
func TestDescribe(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.dir, func(t *testing.T) {
			p, m, _ := start(t, f)
			status, out, err := p.invoke(context.Background(), pdk.OpDescribe, []byte("{}"))
			if err != nil || status != pdk.StatusOK {
				t.Fatalf("describe: status %d, %s, %v", status, out, err)
			}
			var d pdk.Describe
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&d); err != nil {
				t.Fatalf("describe %s: %v", out, err)
			}
			if d.Name != m.Name || d.Version != m.Version || d.Kind != pdk.KindTool || len(d.Tools) == 0 {
				t.Fatalf("describe %+v: want name %s, version %s, kind tool, tools", d, m.Name, m.Version)
			}
			for _, tool := range d.Tools {
				if tool.Name == "" || tool.Description == "" {
					t.Errorf("tool %+v: want a name and a description", tool)
				}
				s := compileSchema(t, tool.Parameters)
				if err := s.Validate(map[string]any{"unexpected": true}); err == nil {
					t.Errorf("tool %s: schema accepts an unknown argument", tool.Name)
				}
			}
		})
	}
}

func compileSchema(t *testing.T, raw json.RawMessage) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parameters %s: %v", raw, err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://parameters.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem://parameters.json")
	if err != nil {
		t.Fatalf("parameters %s: %v", raw, err)
	}
	return s
}

// TestErrors checks the error paths every Looopy-ABI plugin shares: an
// operation a tool plugin does not answer, an unknown tool, a request that is
// not JSON; and that the instance keeps serving after each.
func TestErrors(t *testing.T) {
	tools := map[string]string{"c-textstats": "word_count", "rust-hash": "hash", "as-slugify": "slugify", "wat-add": "add", "as-extism-reverse": "reverse"}
	for _, f := range fixtures {
		t.Run(f.dir, func(t *testing.T) {
			p, _, _ := start(t, f)
			if f.abi == "looopy" {
				// An Extism-ABI plugin answers these by not exporting
				// generate or run (TestManifestsMatchModules).
				callError(t, p, pdk.OpGenerate, []byte("{}"), pdk.CodeUnsupported)
				callError(t, p, pdk.OpRun, []byte("{}"), pdk.CodeUnsupported)
			}
			callError(t, p, pdk.OpToolCall, request("no_such_tool", `{}`), pdk.CodeUnknownTool)
			truncated := []byte(`{"call":{"id":"1","name":"` + tools[f.dir] + `","arguments":{"text":"never ends`)
			callError(t, p, pdk.OpToolCall, truncated, pdk.CodeBadInput)
			if status, out, err := p.invoke(context.Background(), pdk.OpDescribe, []byte("{}")); err != nil || status != pdk.StatusOK {
				t.Fatalf("describe after the errors: status %d, %s, %v", status, out, err)
			}
		})
	}
}

func TestCWordCount(t *testing.T) {
	p, _, logs := start(t, fixtureNamed(t, "c-textstats"))
	type counts struct{ Words, Lines, Chars, Bytes int }
	for _, tc := range []struct {
		text string
		want counts
	}{
		{"", counts{0, 0, 0, 0}},
		{"one", counts{1, 1, 3, 3}},
		{"Hello wörld\nsecond  line here\n", counts{5, 2, 30, 31}},
		{"  tabs\tand\r\nCRLF\n\nlast", counts{4, 4, 22, 22}},
		{"emoji 😀 and \"quotes\" \\ slash", counts{6, 1, 28, 31}},
		{"\x01control\x1f", counts{1, 1, 9, 9}},
		{strings.Repeat("word ", 10000), counts{10000, 1, 50000, 50000}},
		{strings.Repeat("a line of text\n", 60000), counts{240000, 60000, 900000, 900000}}, // fits the manifest's 4 MiB
	} {
		args, _ := json.Marshal(map[string]string{"text": tc.text})
		r := callTool(t, p, "word_count", string(args))
		var got counts
		if err := json.Unmarshal(r.Data, &got); err != nil || r.IsError {
			t.Fatalf("word_count(%.40q): %+v: %v", tc.text, r, err)
		}
		if got != tc.want {
			t.Errorf("word_count(%.40q) = %+v, want %+v", tc.text, got, tc.want)
		}
		wantContent := fmt.Sprintf("words: %d, lines: %d, chars: %d, bytes: %d", tc.want.Words, tc.want.Lines, tc.want.Chars, tc.want.Bytes)
		if r.Content != wantContent {
			t.Errorf("word_count(%.40q) content %q, want %q", tc.text, r.Content, wantContent)
		}
	}
	// \u escapes, surrogate pairs included, decode to one code point each.
	r := callTool(t, p, "word_count", `{"text":"caf\u00e9 \ud83d\ude00 \u4e2d"}`)
	if r.Content != "words: 3, lines: 1, chars: 8, bytes: 14" {
		t.Errorf("escaped text: %q", r.Content)
	}
	if r := callTool(t, p, "word_count", `{}`); !r.IsError || !strings.Contains(r.Content, "text") {
		t.Errorf("missing text: %+v, want an error result naming text", r)
	}
	if r := callTool(t, p, "word_count", `{"text":42}`); !r.IsError {
		t.Errorf("text 42: %+v, want an error result", r)
	}
	lines := logs.all()
	if len(lines) == 0 {
		t.Fatal("the plugin logged nothing through looopy.log")
	}
	if l := lines[2]; l.level != int32(pdk.LevelInfo) || l.text != "word_count: 5 words in 31 bytes" {
		t.Errorf("third log line %+v, want info %q", l, "word_count: 5 words in 31 bytes")
	}
}

func TestRustHash(t *testing.T) {
	p, _, _ := start(t, fixtureNamed(t, "rust-hash"))
	texts := []string{
		"", "abc", "héllo wörld 😀", "\x00\x01 control \"quoted\" \\",
		strings.Repeat("a", 55), strings.Repeat("b", 56), strings.Repeat("c", 64), strings.Repeat("xyz", 5000),
		strings.Repeat("0123456789abcdef", 40000), // 640 KB: fits the manifest's 4 MiB
	}
	for _, text := range texts {
		sum := sha256.Sum256([]byte(text))
		args, _ := json.Marshal(map[string]string{"text": text})
		if r := callTool(t, p, "hash", string(args)); r.IsError || r.Content != hex.EncodeToString(sum[:]) {
			t.Errorf("sha256(%.20q) = %+v, want %x", text, r, sum)
		}
		args, _ = json.Marshal(map[string]string{"text": text, "algorithm": "sha256"})
		if r := callTool(t, p, "hash", string(args)); r.Content != hex.EncodeToString(sum[:]) {
			t.Errorf("sha256(%.20q) with the algorithm named = %+v", text, r)
		}
		h := fnv.New64a()
		h.Write([]byte(text))
		args, _ = json.Marshal(map[string]string{"text": text, "algorithm": "fnv1a64"})
		if r, want := callTool(t, p, "hash", string(args)), fmt.Sprintf("%016x", h.Sum64()); r.IsError || r.Content != want {
			t.Errorf("fnv1a64(%.20q) = %+v, want %s", text, r, want)
		}
	}
	// The well-known digest of "abc", and \u escapes decoded before hashing.
	if r := callTool(t, p, "hash", `{"text":"abc"}`); r.Content != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("sha256(abc) = %q", r.Content)
	}
	sum := sha256.Sum256([]byte("é😀"))
	if r := callTool(t, p, "hash", `{"text":"\u00e9\ud83d\ude00"}`); r.Content != hex.EncodeToString(sum[:]) {
		t.Errorf("escaped text: %q, want %x", r.Content, sum)
	}
	if r := callTool(t, p, "hash", `{"text":"x","algorithm":"md5"}`); !r.IsError || !strings.Contains(r.Content, "md5") {
		t.Errorf("md5: %+v, want an error result naming md5", r)
	}
	if r := callTool(t, p, "hash", `{"text":["x"]}`); !r.IsError {
		t.Errorf("text array: %+v, want an error result", r)
	}
}

func TestASSlugifyAndCase(t *testing.T) {
	p, _, _ := start(t, fixtureNamed(t, "as-slugify"))
	for _, tc := range []struct{ args, want string }{
		{`{"text":"Hello, World!"}`, "hello-world"},
		{`{"text":"  Héllo Wörld: Ça va? Œuvre façade  "}`, "hello-world-ca-va-oeuvre-facade"},
		{`{"text":"Straße & Þór"}`, "strasse-thor"},
		{`{"text":"parseHTTPResponse v2"}`, "parse-http-response-v2"},
		{`{"text":"Hello World","separator":"_"}`, "hello_world"},
		{`{"text":"one two three four","maxLength":13}`, "one-two-three"},
		{`{"text":"one two three four","maxLength":12}`, "one-two"},
		{`{"text":"supercalifragilistic","maxLength":5}`, "super"},
		{`{"text":"日本語 only 😀"}`, "only"},
		{`{"text":"caf\u00e9 \ud83d\ude00 au lait"}`, "cafe-au-lait"},
	} {
		if r := callTool(t, p, "slugify", tc.args); r.IsError || r.Content != tc.want {
			t.Errorf("slugify(%s) = %+v, want %q", tc.args, r, tc.want)
		}
	}
	text := "parse HTTPResponse code_v2"
	for style, want := range map[string]string{
		"snake":    "parse_http_response_code_v2",
		"kebab":    "parse-http-response-code-v2",
		"camel":    "parseHttpResponseCodeV2",
		"pascal":   "ParseHttpResponseCodeV2",
		"constant": "PARSE_HTTP_RESPONSE_CODE_V2",
		"title":    "Parse Http Response Code V2",
		"lower":    "parse http response code v2",
		"upper":    "PARSE HTTP RESPONSE CODE V2",
	} {
		args, _ := json.Marshal(map[string]string{"text": text, "style": style})
		if r := callTool(t, p, "case", string(args)); r.IsError || r.Content != want {
			t.Errorf("case(%q, %s) = %+v, want %q", text, style, r, want)
		}
	}
	if r := callTool(t, p, "case", `{"text":"x","style":"sarcastic"}`); !r.IsError || !strings.Contains(r.Content, "sarcastic") {
		t.Errorf("unknown style: %+v, want an error result naming it", r)
	}
	if r := callTool(t, p, "slugify", `{"text":"x","maxLength":-1}`); !r.IsError {
		t.Errorf("maxLength -1: %+v, want an error result", r)
	}
	if r := callTool(t, p, "slugify", `{"text":"x","maxLength":1.5}`); !r.IsError {
		t.Errorf("maxLength 1.5: %+v, want an error result", r)
	}
}

func TestWATAdd(t *testing.T) {
	p, _, _ := start(t, fixtureNamed(t, "wat-add"))
	for _, tc := range []struct {
		args string
		sum  int64
	}{
		{`{"a":2,"b":40}`, 42},
		{`{"b":40,"a":2}`, 42},
		{`{ "a" : -7 , "b" : 3 }`, -4},
		{`{"a":0,"b":0}`, 0},
		{`{"a":-999999999999999,"b":-999999999999999}`, -1999999999999998},
		{`{"a":123456789012345,"b":1}`, 123456789012346},
	} {
		r := callTool(t, p, "add", tc.args)
		var data struct{ Sum int64 }
		if err := json.Unmarshal(r.Data, &data); err != nil || r.IsError {
			t.Fatalf("add(%s): %+v: %v", tc.args, r, err)
		}
		if want := fmt.Sprint(tc.sum); r.Content != want || data.Sum != tc.sum {
			t.Errorf("add(%s) = %+v, want %s", tc.args, r, want)
		}
	}
	for _, args := range []string{`{"a":1}`, `{"a":1.5,"b":2}`, `{"a":1,"b":2e3}`, `{"a":"1","b":2}`, `{"a":1234567890123456,"b":1}`} {
		if r := callTool(t, p, "add", args); !r.IsError {
			t.Errorf("add(%s) = %+v, want an error result", args, r)
		}
	}
	// A member named "a" inside a string value is not an argument.
	r := callTool(t, p, "add", `{"a":1,"b":2}`)
	req := []byte(`{"call":{"id":"x","name":"add","arguments":{"a":1,"b":2}},"contextId":"\"a\":100"}`)
	status, out, err := p.invoke(context.Background(), pdk.OpToolCall, req)
	if err != nil || status != pdk.StatusOK || !bytes.Contains(out, []byte(`"content":"3"`)) || r.Content != "3" {
		t.Errorf("a quoted key in a string value: status %d, %s, %v", status, out, err)
	}
}

func TestASExtismReverse(t *testing.T) {
	p, _, logs := start(t, fixtureNamed(t, "as-extism-reverse"))
	for _, tc := range []struct{ args, want string }{
		{`{"text":"hello"}`, "olleh"},
		{`{"text":"héllo 😀!"}`, "!😀 olléh"},
		{`{"text":""}`, ""},
		{`{"text":"one  two\tthree","words":true}`, "three two one"},
		{`{"text":"quote \" and \\ back","words":false}`, `kcab \ dna " etouq`},
	} {
		if r := callTool(t, p, "reverse", tc.args); r.IsError || r.Content != tc.want {
			t.Errorf("reverse(%s) = %+v, want %q", tc.args, r, tc.want)
		}
	}
	if r := callTool(t, p, "reverse", `{"text":"x","words":"yes"}`); !r.IsError {
		t.Errorf("words \"yes\": %+v, want an error result", r)
	}
	// looopy.log through Extism's host-function mechanism.
	lines := logs.all()
	if len(lines) != 5 || lines[1].level != int32(pdk.LevelInfo) || lines[1].text != "reverse: 9 UTF-16 units" ||
		lines[3].text != "reverse: 14 UTF-16 units, by words" {
		t.Errorf("log lines %+v, want one per call, the second info %q", lines, "reverse: 9 UTF-16 units")
	}
}

// TestMemoryDoesNotGrow makes thousands of calls with large inputs on one
// instance: a guest that leaked its inputs or outputs would grow its memory
// by hundreds of pages.
func TestMemoryDoesNotGrow(t *testing.T) {
	text := strings.Repeat("Lorem ipsum dolor sit amet, ", 80) // 2.2 KB: a leak of it per call is 16 pages over 500 calls
	calls := map[string][2]string{
		"c-textstats":       {"word_count", `{"text":"` + text + `"}`},
		"rust-hash":         {"hash", `{"text":"` + text + `"}`},
		"as-slugify":        {"slugify", `{"text":"` + text + `"}`},
		"wat-add":           {"add", `{"a":1,"b":2,"pad":"` + text + `"}`},
		"as-extism-reverse": {"reverse", `{"text":"` + text + `"}`},
	}
	for _, f := range fixtures {
		t.Run(f.dir, func(t *testing.T) {
			p, _, _ := start(t, f)
			c := calls[f.dir]
			var settled uint32
			for i := range 600 {
				if r := callTool(t, p, c[0], c[1]); r.IsError {
					t.Fatalf("call %d: %+v", i, r)
				}
				if i == 99 {
					settled = p.pages()
				}
			}
			if got := p.pages(); got > settled+2 {
				t.Errorf("memory grew from %d pages after 100 calls to %d after 600", settled, got)
			}
			t.Logf("%s: %d pages after 600 calls of %d bytes", f.dir, p.pages(), len(c[1]))
		})
	}
}
