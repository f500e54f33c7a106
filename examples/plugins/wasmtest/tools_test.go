package wasmtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/pdk"
	"github.com/looopy-go/looopy/plugins"
)

func TestWasmCalculatorAndEcho(t *testing.T) {
	r := registry(t, plugins.Config{}, "calculator", "echo")
	defs, err := r.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]loop.ToolDefinition{}
	for _, d := range defs {
		byName[d.Name] = d
	}
	calc, ok := byName["calc"]
	if !ok || !calc.Idempotent || !strings.Contains(string(calc.Parameters), `"required":["expression"]`) {
		t.Errorf("calc definition %+v (%s)", calc, calc.Parameters)
	}
	if res := call(t, r, nil, "1", "calc", `{"expression":"2^10 - (3 % 2)"}`); res.Content != "1023" || res.IsError {
		t.Errorf("calc: %+v", res)
	}
	if res := call(t, r, nil, "2", "calc", `{"expression":"4 / (2 - 2)"}`); !res.IsError || !strings.Contains(res.Content, "division by zero") {
		t.Errorf("calc by zero: %+v", res)
	}
	if res := call(t, r, nil, "3", "calc", `{"expr":"1"}`); !res.IsError || !strings.Contains(res.Content, "invalid arguments") {
		t.Errorf("calc with a wrong argument: %+v", res)
	}
	args := `{"text":"hi","n":[1,2,{"x":null}]}`
	if res := call(t, r, nil, "4", "echo", args); res.Content != args || string(res.Data) != args || res.ToolCallID != "4" {
		t.Errorf("echo: %+v", res)
	}
}

func TestWasmFileReaderStaysInItsFolder(t *testing.T) {
	dir := t.TempDir()
	granted := filepath.Join(dir, "granted")
	if err := os.MkdirAll(filepath.Join(granted, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(granted, "a.txt"), []byte("inside"), 0o644)
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("outside"), 0o644)
	if err := os.Symlink(filepath.Join(dir, "secret.txt"), filepath.Join(granted, "link")); err != nil {
		t.Fatal(err)
	}
	p := install(t, dir, "file-reader", func(man map[string]any) {
		capabilities(man)["allowedPaths"] = []any{map[string]any{"path": granted, "readOnly": true}}
		man["config"] = map[string]any{"root": granted}
	})
	r := load(t, plugins.Config{Policy: plugins.Policy{PathRoots: []string{dir}}}, p)
	if res := call(t, r, nil, "1", "read_file", `{"path":"a.txt"}`); res.Content != "inside" || res.IsError {
		t.Errorf("read a.txt: %+v", res)
	}
	for _, path := range []string{"../secret.txt", filepath.Join(dir, "secret.txt"), "link", "sub/../../secret.txt"} {
		res := call(t, r, nil, "2", "read_file", fmt.Sprintf(`{"path":%q}`, path))
		if !res.IsError || strings.Contains(res.Content, "outside") || !strings.Contains(res.Content, "leaves the granted folder") {
			t.Errorf("read %s: %+v", path, res)
		}
	}
	if res := call(t, r, nil, "3", "list_dir", `{}`); res.Content != "a.txt\t6 bytes\nlink@\nsub/\n" {
		t.Errorf("list: %q", res.Content)
	}
}

func TestWasmLedgerCountsEveryCall(t *testing.T) {
	dir := t.TempDir()
	folder := filepath.Join(dir, "ledger-data")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	p := install(t, dir, "ledger", func(man map[string]any) {
		capabilities(man)["allowedPaths"] = []any{map[string]any{"path": folder}}
		man["config"] = map[string]any{"dir": folder}
	})
	r := load(t, plugins.Config{Policy: plugins.Policy{PathRoots: []string{dir}}}, p)
	defs, _ := r.Tools(context.Background())
	if len(defs) != 1 || defs[0].Name != "ledger_append" || defs[0].Idempotent {
		t.Errorf("definitions %+v: want ledger_append, not idempotent", defs)
	}
	const n = 12
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res := call(t, r, nil, fmt.Sprintf("call-%d", i), "ledger_append", fmt.Sprintf(`{"entry":"entry %d\nsecond line"}`, i))
			if res.IsError {
				t.Errorf("append %d: %+v", i, res)
			}
		})
	}
	wg.Wait()
	f, err := os.Open(filepath.Join(folder, "ledger.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, entry, _ := strings.Cut(sc.Text(), "\t")
		seen[id] = entry
	}
	if len(seen) != n {
		t.Fatalf("%d distinct lines, want %d: %v", len(seen), n, seen)
	}
	if seen["call-3"] != "entry 3 second line" {
		t.Errorf("line of call-3 = %q", seen["call-3"])
	}
}

// artifactStore keeps what the dataset writer sends.
type artifactStore struct {
	mu     sync.Mutex
	writes []pdk.ArtifactWrite
	scope  plugins.ArtifactScope
}

func (s *artifactStore) WriteArtifact(_ context.Context, scope plugins.ArtifactScope, w *pdk.ArtifactWrite) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, *w)
	s.scope = scope
	return "art-42", nil
}

func TestWasmDatasetWriter(t *testing.T) {
	store := &artifactStore{}
	r := registry(t, plugins.Config{Artifacts: store}, "dataset-writer")
	var mu sync.Mutex
	var progress []string
	env := &loop.ToolEnv{ContextID: "ctx", TaskID: "task-7", Emit: func(e loop.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Head().Kind == loop.KindToolProgress {
			progress = append(progress, string(e.Head().Kind))
		}
	}}
	res := call(t, r, env, "c1", "make_dataset", `{"name":"squares","rows":2500}`)
	if res.IsError || !strings.Contains(res.Content, "art-42") {
		t.Fatalf("make_dataset: %+v", res)
	}
	var data struct {
		ArtifactID string `json:"artifactId"`
		Rows       int    `json:"rows"`
	}
	if err := json.Unmarshal(res.Data, &data); err != nil || data.ArtifactID != "art-42" || data.Rows != 2500 {
		t.Errorf("data %s: %v", res.Data, err)
	}
	rows := 0
	for i, w := range store.writes {
		rows += len(w.Rows)
		if (i == 0) != (w.ArtifactID == "") || w.Complete != (i == len(store.writes)-1) || w.Type != "dataset" {
			t.Errorf("write %d: id %q complete %v type %q", i, w.ArtifactID, w.Complete, w.Type)
		}
	}
	if len(store.writes) != 3 || rows != 2500 || len(store.writes[0].Columns) != 4 {
		t.Errorf("%d writes with %d rows", len(store.writes), rows)
	}
	if store.scope.TaskID != "task-7" || len(progress) != 3 {
		t.Errorf("scope %+v, progress events %d", store.scope, len(progress))
	}
	if res := call(t, r, env, "c2", "make_dataset", `{"name":"x","rows":0}`); !res.IsError || !strings.Contains(res.Content, "rows 0") {
		t.Errorf("zero rows: %+v", res)
	}
}
