package artifacts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/loop/schemamsg"
)

// Tools is the built-in artifact toolset the model uses to build
// artifacts: create_artifact, append_artifact, append_artifact_data,
// replace_artifact_part, complete_artifact, list_artifacts, and the typed
// create_dataset, append_dataset_rows and write_data. Arguments are
// checked against each tool's JSON Schema. Every failure (bad arguments,
// unknown id, completed artifact, part out of range, schema mismatch, an
// artifact of another task) comes back as a ToolResult with IsError and a
// message for the model; Call never returns a Go error.
//
// A call writes in the scope of its ToolEnv (context, task, principal) and
// sends its events through ToolEnv.Emit.
type Tools struct {
	store   Store
	defs    []loop.ToolDefinition
	schemas map[string]*jsonschema.Schema
}

var _ loop.Toolset = (*Tools)(nil)

// NewTools returns the artifact toolset over store. It panics only if a
// built-in schema does not compile, which the tests rule out.
func NewTools(store Store) *Tools {
	t := &Tools{store: store, schemas: map[string]*jsonschema.Schema{}}
	c := jsonschema.NewCompiler()
	for _, d := range toolDefs {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(d.params))
		if err != nil {
			panic(fmt.Sprintf("artifact tool %s: schema: %v", d.name, err))
		}
		url := "looopy:artifacts/" + d.name + ".json"
		if err := c.AddResource(url, doc); err != nil {
			panic(fmt.Sprintf("artifact tool %s: schema: %v", d.name, err))
		}
		s, err := c.Compile(url)
		if err != nil {
			panic(fmt.Sprintf("artifact tool %s: schema: %v", d.name, err))
		}
		t.schemas[d.name] = s
		t.defs = append(t.defs, loop.ToolDefinition{Name: d.name, Description: d.desc, Parameters: json.RawMessage(d.params), Idempotent: d.idempotent})
	}
	return t
}

// Tools implements loop.Toolset.
func (t *Tools) Tools(ctx context.Context) ([]loop.ToolDefinition, error) {
	return append([]loop.ToolDefinition(nil), t.defs...), nil
}

// WriterFor returns the writer of a tool call: the scope of env (context,
// task, principal), events through env.Emit. The plugin runtime's
// artifact_write host function can use it with the ToolEnv of the call.
func WriterFor(s Store, env *loop.ToolEnv) *Writer {
	scope := Scope{ContextID: env.ContextID, TaskID: env.TaskID}
	if env.Auth != nil {
		scope.Owner = env.Auth.Principal
	}
	return NewWriter(s, scope, env.Emit)
}

// Call implements loop.Toolset.
func (t *Tools) Call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (loop.ToolResult, error) {
	res, err := t.call(ctx, call, env)
	if err != nil {
		return loop.ToolResult{ToolCallID: call.ID, Content: call.Name + ": " + err.Error(), IsError: true}, nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return loop.ToolResult{ToolCallID: call.ID, Content: call.Name + ": " + err.Error(), IsError: true}, nil
	}
	return loop.ToolResult{ToolCallID: call.ID, Content: string(b), Data: b}, nil
}

// toolArgs is the union of every tool's arguments.
type toolArgs struct {
	ArtifactID  string               `json:"artifactId"`
	Name        string               `json:"name"`
	Description string               `json:"description"`
	MimeType    string               `json:"mimeType"`
	Type        Kind                 `json:"type"`
	Columns     []loop.DatasetColumn `json:"columns"`
	Content     *string              `json:"content"`
	Data        map[string]any       `json:"data"`
	Rows        []Row                `json:"rows"`
	PartIndex   int                  `json:"partIndex"`
	IsLastChunk bool                 `json:"isLastChunk"`
	IsLastBatch bool                 `json:"isLastBatch"`
	Complete    bool                 `json:"complete"`
	Scope       string               `json:"scope"`
}

type toolReply struct {
	ArtifactID string        `json:"artifactId,omitempty"`
	Type       Kind          `json:"type,omitempty"`
	Status     Status        `json:"status,omitempty"`
	Parts      *int          `json:"parts,omitempty"`
	Rows       *int64        `json:"rows,omitempty"`
	Version    *int          `json:"version,omitempty"`
	Message    string        `json:"message"`
	Artifacts  []listedEntry `json:"artifacts,omitempty"`
}

type listedEntry struct {
	ArtifactID  string `json:"artifactId"`
	Type        Kind   `json:"type"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType"`
	Status      Status `json:"status"`
	Parts       int    `json:"totalParts"`
	Size        int64  `json:"size"`
	Rows        int64  `json:"rows,omitempty"`
	TaskID      string `json:"taskId"`
}

func reply(info Info, msg string) toolReply {
	r := toolReply{ArtifactID: info.ID, Type: info.Kind, Status: info.Status, Parts: &info.Parts, Message: msg}
	switch info.Kind {
	case KindDataset:
		r.Rows = &info.Rows
	case KindData:
		r.Version = &info.Version
	}
	return r
}

