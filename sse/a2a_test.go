package sse_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
)

// wire1 maps e to A2A 1.0 and sends it through the JSON of the official
// types: what a client decodes.
func wire1(t *testing.T, e loop.Event) (a2a.Event, string, bool) {
	t.Helper()
	ev, ok := sse.ToA2A(e)
	if !ok {
		return nil, "", false
	}
	raw, err := json.Marshal(a2a.StreamResponse{Event: ev})
	if err != nil {
		t.Fatalf("marshal %T: %v", ev, err)
	}
	var back a2a.StreamResponse
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("the a2a-go types cannot read back %s: %v", raw, err)
	}
	return back.Event, string(raw), true
}

func wire03(t *testing.T, e loop.Event) (a2a03.Event, string, bool) {
	t.Helper()
	ev, ok := sse.ToA2A03(e)
	if !ok {
		return nil, "", false
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatalf("marshal %T: %v", ev, err)
	}
	back, err := a2a03.UnmarshalEventJSON(raw)
	if err != nil {
		t.Fatalf("the a2a-go 0.3 types cannot read back %s: %v", raw, err)
	}
	return back, string(raw), true
}

func TestToA2ATaskCreated(t *testing.T) {
	e := &loop.TaskCreated{Header: hdr(loop.KindTaskCreated, "c1", "t1"), Initiator: "user", Metadata: map[string]any{"k": "v"}}
	ev, raw, ok := wire1(t, e)
	if !ok {
		t.Fatal("task-created not mapped")
	}
	task, isTask := ev.(*a2a.Task)
	if !isTask || task.ID != "t1" || task.ContextID != "c1" || task.Status.State != a2a.TaskStateSubmitted || task.Metadata["k"] != "v" {
		t.Fatalf("task-created → %s", raw)
	}
	if task.Status.Timestamp == nil || !task.Status.Timestamp.Equal(e.Timestamp) {
		t.Fatalf("timestamp lost: %s", raw)
	}
	if !strings.Contains(raw, `"state":"TASK_STATE_SUBMITTED"`) {
		t.Fatalf("1.0 state spelling: %s", raw)
	}
	ev3, raw3, ok := wire03(t, e)
	task3, isTask3 := ev3.(*a2a03.Task)
	if !ok || !isTask3 || task3.ID != "t1" || task3.Status.State != a2a03.TaskStateSubmitted || !strings.Contains(raw3, `"kind":"task"`) {
		t.Fatalf("0.3 task-created → %s", raw3)
	}
}

