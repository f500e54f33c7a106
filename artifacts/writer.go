package artifacts

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// Writer is the event-emitting layer over a Store: every change it makes
// is announced through emit with the loop event that lets a client rebuild
// the artifact from the stream alone. It writes for one Scope (a task of a
// context, a principal) and refuses to touch artifacts of another.
//
// The events, per kind:
//
//   - file-write per chunk, Index = the chunk's index, Complete on the
//     last; Name and MimeType on index 0; a binary chunk travels as base64
//     with Encoding "base64". Completing without a chunk sends an empty
//     chunk with Complete. Replacing chunk i sends the whole file again
//     from index 0: a file-write with index 0 always starts the file over
//     (in A2A terms, index 0 is append=false and every other index is
//     append=true; Complete is lastChunk).
//   - data-write per write with the whole object and its Version (every
//     data-write replaces the object: append=false, lastChunk=true).
//     Completing a data artifact that was never written sends {} with
//     version 0.
//   - dataset-write per batch of rows, Index = the batch's index, Complete
//     on the last; Name, Description and Schema on index 0. The rows are
//     as stored (NormalizeRows): encoding each with AppendRowJSON gives the
//     stored JSON lines. Completing without a batch sends an empty batch.
//
// Events of one artifact are emitted in the order of its writes, even when
// several goroutines (or several Writers over the same *DB) write to it at
// once: the write and its event happen under the artifact's ordering lock.
// emit must not block for long.
type Writer struct {
	store Store
	scope Scope
	emit  func(loop.Event)
	lock  func(id string) func()
	now   func() time.Time

	mu    sync.Mutex
	owned map[string]bool // artifacts checked to belong to scope (that never changes)
}

// NewWriter returns a Writer for scope. emit nil discards events (the
// plain store behaviour, for benchmarks and back-office use).
func NewWriter(s Store, scope Scope, emit func(loop.Event)) *Writer {
	w := &Writer{store: s, scope: scope, emit: emit, now: time.Now}
	if w.emit == nil {
		w.emit = func(loop.Event) {}
	}
	if d, ok := s.(*DB); ok {
		w.lock = d.orderLock
	} else {
		var mu sync.Mutex
		w.lock = func(string) func() { mu.Lock(); return mu.Unlock }
	}
	return w
}

// Scope returns the scope the writer writes for.
func (w *Writer) Scope() Scope { return w.scope }

func (w *Writer) header(kind loop.EventKind, info Info) loop.Header {
	return loop.Header{Kind: kind, ContextID: info.ContextID, TaskID: info.TaskID, Timestamp: w.now().UTC()}
}

// Create makes an artifact in the writer's scope (spec's task, context and
// owner are set from it). Creation itself sends no event: the first write
// (or completion) introduces the artifact with its name and type.
func (w *Writer) Create(ctx context.Context, spec Spec) (Info, error) {
	spec.TaskID, spec.ContextID, spec.Owner = w.scope.TaskID, w.scope.ContextID, w.scope.Owner
	info, err := w.store.Create(ctx, spec)
	if err != nil {
		return Info{}, err
	}
	w.mu.Lock()
	if w.owned == nil {
		w.owned = map[string]bool{}
	}
	w.owned[info.ID] = true
	w.mu.Unlock()
	return info, nil
}

// mine checks that an artifact belongs to the scope. An artifact's task,
// context and owner never change, so a positive answer is remembered.
func (w *Writer) mine(ctx context.Context, id string) (struct{}, error) {
	w.mu.Lock()
	ok := w.owned[id]
	w.mu.Unlock()
	if ok {
		return struct{}{}, nil
	}
	info, err := w.store.Get(ctx, id)
	if err != nil {
		return struct{}{}, err
	}
	if err := w.scope.Check(info); err != nil {
		return struct{}{}, err
	}
	w.mu.Lock()
	if w.owned == nil {
		w.owned = map[string]bool{}
	}
	w.owned[id] = true
	w.mu.Unlock()
	return struct{}{}, nil
}