func (t *Tools) call(ctx context.Context, call loop.ToolCall, env *loop.ToolEnv) (toolReply, error) {
	sch, ok := t.schemas[call.Name]
	if !ok {
		return toolReply{}, fmt.Errorf("unknown artifact tool")
	}
	if env == nil || env.TaskID == "" || env.ContextID == "" {
		return toolReply{}, fmt.Errorf("artifact tools need a task and a context")
	}
	raw := bytes.TrimSpace(call.Arguments)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return toolReply{}, fmt.Errorf("arguments are not JSON: %v", err)
	}
	if err := sch.Validate(inst); err != nil {
		return toolReply{}, fmt.Errorf("invalid arguments: %s", schemamsg.Text(err))
	}
	var a toolArgs
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&a); err != nil {
		return toolReply{}, fmt.Errorf("invalid arguments: %v", err)
	}
	w := WriterFor(t.store, env)
	switch call.Name {
	case "create_artifact":
		spec := Spec{Kind: a.Type, Name: a.Name, Description: a.Description, MimeType: a.MimeType}
		if spec.Kind == "" {
			spec.Kind = KindFile
		}
		if spec.Kind == KindDataset {
			spec.Schema = &loop.DatasetSchema{Columns: a.Columns}
		} else if len(a.Columns) > 0 {
			return toolReply{}, fmt.Errorf("columns apply to a dataset only")
		}
		if spec.Kind != KindFile {
			spec.MimeType = ""
		}
		info, err := w.Create(ctx, spec)
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Created %s artifact %q with ID %s", info.Kind, info.Name, info.ID)), nil
	case "create_dataset":
		info, err := w.Create(ctx, Spec{Kind: KindDataset, Name: a.Name, Description: a.Description, Schema: &loop.DatasetSchema{Columns: a.Columns}})
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Created dataset %q with ID %s and %d columns", info.Name, info.ID, len(a.Columns))), nil
	case "append_artifact":
		info, err := w.AppendChunk(ctx, a.ArtifactID, []byte(*a.Content), a.IsLastChunk)
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Appended %d bytes to artifact %s as part %d", len(*a.Content), info.ID, info.Parts-1)), nil
	case "append_artifact_data":
		return t.appendData(ctx, w, a)
	case "replace_artifact_part":
		info, err := w.ReplaceChunk(ctx, a.ArtifactID, a.PartIndex, []byte(*a.Content))
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Replaced part %d of artifact %s", a.PartIndex, info.ID)), nil
	case "complete_artifact":
		info, err := w.Complete(ctx, a.ArtifactID)
		if errors.Is(err, ErrCompleted) {
			// Completing twice asks for what is already so: say so, as Looopy does.
			if info, err = t.store.Get(ctx, a.ArtifactID); err == nil {
				return reply(info, fmt.Sprintf("Artifact %s was already complete", info.ID)), nil
			}
		}
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Marked artifact %s as complete", info.ID)), nil
	case "append_dataset_rows":
		info, err := w.AppendRows(ctx, a.ArtifactID, a.Rows, a.IsLastBatch)
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Appended %d rows to dataset %s (%d rows in all)", len(a.Rows), info.ID, info.Rows)), nil
	case "write_data":
		id := a.ArtifactID
		if id == "" {
			info, err := w.Create(ctx, Spec{Kind: KindData, Name: a.Name, Description: a.Description})
			if err != nil {
				return toolReply{}, err
			}
			id = info.ID
		}
		info, err := w.WriteData(ctx, id, a.Data, a.Complete)
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Wrote version %d of data artifact %s", info.Version, info.ID)), nil
	case "list_artifacts":
		var infos []Info
		var err error
		if a.Scope == "context" {
			infos, err = t.store.ListByContext(ctx, env.ContextID)
		} else {
			infos, err = t.store.ListByTask(ctx, env.TaskID)
		}
		if err != nil {
			return toolReply{}, err
		}
		r := toolReply{Artifacts: []listedEntry{}}
		for _, i := range infos {
			if i.ContextID != env.ContextID || (i.Owner != "" && i.Owner != w.scope.Owner) {
				continue
			}
			r.Artifacts = append(r.Artifacts, listedEntry{ArtifactID: i.ID, Type: i.Kind, Name: i.Name, Description: i.Description,
				MimeType: i.ContentType(), Status: i.Status, Parts: i.Parts, Size: i.Size, Rows: i.Rows, TaskID: i.TaskID})
		}
		r.Message = fmt.Sprintf("%d artifacts", len(r.Artifacts))
		return r, nil
	}
	return toolReply{}, fmt.Errorf("unknown artifact tool")
}

// appendData appends structured data by the artifact's kind: a data
// artifact takes the object's keys (a shallow merge, the next version), a
// dataset takes it as one row, a file takes it as a line of JSON.
func (t *Tools) appendData(ctx context.Context, w *Writer, a toolArgs) (toolReply, error) {
	info, err := t.store.Get(ctx, a.ArtifactID)
	if err != nil {
		return toolReply{}, err
	}
	switch info.Kind {
	case KindData:
		info, err = w.MergeData(ctx, a.ArtifactID, a.Data, a.IsLastChunk)
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Merged data into artifact %s (version %d)", info.ID, info.Version)), nil
	case KindDataset:
		info, err = w.AppendRows(ctx, a.ArtifactID, []Row{a.Data}, a.IsLastChunk)
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Appended a row to dataset %s (%d rows in all)", info.ID, info.Rows)), nil
	default:
		_, b, err := CanonicalData(a.Data)
		if err != nil {
			return toolReply{}, err
		}
		info, err = w.AppendChunk(ctx, a.ArtifactID, append(b, '\n'), a.IsLastChunk)
		if err != nil {
			return toolReply{}, err
		}
		return reply(info, fmt.Sprintf("Appended data as a JSON line to artifact %s", info.ID)), nil
	}
}