func TestToA2ATaskStatus(t *testing.T) {
	cases := []struct {
		status  loop.TaskStatus
		state1  a2a.TaskState
		state03 a2a03.TaskState
		final   bool
	}{
		{loop.TaskSubmitted, a2a.TaskStateSubmitted, a2a03.TaskStateSubmitted, false},
		{loop.TaskWorking, a2a.TaskStateWorking, a2a03.TaskStateWorking, false},
		{loop.TaskWaitingSubtask, a2a.TaskStateWorking, a2a03.TaskStateWorking, false},
		{loop.TaskWaitingInput, a2a.TaskStateInputRequired, a2a03.TaskStateInputRequired, true},
		{loop.TaskWaitingAuth, a2a.TaskStateAuthRequired, a2a03.TaskStateAuthRequired, true},
		{loop.TaskCompleted, a2a.TaskStateCompleted, a2a03.TaskStateCompleted, true},
		{loop.TaskFailed, a2a.TaskStateFailed, a2a03.TaskStateFailed, true},
		{loop.TaskCanceled, a2a.TaskStateCanceled, a2a03.TaskStateCanceled, true},
		{loop.TaskRejected, a2a.TaskStateRejected, a2a03.TaskStateRejected, true},
	}
	for _, c := range cases {
		t.Run(string(c.status), func(t *testing.T) {
			e := &loop.TaskStatusEvent{Header: hdr(loop.KindTaskStatus, "c1", "t1"), Status: c.status, Message: "why: " + string(c.status)}
			ev, raw, ok := wire1(t, e)
			su, isSU := ev.(*a2a.TaskStatusUpdateEvent)
			if !ok || !isSU || su.Status.State != c.state1 || su.TaskID != "t1" || su.ContextID != "c1" {
				t.Fatalf("1.0: %s", raw)
			}
			if m := su.Status.Message; m == nil || m.Role != a2a.MessageRoleAgent || len(m.Parts) != 1 || m.Parts[0].Text() != "why: "+string(c.status) || m.ID == "" {
				t.Fatalf("1.0 status message: %s", raw)
			}
			if sse.FinalA2A(ev) != c.final {
				t.Fatalf("1.0 final = %v, want %v", sse.FinalA2A(ev), c.final)
			}
			ev3, raw3, ok := wire03(t, e)
			su3, isSU3 := ev3.(*a2a03.TaskStatusUpdateEvent)
			if !ok || !isSU3 || su3.Status.State != c.state03 || su3.Final != c.final {
				t.Fatalf("0.3: %s", raw3)
			}
			if !strings.Contains(raw3, `"final":`) || !strings.Contains(raw3, `"kind":"status-update"`) {
				t.Fatalf("0.3 status update must carry kind and final: %s", raw3)
			}
			if m := su3.Status.Message; m == nil || m.Role != a2a03.MessageRoleAgent || m.Parts[0].(a2a03.TextPart).Text != "why: "+string(c.status) {
				t.Fatalf("0.3 status message: %s", raw3)
			}
			// Mapping is a function of the event: replays carry the same ids.
			again, _ := sse.ToA2A(e)
			if again.(*a2a.TaskStatusUpdateEvent).Status.Message.ID != su.Status.Message.ID {
				t.Fatal("status message id differs between two mappings of one event")
			}
		})
	}
	if _, ok := sse.ToA2A(&loop.TaskStatusEvent{Header: hdr(loop.KindTaskStatus, "c", "t"), Status: "bogus"}); ok {
		t.Fatal("an unknown status must not be mapped")
	}
	if _, ok := sse.ToA2A03(&loop.TaskStatusEvent{Header: hdr(loop.KindTaskStatus, "c", "t"), Status: "bogus"}); ok {
		t.Fatal("an unknown status must not be mapped (0.3)")
	}
	su, _ := sse.ToA2A(&loop.TaskStatusEvent{Header: hdr(loop.KindTaskStatus, "c", "t"), Status: loop.TaskWorking})
	if su.(*a2a.TaskStatusUpdateEvent).Status.Message != nil {
		t.Fatal("a status without message must have no message")
	}
}

func TestToA2AContent(t *testing.T) {
	type want struct {
		text         string
		append, last bool
	}
	cases := []struct {
		e    loop.Event
		want want
	}{
		{&loop.ContentDelta{Header: hdr(loop.KindContentDelta, "c1", "t1"), Delta: "Hel", Index: 0}, want{"Hel", false, false}},
		{&loop.ContentDelta{Header: hdr(loop.KindContentDelta, "c1", "t1"), Delta: "lo", Index: 1}, want{"lo", true, false}},
		{&loop.ContentComplete{Header: hdr(loop.KindContentComplete, "c1", "t1"), Content: "Hello"}, want{"Hello", false, true}},
	}
	for _, c := range cases {
		ev, raw, ok := wire1(t, c.e)
		au, isAU := ev.(*a2a.TaskArtifactUpdateEvent)
		if !ok || !isAU || au.Artifact.ID != "content-t1" || au.Artifact.Name != "response" || au.Append != c.want.append || au.LastChunk != c.want.last ||
			len(au.Artifact.Parts) != 1 || au.Artifact.Parts[0].Text() != c.want.text {
			t.Fatalf("1.0 %s → %s", c.e.Head().Kind, raw)
		}
		ev3, raw3, ok := wire03(t, c.e)
		au3, isAU3 := ev3.(*a2a03.TaskArtifactUpdateEvent)
		if !ok || !isAU3 || au3.Artifact.ID != "content-t1" || au3.Artifact.Name != "response" || au3.Append != c.want.append || au3.LastChunk != c.want.last ||
			au3.Artifact.Parts[0].(a2a03.TextPart).Text != c.want.text {
			t.Fatalf("0.3 %s → %s", c.e.Head().Kind, raw3)
		}
	}
	empty := &loop.ContentComplete{Header: hdr(loop.KindContentComplete, "c1", "t1")}
	if _, ok := sse.ToA2A(empty); ok {
		t.Fatal("an empty response (tool calls only) must not replace the text")
	}
	if _, ok := sse.ToA2A03(empty); ok {
		t.Fatal("an empty response must not replace the text (0.3)")
	}
}

