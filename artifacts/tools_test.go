package artifacts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// scriptedModel is the only fake: each step looks at the request (the tool
// results so far) and answers with tool calls or, at the end, text.
type scriptedModel struct {
	mu    sync.Mutex
	steps []func(req *loop.ModelRequest) []loop.ToolCall
	n     int
}

func (m *scriptedModel) Generate(ctx context.Context, req *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n >= len(m.steps) {
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "done"}, FinishReason: loop.FinishStop}, nil
	}
	calls := m.steps[m.n](req)
	m.n++
	for i := range calls {
		calls[i].ID = fmt.Sprintf("call-%d-%d", m.n, i)
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, ToolCalls: calls}, FinishReason: loop.FinishToolCalls}, nil
}

func call(name string, args any) loop.ToolCall {
	b, _ := json.Marshal(args)
	return loop.ToolCall{Name: name, Arguments: b}
}

// lastResult returns the newest tool result of the request, decoded.
func lastResult(t *testing.T, req *loop.ModelRequest) map[string]any {
	t.Helper()
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role == loop.RoleTool {
			var out map[string]any
			if err := json.Unmarshal([]byte(m.Content), &out); err != nil {
				t.Fatalf("tool result %q: %v", m.Content, err)
			}
			return out
		}
	}
	t.Fatal("no tool result yet")
	return nil
}

// runTurn runs one real turn of the loop with the artifact tools and the
// scripted model, capturing the turn's events as a client receives them.
func runTurn(t *testing.T, s Store, steps ...func(*loop.ModelRequest) []loop.ToolCall) (*recorder, loop.Outcome) {
	t.Helper()
	l, err := loop.New(loop.Config{Model: &scriptedModel{steps: steps}, Toolsets: []loop.Toolset{NewTools(s)}})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{t: t}
	out := l.Run(ctxb, loop.Turn{ContextID: "ctx-1", TaskID: "task-1", Messages: []loop.Message{{Role: loop.RoleUser, Content: "build it"}},
		Auth: &loop.AuthContext{Principal: "alice"}, Sink: loop.SinkFunc(rec.emit)})
	if out.Status != loop.TaskCompleted {
		t.Fatalf("turn ended %s: %v", out.Status, out.Err)
	}
	return rec, out
}

// toolErrors returns the error results of the turn's tool calls.
func toolErrors(events []loop.Event) []string {
	var out []string
	for _, e := range events {
		if tc, ok := e.(*loop.ToolComplete); ok && !tc.Success {
			out = append(out, tc.ToolName+": "+tc.Error+tc.Result)
		}
	}
	return out
}

// checkRebuild rebuilds every artifact from the events alone and compares
// it byte for byte with what the store streams.
func checkRebuild(t *testing.T, s Store, events []loop.Event) map[string]*rebuilt {
	t.Helper()
	built := rebuild(t, events)
	if len(built) == 0 {
		t.Fatal("no artifact events")
	}
	for id, r := range built {
		rc, _, info, err := Export(ctxb, s, id, FormatNative)
		if err != nil {
			t.Fatal(err)
		}
		stored := readAll(t, rc)
		if got := r.bytes(t); !bytes.Equal(got, stored) {
			t.Fatalf("artifact %s rebuilt from events:\n%q\nstreamed by the store:\n%q", id, got, stored)
		}
		if r.kind != info.Kind {
			t.Fatalf("kind %s, stored %s", r.kind, info.Kind)
		}
		if r.kind != KindData && r.complete != (info.Status == StatusComplete) {
			t.Fatalf("%s: events say complete=%v, store says %s", id, r.complete, info.Status)
		}
	}
	return built
}