// AppendChunk appends a chunk to a file artifact and sends its file-write.
func (w *Writer) AppendChunk(ctx context.Context, id string, data []byte, last bool) (Info, error) {
	defer w.lock(id)()
	if _, err := w.mine(ctx, id); err != nil {
		return Info{}, fmt.Errorf("append to artifact %q: %w", id, err)
	}
	info, err := w.store.AppendChunk(ctx, id, data, last)
	if err != nil {
		w.failedWrite(err)
		return Info{}, err
	}
	index := info.Parts - 1
	if len(data) == 0 {
		index = info.Parts // a completion without a chunk
	}
	w.emitChunk(info, index, data, last)
	return info, nil
}

// AppendText appends text to a file artifact.
func (w *Writer) AppendText(ctx context.Context, id string, text string, last bool) (Info, error) {
	return w.AppendChunk(ctx, id, []byte(text), last)
}

func (w *Writer) emitChunk(info Info, index int, data []byte, complete bool) {
	ev := &loop.FileWrite{Header: w.header(loop.KindFileWrite, info), ArtifactID: info.ID, Index: index, Complete: complete}
	if info.Binary {
		ev.Data, ev.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	} else {
		ev.Data = string(data)
	}
	if index == 0 {
		ev.Name, ev.MimeType = info.Name, info.MimeType
	}
	w.emit(ev)
}

// ReplaceChunk swaps chunk index of a building file artifact and sends the
// file again from index 0, one chunk per event, read back from the store
// one chunk at a time.
func (w *Writer) ReplaceChunk(ctx context.Context, id string, index int, data []byte) (Info, error) {
	defer w.lock(id)()
	if _, err := w.mine(ctx, id); err != nil {
		return Info{}, fmt.Errorf("replace part %d of artifact %q: %w", index, id, err)
	}
	info, err := w.store.ReplaceChunk(ctx, id, index, data)
	if err != nil {
		w.failedWrite(err)
		return Info{}, err
	}
	for i := range info.Parts {
		rc, err := w.store.OpenPart(ctx, id, i)
		if err != nil {
			return info, fmt.Errorf("replace part %d of artifact %q: resend part %d: %w", index, id, i, err)
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			return info, fmt.Errorf("replace part %d of artifact %q: resend part %d: %w", index, id, i, err)
		}
		w.emitChunk(info, i, b, false)
	}
	return info, nil
}

// WriteData replaces a data artifact's object and sends its data-write;
// complete also ends the artifact.
func (w *Writer) WriteData(ctx context.Context, id string, data map[string]any, complete bool) (Info, error) {
	defer w.lock(id)()
	return w.writeData(ctx, id, data, complete)
}

func (w *Writer) writeData(ctx context.Context, id string, data map[string]any, complete bool) (Info, error) {
	if _, err := w.mine(ctx, id); err != nil {
		return Info{}, fmt.Errorf("write data artifact %q: %w", id, err)
	}
	canon, _, err := CanonicalData(data)
	if err != nil {
		return Info{}, fmt.Errorf("write data artifact %q: %w", id, err)
	}
	info, err := w.store.WriteData(ctx, id, canon)
	if err != nil {
		w.failedWrite(err)
		return Info{}, err
	}
	if complete {
		if info, err = w.store.Complete(ctx, id); err != nil {
			return Info{}, err
		}
	}
	w.emitData(info, canon, info.Version)
	return info, nil
}

func (w *Writer) emitData(info Info, data map[string]any, version int) {
	w.emit(&loop.DataWrite{Header: w.header(loop.KindDataWrite, info), ArtifactID: info.ID, Data: data,
		Version: version, Name: info.Name, Description: info.Description})
}

// MergeData sets the keys of patch in a data artifact's object (a shallow
// merge: a key's value is replaced whole) and writes the result as the
// next version.
func (w *Writer) MergeData(ctx context.Context, id string, patch map[string]any, complete bool) (Info, error) {
	defer w.lock(id)()
	if _, err := w.mine(ctx, id); err != nil {
		return Info{}, fmt.Errorf("merge into data artifact %q: %w", id, err)
	}
	cur, err := ReadData(ctx, w.store, id)
	if err != nil {
		return Info{}, fmt.Errorf("merge into data artifact %q: %w", id, err)
	}
	maps.Copy(cur, patch)
	return w.writeData(ctx, id, cur, complete)
}