// artifacts applies artifact updates as a client does: append adds parts,
// otherwise the artifact is replaced.
type artifacts map[string][]*a2a.Part

func (a artifacts) apply(t *testing.T, ev a2a.Event) {
	au, ok := ev.(*a2a.TaskArtifactUpdateEvent)
	if !ok {
		t.Fatalf("not an artifact update: %T", ev)
	}
	id := string(au.Artifact.ID)
	if au.Append {
		a[id] = append(a[id], au.Artifact.Parts...)
	} else {
		a[id] = append([]*a2a.Part(nil), au.Artifact.Parts...)
	}
}

func TestToA2AFileRebuildsFromTheStream(t *testing.T) {
	file := []byte("\x00\x01binary file\xff\xfe with several chunks of unequal size")
	cuts := []int{0, 5, 6, 20, len(file)}
	var events []loop.Event
	for i := 0; i+1 < len(cuts); i++ {
		fw := &loop.FileWrite{Header: hdr(loop.KindFileWrite, "c1", "t1"), ArtifactID: "f1", Encoding: "base64",
			Data: base64.StdEncoding.EncodeToString(file[cuts[i]:cuts[i+1]]), Index: i, Complete: i+2 == len(cuts)}
		if i == 0 {
			fw.Name, fw.MimeType = "blob.bin", "application/octet-stream"
		}
		events = append(events, fw)
	}

	arts := artifacts{}
	var last bool
	for i, e := range events {
		ev, raw, ok := wire1(t, e)
		if !ok {
			t.Fatalf("file-write %d not mapped", i)
		}
		au := ev.(*a2a.TaskArtifactUpdateEvent)
		if au.Append != (i > 0) || au.LastChunk != (i == len(events)-1) {
			t.Fatalf("chunk %d: append %v lastChunk %v: %s", i, au.Append, au.LastChunk, raw)
		}
		if i == 0 && (au.Artifact.Name != "blob.bin" || au.Artifact.Parts[0].MediaType != "application/octet-stream") {
			t.Fatalf("first chunk lacks name or media type: %s", raw)
		}
		arts.apply(t, ev)
		last = au.LastChunk
	}
	var got []byte
	for _, p := range arts["f1"] {
		got = append(got, p.Raw()...)
	}
	if !last || !bytes.Equal(got, file) {
		t.Fatalf("1.0 rebuilt %q, want %q", got, file)
	}

	// 0.3: file parts with base64 bytes, one per chunk.
	var got03 []byte
	for i, e := range events {
		ev3, raw3, ok := wire03(t, e)
		au3 := ev3.(*a2a03.TaskArtifactUpdateEvent)
		if !ok || au3.Append != (i > 0) || au3.LastChunk != (i == len(events)-1) {
			t.Fatalf("0.3 chunk %d: %s", i, raw3)
		}
		fb := au3.Artifact.Parts[0].(a2a03.FilePart).File.(a2a03.FileBytes)
		if i == 0 && (fb.Name != "blob.bin" || fb.MimeType != "application/octet-stream") {
			t.Fatalf("0.3 first chunk lacks name or mime type: %s", raw3)
		}
		b, err := base64.StdEncoding.DecodeString(fb.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		got03 = append(got03, b...)
	}
	if !bytes.Equal(got03, file) {
		t.Fatalf("0.3 rebuilt %q, want %q", got03, file)
	}

	// Text files are text parts.
	text := &loop.FileWrite{Header: hdr(loop.KindFileWrite, "c1", "t1"), ArtifactID: "f2", Data: "# title\n", Index: 0, Complete: true, Name: "a.md", MimeType: "text/markdown"}
	ev, raw, _ := wire1(t, text)
	if p := ev.(*a2a.TaskArtifactUpdateEvent).Artifact.Parts[0]; p.Text() != "# title\n" || p.MediaType != "text/markdown" || p.Filename != "a.md" {
		t.Fatalf("text file chunk: %s", raw)
	}
	ev3, raw3, _ := wire03(t, text)
	if p := ev3.(*a2a03.TaskArtifactUpdateEvent).Artifact.Parts[0].(a2a03.TextPart); p.Text != "# title\n" || p.Metadata["mimeType"] != "text/markdown" {
		t.Fatalf("0.3 text file chunk: %s", raw3)
	}

	bad := &loop.FileWrite{Header: hdr(loop.KindFileWrite, "c1", "t1"), ArtifactID: "f3", Data: "%%%", Encoding: "base64"}
	if _, ok := sse.ToA2A(bad); ok {
		t.Fatal("invalid base64 must not be mapped")
	}
	if _, ok := sse.ToA2A03(bad); ok {
		t.Fatal("invalid base64 must not be mapped (0.3)")
	}
	if _, ok := sse.ToA2A(&loop.FileWrite{Header: hdr(loop.KindFileWrite, "c1", "t1"), Encoding: "rot13"}); ok {
		t.Fatal("an unknown encoding must not be mapped")
	}
}

func TestToA2AData(t *testing.T) {
	e := &loop.DataWrite{Header: hdr(loop.KindDataWrite, "c1", "t1"), ArtifactID: "d1", Data: map[string]any{"n": 2.0, "s": "x"}, Version: 3, Name: "stats", Description: "numbers"}
	ev, raw, ok := wire1(t, e)
	au, isAU := ev.(*a2a.TaskArtifactUpdateEvent)
	if !ok || !isAU || au.Append || !au.LastChunk || au.Artifact.ID != "d1" || au.Artifact.Name != "stats" || au.Artifact.Description != "numbers" {
		t.Fatalf("1.0 data-write: %s", raw)
	}
	if d, _ := au.Artifact.Parts[0].Data().(map[string]any); d["n"] != 2.0 || d["s"] != "x" {
		t.Fatalf("1.0 data part: %s", raw)
	}
	if au.Artifact.Metadata["version"] != 3.0 {
		t.Fatalf("1.0 version: %s", raw)
	}
	ev3, raw3, ok := wire03(t, e)
	au3 := ev3.(*a2a03.TaskArtifactUpdateEvent)
	if !ok || au3.Append || !au3.LastChunk || au3.Artifact.Parts[0].(a2a03.DataPart).Data["s"] != "x" || !strings.Contains(raw3, `"kind":"data"`) {
		t.Fatalf("0.3 data-write: %s", raw3)
	}
	if _, raw, _ := wire1(t, &loop.DataWrite{Header: hdr(loop.KindDataWrite, "c1", "t1"), ArtifactID: "d2"}); !strings.Contains(raw, `"data":{}`) {
		t.Fatalf("nil data must be an empty object: %s", raw)
	}
}

func TestToA2ADataset(t *testing.T) {
	schema := &loop.DatasetSchema{Columns: []loop.DatasetColumn{{Name: "a", Type: "integer"}}}
	batches := []*loop.DatasetWrite{
		{Header: hdr(loop.KindDatasetWrite, "c1", "t1"), ArtifactID: "ds", Rows: []map[string]any{{"a": 1.0}, {"a": 2.0}}, Index: 0, Name: "rows", Schema: schema},
		{Header: hdr(loop.KindDatasetWrite, "c1", "t1"), ArtifactID: "ds", Rows: []map[string]any{{"a": 3.0}}, Index: 1, Complete: true},
	}
	arts := artifacts{}
	for i, b := range batches {
		ev, raw, ok := wire1(t, b)
		if !ok {
			t.Fatalf("batch %d not mapped", i)
		}
		au := ev.(*a2a.TaskArtifactUpdateEvent)
		if au.Append != (i > 0) || au.LastChunk != b.Complete {
			t.Fatalf("batch %d: %s", i, raw)
		}
		if (i == 0) != (au.Artifact.Metadata["schema"] != nil) {
			t.Fatalf("schema belongs to the first batch only: %s", raw)
		}
		arts.apply(t, ev)
		ev3, raw3, _ := wire03(t, b)
		au3 := ev3.(*a2a03.TaskArtifactUpdateEvent)
		if au3.Append != (i > 0) || au3.LastChunk != b.Complete || len(au3.Artifact.Parts[0].(a2a03.DataPart).Data["rows"].([]any)) != len(b.Rows) {
			t.Fatalf("0.3 batch %d: %s", i, raw3)
		}
	}
	var rows []any
	for _, p := range arts["ds"] {
		rows = append(rows, p.Data().(map[string]any)["rows"].([]any)...)
	}
	if len(rows) != 3 || rows[2].(map[string]any)["a"] != 3.0 {
		t.Fatalf("rebuilt rows %v", rows)
	}
}

func TestToA2AToolProgress(t *testing.T) {
	e := &loop.ToolProgress{Header: hdr(loop.KindToolProgress, "c1", "t1"), ToolCallID: "call1", Progress: 0.5, Message: "halfway"}
	ev, raw, ok := wire1(t, e)
	su, isSU := ev.(*a2a.TaskStatusUpdateEvent)
	if !ok || !isSU || su.Status.State != a2a.TaskStateWorking || su.Status.Message.Parts[0].Text() != "halfway" || su.Metadata["toolCallId"] != "call1" || su.Metadata["progress"] != 0.5 {
		t.Fatalf("1.0 tool-progress: %s", raw)
	}
	ev3, raw3, ok := wire03(t, e)
	if su3 := ev3.(*a2a03.TaskStatusUpdateEvent); !ok || su3.Final || su3.Status.State != a2a03.TaskStateWorking {
		t.Fatalf("0.3 tool-progress: %s", raw3)
	}
	if _, ok := sse.ToA2A(&loop.ToolProgress{Header: hdr(loop.KindToolProgress, "c1", "t1"), Progress: 0.2}); ok {
		t.Fatal("progress without a message must not be mapped")
	}
}

// A warning (a retried model call, an answer cut off) is a working status
// whose message says it, on both protocol versions.
func TestToA2AWarning(t *testing.T) {
	e := &loop.Warning{Header: hdr(loop.KindWarning, "c1", "t1"), Code: loop.WarningModelRetry, Message: "the model call failed; trying again"}
	ev, raw, ok := wire1(t, e)
	su, isSU := ev.(*a2a.TaskStatusUpdateEvent)
	if !ok || !isSU || su.Status.State != a2a.TaskStateWorking || su.Status.Message.Parts[0].Text() != e.Message || su.Metadata["warning"] != "model_retry" {
		t.Fatalf("1.0 warning: %s", raw)
	}
	ev3, raw3, ok := wire03(t, e)
	if su3, _ := ev3.(*a2a03.TaskStatusUpdateEvent); !ok || su3 == nil || su3.Final || su3.Status.State != a2a03.TaskStateWorking || su3.Metadata["warning"] != "model_retry" {
		t.Fatalf("0.3 warning: %s", raw3)
	}
}

// Every kind of the protocol is either mapped (tested above) or not mapped
// by decision; a new kind fails here until someone decides.
func TestToA2AEveryKindDecided(t *testing.T) {
	mapped := map[loop.EventKind]bool{
		loop.KindTaskCreated: true, loop.KindTaskStatus: true, loop.KindContentDelta: true, loop.KindContentComplete: true,
		loop.KindFileWrite: true, loop.KindDataWrite: true, loop.KindDatasetWrite: true, loop.KindToolProgress: true,
		loop.KindWarning: true, loop.KindToolStart: true, loop.KindToolComplete: true, loop.KindSubtaskCreated: true,
		loop.KindThoughtStream: true,
	}
	notMapped := map[loop.EventKind]bool{
		loop.KindTaskComplete:  true,
		loop.KindInputRequired: true, loop.KindInputReceived: true, loop.KindAuthRequired: true, loop.KindAuthCompleted: true,
	}
	for _, k := range loop.AllKinds() {
		e := loop.NewEvent(k)
		h := e.Head()
		h.ContextID, h.TaskID, h.Timestamp = "c1", "t1", time.Unix(1, 0)
		switch v := e.(type) {
		case *loop.TaskStatusEvent:
			v.Status = loop.TaskWorking
		case *loop.ContentComplete:
			v.Content = "x"
		case *loop.ToolProgress:
			v.Message = "x"
		case *loop.Warning:
			v.Message = "x"
		case *loop.ThoughtStream:
			v.Content = "x"
		}
		ev1, ok1 := sse.ToA2A(e)
		ev03, ok03 := sse.ToA2A03(e)
		if ok1 && ok03 {
			// Both versions say the same: the 0.3 event read back as 1.0
			// is the 1.0 event.
			back, err := a2av0.ToV1Event(ev03)
			b1, _ := json.Marshal(a2a.StreamResponse{Event: ev1})
			b3, _ := json.Marshal(a2a.StreamResponse{Event: back})
			if err != nil || !bytes.Equal(b1, b3) {
				t.Errorf("%s: 1.0 %s, 0.3 read back as 1.0 %s (%v)", k, b1, b3, err)
			}
		}
		switch {
		case k.Internal():
			if ok1 || ok03 {
				t.Errorf("internal kind %s mapped to A2A", k)
			}
		case mapped[k]:
			if !ok1 || !ok03 {
				t.Errorf("%s should map (1.0 %v, 0.3 %v)", k, ok1, ok03)
			}
		case notMapped[k]:
			if ok1 || ok03 {
				t.Errorf("%s should not map (1.0 %v, 0.3 %v)", k, ok1, ok03)
			}
		default:
			t.Errorf("no mapping decision for kind %s", k)
		}
	}
	if _, ok := sse.ToA2A(nil); ok {
		t.Error("nil event mapped")
	}
}

func TestA2AEncoderFrames(t *testing.T) {
	status := &loop.TaskStatusEvent{Header: hdr(loop.KindTaskStatus, "c1", "t1"), Status: loop.TaskCompleted}
	data, err := loop.EncodeEvent(status)
	if err != nil {
		t.Fatal(err)
	}
	it := sse.Item{ID: 9, Kind: loop.KindTaskStatus, TaskID: "t1", Data: data}

	f, ok, err := sse.A2AEncoder{RequestID: json.RawMessage(`"req-1"`)}.Encode(it)
	if err != nil || !ok || !f.Last || f.Event != "" {
		t.Fatalf("1.0 frame %+v ok=%v err=%v", f, ok, err)
	}
	var resp struct {
		JSONRPC string              `json:"jsonrpc"`
		ID      string              `json:"id"`
		Result  a2a.StreamResponse  `json:"result"`
		Error   *struct{ Code int } `json:"error"`
	}
	if err := json.Unmarshal(f.Data, &resp); err != nil || resp.JSONRPC != "2.0" || resp.ID != "req-1" || resp.Error != nil {
		t.Fatalf("1.0 envelope %s: %v", f.Data, err)
	}
	if su, ok := resp.Result.Event.(*a2a.TaskStatusUpdateEvent); !ok || su.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("1.0 result %s", f.Data)
	}

	f3, ok, err := sse.A2A03Encoder{RequestID: 42}.Encode(it)
	if err != nil || !ok || !f3.Last {
		t.Fatalf("0.3 frame %+v ok=%v err=%v", f3, ok, err)
	}
	var resp3 struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(f3.Data, &resp3); err != nil || resp3.ID != 42 {
		t.Fatalf("0.3 envelope %s: %v", f3.Data, err)
	}
	ev3, err := a2a03.UnmarshalEventJSON(resp3.Result)
	if su, ok := ev3.(*a2a03.TaskStatusUpdateEvent); err != nil || !ok || !su.Final {
		t.Fatalf("0.3 result %s: %v", resp3.Result, err)
	}

	// Not carried by A2A: skipped, not an error.
	done, _ := loop.EncodeEvent(&loop.TaskComplete{Header: hdr(loop.KindTaskComplete, "c1", "t1"), Status: loop.TaskCompleted})
	if _, ok, err := (sse.A2AEncoder{}).Encode(sse.Item{ID: 1, Kind: loop.KindTaskComplete, Data: done}); ok || err != nil {
		t.Fatalf("task-complete: ok=%v err=%v", ok, err)
	}
	// A corrupt record is an error that says so.
	if _, _, err := (sse.A2AEncoder{}).Encode(sse.Item{ID: 1, Kind: loop.KindToolStart, Data: []byte("{")}); err == nil {
		t.Fatal("a corrupt record must be an error")
	}
	// Looopy frames carry the event as stored, named by its kind.
	lf, ok, _ := sse.LooopyEncoder{}.Encode(it)
	if !ok || lf.Event != "task-status" || !bytes.Equal(lf.Data, data) || lf.Last {
		t.Fatalf("looopy frame %+v", lf)
	}
}