func TestToolsFileEndToEnd(t *testing.T) {
	for _, b := range backends(t, Config{InlineMax: 16}) { // small: some chunks spill to blobs
		t.Run(b.name, func(t *testing.T) {
			var id string
			rec, _ := runTurn(t, b.store,
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("create_artifact", map[string]any{"name": "report.md", "mimeType": "text/markdown"})}
				},
				func(req *loop.ModelRequest) []loop.ToolCall {
					id = lastResult(t, req)["artifactId"].(string)
					return []loop.ToolCall{call("append_artifact", map[string]any{"artifactId": id, "content": "# Report\n"})}
				},
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("append_artifact", map[string]any{"artifactId": id, "content": "Résumé: a long line that goes to a blob ✓\n"})}
				},
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("append_artifact_data", map[string]any{"artifactId": id, "data": map[string]any{"k": 1}})}
				},
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("replace_artifact_part", map[string]any{"artifactId": id, "partIndex": 1, "content": "Summary <b>&</b>\n"})}
				},
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("append_artifact", map[string]any{"artifactId": id, "content": "The end.", "isLastChunk": true})}
				},
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("append_artifact", map[string]any{"artifactId": id, "content": "too late"})}
				},
			)
			events := rec.all()
			errs := toolErrors(events)
			if len(errs) != 1 || !strings.Contains(errs[0], "is complete") {
				t.Fatalf("tool errors %q, want one about the completed artifact", errs)
			}
			built := checkRebuild(t, b.store, events)
			r := built[id]
			if want := "# Report\nSummary <b>&</b>\n{\"k\":1}\nThe end."; string(r.bytes(t)) != want {
				t.Fatalf("file %q, want %q", r.bytes(t), want)
			}
			if r.name != "report.md" || r.mimeType != "text/markdown" || !r.complete {
				t.Fatalf("rebuilt %+v", r)
			}
			for _, e := range events {
				if fw, ok := e.(*loop.FileWrite); ok && (fw.ContextID != "ctx-1" || fw.TaskID != "task-1") {
					t.Fatalf("event header %+v", fw.Header)
				}
			}
			info := must[Info](t)(b.store.Get(ctxb, id))
			if info.Owner != "alice" || info.TaskID != "task-1" {
				t.Fatalf("owner/task %+v", info)
			}
		})
	}
}

func TestToolsDataEndToEnd(t *testing.T) {
	s := NewMemory(nil, Config{})
	var id string
	rec, _ := runTurn(t, s,
		func(*loop.ModelRequest) []loop.ToolCall {
			return []loop.ToolCall{call("write_data", map[string]any{"name": "result", "data": map[string]any{"status": "draft", "score": 1}})}
		},
		func(req *loop.ModelRequest) []loop.ToolCall {
			res := lastResult(t, req)
			id = res["artifactId"].(string)
			if res["version"] != 1.0 {
				t.Errorf("first write version %v", res["version"])
			}
			return []loop.ToolCall{call("append_artifact_data", map[string]any{"artifactId": id, "data": map[string]any{"score": 0.75, "tags": []string{"a", "b"}}})}
		},
		func(*loop.ModelRequest) []loop.ToolCall {
			return []loop.ToolCall{call("write_data", map[string]any{"artifactId": id, "data": map[string]any{"status": "final", "score": 0.75, "big": 12345678901234.0}, "complete": true})}
		},
	)
	events := rec.all()
	if errs := toolErrors(events); len(errs) != 0 {
		t.Fatalf("tool errors %q", errs)
	}
	built := checkRebuild(t, s, events)
	if r := built[id]; r.version != 3 || r.name != "result" {
		t.Fatalf("rebuilt data version %d name %q", r.version, r.name)
	}
	var versions []int
	for _, e := range events {
		if dw, ok := e.(*loop.DataWrite); ok {
			versions = append(versions, dw.Version)
		}
	}
	if fmt.Sprint(versions) != "[1 2 3]" {
		t.Fatalf("data-write versions %v", versions)
	}
	if info := must[Info](t)(s.Get(ctxb, id)); info.Status != StatusComplete {
		t.Fatalf("status %s", info.Status)
	}
}

func TestToolsDatasetEndToEnd(t *testing.T) {
	for _, b := range backends(t, Config{InlineMax: 4096}) {
		t.Run(b.name, func(t *testing.T) {
			var id string
			var rows []map[string]any
			for i := range 100 {
				rows = append(rows, map[string]any{"region": fmt.Sprintf("r%d", i), "units": i, "total": float64(i) * 1.25, "paid": i%2 == 0, "day": "2026-01-02", "extra": map[string]any{"i": i}})
			}
			rec, _ := runTurn(t, b.store,
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("create_dataset", map[string]any{"name": "sales", "description": "by region", "columns": salesSchema.Columns})}
				},
				func(req *loop.ModelRequest) []loop.ToolCall {
					id = lastResult(t, req)["artifactId"].(string)
					return []loop.ToolCall{call("append_dataset_rows", map[string]any{"artifactId": id, "rows": rows})}
				},
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("append_dataset_rows", map[string]any{"artifactId": id, "rows": []any{map[string]any{"region": "ok"}, map[string]any{"units": "many"}}})}
				},
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("append_artifact_data", map[string]any{"artifactId": id, "data": map[string]any{"region": "last", "units": -3}})}
				},
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("complete_artifact", map[string]any{"artifactId": id})}
				},
				func(*loop.ModelRequest) []loop.ToolCall {
					return []loop.ToolCall{call("list_artifacts", map[string]any{})}
				},
			)
			events := rec.all()
			errs := toolErrors(events)
			if len(errs) != 1 || !strings.Contains(errs[0], `row 1 (dataset row 101): column "units"`) {
				t.Fatalf("tool errors %q, want the schema refusal naming row 1 and column units", errs)
			}
			built := checkRebuild(t, b.store, events)
			r := built[id]
			if len(r.rows) != 101 || r.name != "sales" || len(r.schema.Columns) != 6 || !r.complete {
				t.Fatalf("rebuilt dataset: %d rows, name %q", len(r.rows), r.name)
			}
			// The CSV export of the rebuilt rows matches too.
			rc, _, _, err := Export(ctxb, b.store, id, FormatCSV)
			if err != nil {
				t.Fatal(err)
			}
			csvOut := readAll(t, rc)
			if lines := bytes.Count(csvOut, []byte("\n")); lines != 102 {
				t.Fatalf("csv has %d lines, want header + 101", lines)
			}
			if !bytes.HasSuffix(csvOut, []byte("last,-3,,,,\n")) {
				t.Fatalf("csv tail %q", csvOut[len(csvOut)-40:])
			}
			var listed bool
			for _, e := range events {
				if tc, ok := e.(*loop.ToolComplete); ok && tc.ToolName == "list_artifacts" {
					listed = strings.Contains(tc.Result, id) && strings.Contains(tc.Result, `"status":"complete"`) && strings.Contains(tc.Result, `"rows":101`)
				}
			}
			if !listed {
				t.Fatal("list_artifacts does not show the complete dataset")
			}
		})
	}
}