// ReadData returns a data artifact's current object.
func ReadData(ctx context.Context, s Reader, id string) (map[string]any, error) {
	rc, info, err := s.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if info.Kind != KindData {
		return nil, fmt.Errorf("read data of artifact %q: %w: it is a %s", id, ErrWrongKind, info.Kind)
	}
	var m map[string]any
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		return nil, fmt.Errorf("read data of artifact %q: %w", id, err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// AppendRows appends a batch of rows to a dataset and sends its
// dataset-write. A row that does not match the schema refuses the whole
// batch with a *RowError and sends nothing.
func (w *Writer) AppendRows(ctx context.Context, id string, rows []Row, last bool) (Info, error) {
	defer w.lock(id)()
	if _, err := w.mine(ctx, id); err != nil {
		return Info{}, fmt.Errorf("append rows to artifact %q: %w", id, err)
	}
	info, norm, err := w.store.AppendRows(ctx, id, rows, last)
	if err != nil {
		w.failedWrite(err)
		return Info{}, err
	}
	index := info.Parts - 1
	if len(rows) == 0 {
		index = info.Parts
	}
	w.emitRows(info, index, norm, last)
	return info, nil
}

func (w *Writer) emitRows(info Info, index int, rows []Row, complete bool) {
	if rows == nil {
		rows = []Row{}
	}
	ev := &loop.DatasetWrite{Header: w.header(loop.KindDatasetWrite, info), ArtifactID: info.ID, Rows: rows, Index: index, Complete: complete}
	if index == 0 {
		ev.Name, ev.Description, ev.Schema = info.Name, info.Description, info.Schema
	}
	w.emit(ev)
}

// Complete ends a building artifact and sends the event that tells the
// client it is whole (see Writer).
func (w *Writer) Complete(ctx context.Context, id string) (Info, error) {
	defer w.lock(id)()
	if _, err := w.mine(ctx, id); err != nil {
		return Info{}, fmt.Errorf("complete artifact %q: %w", id, err)
	}
	info, err := w.store.Complete(ctx, id)
	if err != nil {
		return Info{}, err
	}
	switch info.Kind {
	case KindFile:
		w.emitChunk(info, info.Parts, nil, true)
	case KindDataset:
		w.emitRows(info, info.Parts, nil, true)
	case KindData:
		if info.Parts == 0 {
			w.emitData(info, map[string]any{}, 0)
		}
	}
	return info, nil
}

// Fail ends a building artifact as failed and sends the event that says so:
// for a file or dataset a last, empty chunk carrying the error; for data a
// data-write with the error and no object (its last version stands).
func (w *Writer) Fail(ctx context.Context, id string, reason string) (Info, error) {
	defer w.lock(id)()
	if _, err := w.mine(ctx, id); err != nil {
		return Info{}, fmt.Errorf("fail artifact %q: %w", id, err)
	}
	info, err := w.store.Fail(ctx, id, reason)
	if err != nil {
		return Info{}, err
	}
	w.emitFail(info, reason)
	return info, nil
}

// failedWrite sends the end of an artifact that a write the storage
// refused or failed left failed (*WriteFailedError), as Fail does.
func (w *Writer) failedWrite(err error) {
	var wf *WriteFailedError
	if errors.As(err, &wf) {
		w.emitFail(wf.Info, wf.Info.Error)
	}
}

// emitFail sends the event that ends a failed artifact: for a file or
// dataset a last, empty chunk carrying the error; for data a data-write
// with the error and no object (its last version stands).
func (w *Writer) emitFail(info Info, reason string) {
	switch info.Kind {
	case KindFile:
		w.emit(&loop.FileWrite{Header: w.header(loop.KindFileWrite, info), ArtifactID: info.ID,
			Index: info.Parts, Complete: true, Error: reason})
	case KindDataset:
		w.emit(&loop.DatasetWrite{Header: w.header(loop.KindDatasetWrite, info), ArtifactID: info.ID,
			Rows: []map[string]any{}, Index: info.Parts, Complete: true, Error: reason})
	case KindData:
		w.emit(&loop.DataWrite{Header: w.header(loop.KindDataWrite, info), ArtifactID: info.ID,
			Version: info.Version, Complete: true, Error: reason})
	}
}