func TestEncoderWrapAndRequestIDs(t *testing.T) {
	task := &a2a.Task{ID: "t1", ContextID: "c1", Status: a2a.TaskStatus{State: a2a.TaskStateWorking}}
	data, err := sse.A2AEncoder{RequestID: "abc"}.Wrap(task)
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		ID     string             `json:"id"`
		Result a2a.StreamResponse `json:"result"`
	}
	if err := json.Unmarshal(data, &resp); err != nil || resp.ID != "abc" {
		t.Fatalf("wrapped snapshot %s: %v", data, err)
	}
	if got, ok := resp.Result.Event.(*a2a.Task); !ok || got.Status.State != a2a.TaskStateWorking {
		t.Fatalf("wrapped snapshot %s", data)
	}
	data03, err := sse.A2A03Encoder{RequestID: 5}.Wrap(&a2a03.Task{ID: "t1", ContextID: "c1", Status: a2a03.TaskStatus{State: a2a03.TaskStateWorking}})
	if err != nil || !strings.HasPrefix(string(data03), `{"jsonrpc":"2.0","id":5,"result":{"kind":"task"`) {
		t.Fatalf("0.3 wrapped snapshot %s: %v", data03, err)
	}
	for _, id := range []any{nil, 7, "x", json.RawMessage(`"raw"`), 3.5} {
		d, err := sse.A2AEncoder{RequestID: id}.Wrap(task)
		if err != nil {
			t.Fatalf("id %v: %v", id, err)
		}
		var env map[string]any
		if err := json.Unmarshal(d, &env); err != nil {
			t.Fatalf("id %v: invalid JSON %s", id, d)
		}
	}
	if _, err := (sse.A2AEncoder{RequestID: json.RawMessage(`{bad`)}).Wrap(task); err == nil {
		t.Fatal("an invalid raw id must be an error")
	}
}