func TestToolErrors(t *testing.T) {
	s := NewMemory(nil, Config{})
	tools := NewTools(s)
	env := &loop.ToolEnv{ContextID: "c", TaskID: "t", Auth: &loop.AuthContext{Principal: "alice"}}
	run := func(env *loop.ToolEnv, name string, args any) loop.ToolResult {
		t.Helper()
		var raw json.RawMessage
		if s, ok := args.(string); ok {
			raw = json.RawMessage(s)
		} else {
			raw, _ = json.Marshal(args)
		}
		res, err := tools.Call(ctxb, loop.ToolCall{ID: "x", Name: name, Arguments: raw}, env)
		if err != nil {
			t.Fatalf("%s returned a Go error: %v", name, err)
		}
		return res
	}
	created := func(env *loop.ToolEnv, name string, args any) string {
		t.Helper()
		res := run(env, name, args)
		if res.IsError {
			t.Fatalf("%s: %s", name, res.Content)
		}
		var r map[string]any
		_ = json.Unmarshal([]byte(res.Content), &r)
		return r["artifactId"].(string)
	}
	file := created(env, "create_artifact", map[string]any{"name": "f"})
	done := created(env, "create_artifact", map[string]any{"name": "d"})
	run(env, "complete_artifact", map[string]any{"artifactId": done})
	ds := created(env, "create_dataset", map[string]any{"name": "ds", "columns": []any{map[string]any{"name": "n", "type": "integer"}}})
	other := &loop.ToolEnv{ContextID: "c", TaskID: "other", Auth: &loop.AuthContext{Principal: "alice"}}
	foreign := created(other, "create_artifact", map[string]any{"name": "theirs"})
	mallory := &loop.ToolEnv{ContextID: "c", TaskID: "t", Auth: &loop.AuthContext{Principal: "mallory"}}

	cases := []struct {
		name string
		env  *loop.ToolEnv
		tool string
		args any
		want []string
	}{
		{"unknown id", env, "append_artifact", map[string]any{"artifactId": "art-nope", "content": "x"}, []string{"not found", "art-nope"}},
		{"completed", env, "append_artifact", map[string]any{"artifactId": done, "content": "x"}, []string{"is complete"}},
		{"part out of range", env, "replace_artifact_part", map[string]any{"artifactId": file, "partIndex": 5, "content": "x"}, []string{"out of range", "has 0 parts"}},
		{"schema mismatch", env, "append_dataset_rows", map[string]any{"artifactId": ds, "rows": []any{map[string]any{"n": 1}, map[string]any{"n": "two"}}}, []string{"row 1", `column "n"`, "want an integer"}},
		{"unknown column", env, "append_dataset_rows", map[string]any{"artifactId": ds, "rows": []any{map[string]any{"m": 1}}}, []string{"row 0", `column "m"`, "no such column"}},
		{"another task", env, "append_artifact", map[string]any{"artifactId": foreign, "content": "x"}, []string{"another task"}},
		{"another principal", mallory, "append_artifact", map[string]any{"artifactId": file, "content": "x"}, []string{"artifact not found"}},
		{"wrong kind", env, "append_dataset_rows", map[string]any{"artifactId": file, "rows": []any{map[string]any{"n": 1}}}, []string{"does not apply", "is a file"}},
		{"missing argument", env, "append_artifact", map[string]any{"content": "x"}, []string{"invalid arguments", "artifactId"}},
		{"wrong argument type", env, "replace_artifact_part", map[string]any{"artifactId": file, "partIndex": "one", "content": "x"}, []string{"invalid arguments", "partIndex"}},
		{"unknown argument", env, "complete_artifact", map[string]any{"artifactId": file, "force": true}, []string{"invalid arguments", "force"}},
		{"not JSON", env, "complete_artifact", `{"artifactId":`, []string{"not JSON"}},
		{"bad column type", env, "create_dataset", map[string]any{"name": "x", "columns": []any{map[string]any{"name": "a", "type": "float"}}}, []string{"invalid arguments", "type"}},
		{"unknown tool", env, "drop_artifact", map[string]any{}, []string{"unknown artifact tool"}},
		{"no task", &loop.ToolEnv{}, "list_artifacts", map[string]any{}, []string{"need a task"}},
		{"nil env", nil, "list_artifacts", map[string]any{}, []string{"need a task"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(c.env, c.tool, c.args)
			if !res.IsError {
				t.Fatalf("not an error: %s", res.Content)
			}
			for _, w := range c.want {
				if !strings.Contains(res.Content, w) {
					t.Fatalf("message %q does not say %q", res.Content, w)
				}
			}
		})
	}
	// list_artifacts: the task's by default, the context's on request,
	// never another principal's.
	list := func(env *loop.ToolEnv, scope string) string {
		args := map[string]any{}
		if scope != "" {
			args["scope"] = scope
		}
		res := run(env, "list_artifacts", args)
		if res.IsError {
			t.Fatal(res.Content)
		}
		return res.Content
	}
	if l := list(env, ""); strings.Contains(l, foreign) || !strings.Contains(l, file) {
		t.Fatalf("task list %s", l)
	}
	if l := list(env, "context"); !strings.Contains(l, foreign) || !strings.Contains(l, ds) {
		t.Fatalf("context list %s", l)
	}
	if l := list(mallory, "context"); strings.Contains(l, file) {
		t.Fatalf("another principal sees alice's artifacts: %s", l)
	}
	if res := run(env, "complete_artifact", map[string]any{"artifactId": done}); res.IsError || !strings.Contains(res.Content, "already complete") {
		t.Fatalf("completing twice: %s", res.Content)
	}
	if res := run(env, "complete_artifact", map[string]any{"artifactId": foreign}); !res.IsError || !strings.Contains(res.Content, "another task") {
		t.Fatalf("completing another task's artifact: %s", res.Content)
	}
	defs := must[[]loop.ToolDefinition](t)(tools.Tools(ctxb))
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
		if !json.Valid(d.Parameters) || d.Description == "" {
			t.Fatalf("tool %s: bad definition", d.Name)
		}
	}
	want := "create_artifact append_artifact append_artifact_data replace_artifact_part complete_artifact list_artifacts create_dataset append_dataset_rows write_data"
	if strings.Join(names, " ") != want {
		t.Fatalf("tools %v", names)
	}
}

