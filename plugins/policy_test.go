package plugins

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func manifestFor(t *testing.T, caps string, rest string) *Manifest {
	t.Helper()
	m, err := ParseManifest([]byte(`{"name":"p","version":"1","kind":"tool","wasm":"p.wasm","sha256":"` +
		strings.Repeat("a", 64) + `","capabilities":` + caps + rest + `}`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGrantIsRequestedIntersectAllowed(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, d := range []string{"in", "out"} {
		if err := os.MkdirAll(filepath.Join(data, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := manifestFor(t, `{
		"allowedHosts": ["api.example.com", "x.other.org", "*.example.com", "10.0.0.1:8080"],
		"allowPrivateNetwork": true,
		"allowedPaths": [{"path": "`+data+`/in", "readOnly": true}, {"path": "`+data+`/out"}, {"path": "/etc"}, {"path": "`+data+`/../etc"}],
		"memoryPages": 4096, "callTimeout": "2m", "outputLimit": 100, "instances": 64,
		"hostFunctions": ["log", "kv_get", "http_request"]}`,
		`,"secrets":{"key":"API_KEY","other":"OTHER"}`)
	p := Policy{
		AllowedHosts:   []string{"*.example.com", "10.0.0.1"},
		PathRoots:      []string{data},
		Secrets:        []string{"API_KEY"},
		HostFunctions:  []string{"log", "kv_get"},
		MaxMemoryPages: 1024,
		MaxCallTimeout: time.Minute,
		MaxInstances:   8,
	}
	env := map[string]string{"API_KEY": "k", "OTHER": "o"}
	g := p.Grant(m, func(k string) (string, bool) { v, ok := env[k]; return v, ok })

	if want := []string{"api.example.com", "*.example.com", "10.0.0.1:8080"}; !slices.Equal(g.AllowedHosts, want) {
		t.Errorf("hosts = %v, want %v", g.AllowedHosts, want)
	}
	if g.AllowPrivate {
		t.Error("private network granted without the policy")
	}
	if want := []PathGrant{{data + "/in", true, data + "/in"}, {data + "/out", false, data + "/out"}}; !slices.Equal(g.Paths, want) {
		t.Errorf("paths = %v, want %v", g.Paths, want)
	}
	if g.MemoryPages != 1024 || g.CallTimeout != time.Minute || g.OutputLimit != 100 || g.Instances != 8 {
		t.Errorf("limits = %d %s %d %d", g.MemoryPages, g.CallTimeout, g.OutputLimit, g.Instances)
	}
	if !g.HostFunctions["log"] || !g.HostFunctions["kv_get"] || !g.HostFunctions["result_read"] || g.HostFunctions["http_request"] {
		t.Errorf("functions = %v", g.HostFunctions)
	}
	if len(g.Secrets) != 1 || g.Secrets["key"] != "k" {
		t.Errorf("secrets = %v", g.Secrets)
	}
	refused := strings.Join(g.Refused, ",")
	for _, w := range []string{"host x.other.org", "private network", "path /etc (outside", "path " + filepath.Dir(data) + "/etc (does not resolve", "host function http_request", "secret other",
		"callTimeout 2m0s capped at 1m0s", "memoryPages 4096 capped at 1024", "instances 64 capped at 8"} {
		if !strings.Contains(refused, w) {
			t.Errorf("refused %q lacks %q", refused, w)
		}
	}
}

func TestGrantDefaults(t *testing.T) {
	g := Policy{}.Grant(manifestFor(t, `{"allowedHosts":["a.com"],"allowedPaths":[{"path":"/tmp"}]}`, ""), nil)
	if g.MemoryPages != DefaultMemoryPages || g.CallTimeout != DefaultCallTimeout || g.OutputLimit != DefaultOutputLimit || g.Instances != DefaultInstances {
		t.Errorf("defaults = %+v", g)
	}
	if len(g.AllowedHosts) != 0 || len(g.Paths) != 0 || len(g.HostFunctions) != 0 {
		t.Errorf("the zero policy granted %+v", g)
	}
	g = Policy{AllowedHosts: []string{"*"}}.Grant(manifestFor(t, `{"allowedHosts":["a.com","127.0.0.1"],"callTimeout":"1500ms"}`, ""), nil)
	if !slices.Equal(g.AllowedHosts, []string{"a.com"}) || g.CallTimeout != 1500*time.Millisecond {
		t.Errorf("star policy: %v %s", g.AllowedHosts, g.CallTimeout)
	}
}

func TestManifestErrors(t *testing.T) {
	cases := map[string]string{
		`{"name":"bad name!","version":"1","kind":"tool","wasm":"p.wasm","sha256":"` + strings.Repeat("a", 64) + `","capabilities":{}}`:                        "name",
		`{"name":"p","version":"1","kind":"robot","wasm":"p.wasm","sha256":"` + strings.Repeat("a", 64) + `","capabilities":{}}`:                               `kind "robot"`,
		`{"name":"p","version":"1","kind":"tool","wasm":"../p.wasm","sha256":"` + strings.Repeat("a", 64) + `","capabilities":{}}`:                             "wasm",
		`{"name":"p","version":"1","kind":"tool","wasm":"p.wasm","sha256":"xyz","capabilities":{}}`:                                                            "sha256",
		`{"name":"p","kind":"tool","wasm":"p.wasm","sha256":"` + strings.Repeat("a", 64) + `","capabilities":{}}`:                                              "version is missing",
		`{"name":"p","version":"1","kind":"tool","wasm":"p.wasm","sha256":"` + strings.Repeat("a", 64) + `","capabilities":{"allowedPaths":[{"path":"rel"}]}}`: "not an absolute path",
		`{"name":"p","version":"1","kind":"tool","wasm":"p.wasm","sha256":"` + strings.Repeat("a", 64) + `","capabilities":{"callTimeout":"soon"}}`:            "duration",
		`{"name":"p","version":"1","kind":"tool","wasm":"p.wasm","sha256":"` + strings.Repeat("a", 64) + `","capabilities":{}} {}`:                             "data after",
	}
	for in, want := range cases {
		if _, err := ParseManifest([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseManifest(%s) = %v; want an error about %q", in, err, want)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"name":"p","version":"1","kind":"tool","wasm":"p.wasm","sha256":"` + strings.Repeat("a", 64) + `","capabilities":{"callTimeout":"1s","allowedHosts":["*.a.com"]}}`))
	f.Add([]byte(`{"capabilities":{"callTimeout":12}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err == nil {
			_ = Policy{AllowedHosts: []string{"*"}}.Grant(m, nil)
		}
	})
}