func TestToA2AFailedArtifacts(t *testing.T) {
	file := &loop.FileWrite{Header: hdr(loop.KindFileWrite, "c1", "t1"), ArtifactID: "f9", Index: 3, Complete: true, Error: "source went away"}
	ev, ok := sse.ToA2A(file)
	if !ok {
		t.Fatal("failed file not mapped")
	}
	up := ev.(*a2a.TaskArtifactUpdateEvent)
	if !up.Append || !up.LastChunk || up.Artifact.Metadata["error"] != "source went away" || up.Artifact.Metadata["status"] != "failed" {
		t.Fatalf("failed file update %+v (metadata %v)", up, up.Artifact.Metadata)
	}
	rows := &loop.DatasetWrite{Header: hdr(loop.KindDatasetWrite, "c1", "t1"), ArtifactID: "d9", Rows: []map[string]any{}, Index: 2, Complete: true, Error: "bad feed"}
	ev, ok = sse.ToA2A(rows)
	if up := ev.(*a2a.TaskArtifactUpdateEvent); !ok || !up.LastChunk || up.Artifact.Metadata["error"] != "bad feed" {
		t.Fatalf("failed dataset update %+v", ev)
	}
	// A data artifact keeps its last version: its failure is not an update.
	if _, ok := sse.ToA2A(&loop.DataWrite{Header: hdr(loop.KindDataWrite, "c1", "t1"), ArtifactID: "x", Error: "nope"}); ok {
		t.Fatal("a failed data artifact must not replace its last version")
	}
	if _, ok := sse.ToA2A03(&loop.DataWrite{Header: hdr(loop.KindDataWrite, "c1", "t1"), ArtifactID: "x", Error: "nope"}); ok {
		t.Fatal("0.3: a failed data artifact must not replace its last version")
	}
	ev3, ok := sse.ToA2A03(file)
	if up := ev3.(*a2a03.TaskArtifactUpdateEvent); !ok || !up.LastChunk || up.Artifact.Metadata["error"] != "source went away" {
		t.Fatalf("0.3 failed file update %+v", ev3)
	}
}