func TestCreateArtifactTypes(t *testing.T) {
	s := NewMemory(nil, Config{})
	tools := NewTools(s)
	env := &loop.ToolEnv{ContextID: "c", TaskID: "t"}
	cases := []struct {
		args    string
		kind    Kind
		mime    string
		wantErr string
	}{
		{`{"name":"a.md","mimeType":"text/markdown"}`, KindFile, "text/markdown", ""},
		{`{"name":"n"}`, KindFile, "text/plain; charset=utf-8", ""},
		{`{"name":"cfg","type":"data"}`, KindData, "application/json", ""},
		{`{"name":"t","type":"dataset","columns":[{"name":"a","type":"date"}]}`, KindDataset, "application/x-ndjson", ""},
		{`{"name":"t","type":"dataset"}`, "", "", "at least one column"},
		{`{"name":"t","type":"file","columns":[{"name":"a","type":"date"}]}`, "", "", "dataset only"},
		{`{"name":"t","mimeType":"image/png"}`, "", "", "invalid arguments"},
		{`{"name":""}`, "", "", "invalid arguments"},
	}
	for _, c := range cases {
		res, err := tools.Call(ctxb, loop.ToolCall{Name: "create_artifact", Arguments: json.RawMessage(c.args)}, env)
		if err != nil {
			t.Fatal(err)
		}
		if c.wantErr != "" {
			if !res.IsError || !strings.Contains(res.Content, c.wantErr) {
				t.Fatalf("%s: %s, want an error saying %q", c.args, res.Content, c.wantErr)
			}
			continue
		}
		if res.IsError {
			t.Fatalf("%s: %s", c.args, res.Content)
		}
		var r struct{ ArtifactID string }
		_ = json.Unmarshal([]byte(res.Content), &r)
		info := must[Info](t)(s.Get(ctxb, r.ArtifactID))
		if info.Kind != c.kind || info.ContentType() != c.mime {
			t.Fatalf("%s: kind %s type %s", c.args, info.Kind, info.ContentType())
		}
	}
}