// Each model response of a turn is an artifact of its own (named
// "response"), its text sent once: the deltas, then an empty appended last
// chunk. A response that streamed nothing sends its text whole. Replayed
// through a client's replace rules, both steps' text stays.
func TestToA2AResponseTextOnce(t *testing.T) {
	h := func(k loop.EventKind) loop.Header { return hdr(k, "c1", "t1") }
	events := []loop.Event{
		&loop.ContentDelta{Header: h(loop.KindContentDelta), Delta: "Let me ", Index: 0, Iteration: 1, Response: "r-1"},
		&loop.ContentDelta{Header: h(loop.KindContentDelta), Delta: "look.", Index: 1, Iteration: 1, Response: "r-1"},
		&loop.ContentComplete{Header: h(loop.KindContentComplete), Content: "Let me look.", Iteration: 1, Response: "r-1", Deltas: 2},
		&loop.ContentDelta{Header: h(loop.KindContentDelta), Delta: "Sunny.", Index: 0, Iteration: 2, Response: "r-2"},
		&loop.ContentComplete{Header: h(loop.KindContentComplete), Content: "Sunny.", Iteration: 2, Response: "r-2", Deltas: 1},
		// a model that does not stream: the text comes only whole
		&loop.ContentComplete{Header: h(loop.KindContentComplete), Content: "Whole.", Iteration: 3, Response: "r-3"},
	}
	arts := artifacts{}
	var sent strings.Builder
	for _, e := range events {
		ev, raw, ok := wire1(t, e)
		if !ok {
			t.Fatalf("%s not mapped", e.Head().Kind)
		}
		au := ev.(*a2a.TaskArtifactUpdateEvent)
		if au.Artifact.Name != "response" || !strings.HasPrefix(string(au.Artifact.ID), "content-t1-r-") {
			t.Fatalf("artifact %s", raw)
		}
		if _, seen := arts[string(au.Artifact.ID)]; seen && !au.Append {
			t.Fatalf("a later chunk replaces the artifact: %s", raw)
		}
		sent.WriteString(au.Artifact.Parts[0].Text())
		arts.apply(t, ev)
	}
	if sent.String() != "Let me look.Sunny.Whole." {
		t.Fatalf("text sent %q, want each response's text once", sent.String())
	}
	text := func(id string) string {
		var sb strings.Builder
		for _, p := range arts[id] {
			sb.WriteString(p.Text())
		}
		return sb.String()
	}
	if text("content-t1-r-1") != "Let me look." || text("content-t1-r-2") != "Sunny." || text("content-t1-r-3") != "Whole." {
		t.Fatalf("rendered %q %q %q", text("content-t1-r-1"), text("content-t1-r-2"), text("content-t1-r-3"))
	}
	last, _, _ := wire03(t, events[2])
	if au := last.(*a2a03.TaskArtifactUpdateEvent); !au.Append || !au.LastChunk || au.Artifact.Parts[0].(a2a03.TextPart).Text != "" {
		t.Fatalf("0.3 last chunk of a streamed response: %+v", au)
	}
}

// Tool calls and sub-agents are working statuses that say what runs.
func TestToA2AActivity(t *testing.T) {
	cases := []struct {
		e    loop.Event
		text string
		md   map[string]any
	}{
		{&loop.ToolStart{Header: hdr(loop.KindToolStart, "c1", "t1"), ToolCallID: "k1", ToolName: "calc"},
			"Running calc", map[string]any{"activity": "tool-start", "toolCallId": "k1", "toolName": "calc"}},
		{&loop.ToolComplete{Header: hdr(loop.KindToolComplete, "c1", "t1"), ToolCallID: "k1", ToolName: "calc", Success: true},
			"calc done", map[string]any{"activity": "tool-complete", "toolCallId": "k1", "toolName": "calc", "success": true}},
		{&loop.ToolComplete{Header: hdr(loop.KindToolComplete, "c1", "t1"), ToolCallID: "k2", ToolName: "calc", Error: "division by zero"},
			"calc failed: division by zero", map[string]any{"activity": "tool-complete", "toolCallId": "k2", "toolName": "calc", "success": false, "error": "division by zero"}},
		{&loop.SubtaskCreated{Header: hdr(loop.KindSubtaskCreated, "c1", "t1"), SubtaskID: "s1", AgentID: "researcher"},
			"Asked researcher", map[string]any{"activity": "subtask-created", "subtaskId": "s1", "agentId": "researcher"}},
	}
	for _, c := range cases {
		ev, raw, ok := wire1(t, c.e)
		su, isSU := ev.(*a2a.TaskStatusUpdateEvent)
		if !ok || !isSU || su.Status.State != a2a.TaskStateWorking || su.Status.Message == nil || su.Status.Message.Parts[0].Text() != c.text {
			t.Fatalf("1.0 %s → %s", c.e.Head().Kind, raw)
		}
		want, _ := json.Marshal(c.md)
		got, _ := json.Marshal(su.Metadata)
		if !bytes.Equal(got, want) {
			t.Fatalf("1.0 %s metadata %s, want %s", c.e.Head().Kind, got, want)
		}
		ev3, raw3, ok := wire03(t, c.e)
		su3, isSU3 := ev3.(*a2a03.TaskStatusUpdateEvent)
		if !ok || !isSU3 || su3.Final || su3.Status.State != a2a03.TaskStateWorking || su3.Status.Message.Parts[0].(a2a03.TextPart).Text != c.text {
			t.Fatalf("0.3 %s → %s", c.e.Head().Kind, raw3)
		}
	}
}
