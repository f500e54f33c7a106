package artifacts

import (
	"errors"
	"fmt"

	"github.com/looopy-go/looopy/loop"
)

// Sentinel errors. Match them with errors.Is. ErrNotFound matches
// loop.ErrNotFound and ErrInvalid matches loop.ErrInvalid, so the host's
// error table needs no entry of its own for them.
var (
	// ErrNotFound: no artifact with that id (or it has expired).
	ErrNotFound = fmt.Errorf("artifact %w", loop.ErrNotFound)
	// ErrInvalid: a request that can never succeed (bad id, empty name,
	// unknown column type, text that is not UTF-8, ...).
	ErrInvalid = fmt.Errorf("artifact: %w", loop.ErrInvalid)
	// ErrCompleted: the artifact is complete; nothing more can be written.
	ErrCompleted = errors.New("artifact is complete")
	// ErrFailed: the artifact was marked failed; nothing more can be written.
	ErrFailed = errors.New("artifact has failed")
	// ErrWrongKind: the operation does not apply to this kind of artifact
	// (rows appended to a file, a chunk to a dataset, ...).
	ErrWrongKind = errors.New("operation does not apply to this kind of artifact")
	// ErrPartRange: a part index outside the parts the artifact has.
	ErrPartRange = errors.New("part index out of range")
	// ErrSchemaMismatch: a dataset row does not match the schema. The
	// error is a *RowError naming the row and column.
	ErrSchemaMismatch = errors.New("row does not match the dataset schema")
	// ErrForeign: the artifact belongs to another task, context or owner.
	// An error matching it matches ErrNotFound too and reads the same.
	ErrForeign = errors.New("artifact belongs to another task or context")
	// ErrTooLarge: a part larger than Config.MaxPartSize.
	ErrTooLarge = errors.New("artifact part too large")
)

// RowError names the dataset row and column that did not match the schema.
// It matches ErrSchemaMismatch.
type RowError struct {
	Row    int    // index of the row in the batch, from 0
	Offset int64  // rows the dataset held before the batch: Offset+Row is the row's index in the dataset
	Column string // column name ("" when the row itself is not an object)
	Reason string
}

func (e *RowError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("row %d (dataset row %d): %s", e.Row, e.Offset+int64(e.Row), e.Reason)
	}
	return fmt.Sprintf("row %d (dataset row %d): column %q: %s", e.Row, e.Offset+int64(e.Row), e.Column, e.Reason)
}

// Is makes errors.Is(err, ErrSchemaMismatch) true.
func (e *RowError) Is(target error) bool { return target == ErrSchemaMismatch }

// StateError reports a write to an artifact that is no longer building. It
// matches ErrCompleted or ErrFailed.
type StateError struct {
	ID     string
	Status Status
}

func (e *StateError) Error() string {
	return fmt.Sprintf("artifact %q is %s: nothing more can be written to it", e.ID, e.Status)
}

// Is makes errors.Is match ErrCompleted or ErrFailed by the status.
func (e *StateError) Is(target error) bool {
	return (target == ErrCompleted && e.Status == StatusComplete) ||
		(target == ErrFailed && e.Status == StatusFailed)
}

// WriteFailedError reports a write the storage refused or failed (a full
// disk, a blob store's error): the artifact it was for is failed now, with
// the reason, and nothing of the write is kept. It unwraps to the
// storage's error (store.ErrNoSpace for a full disk) and matches
// ErrFailed.
type WriteFailedError struct {
	Info Info // the artifact, failed
	Err  error
}

func (e *WriteFailedError) Error() string {
	return fmt.Sprintf("artifact %q failed: %v", e.Info.ID, e.Err)
}

func (e *WriteFailedError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrFailed) true.
func (e *WriteFailedError) Is(target error) bool { return target == ErrFailed }

// storageError marks an error of the storage itself (a write refused by
// Config.Writable, a blob not written, a record not committed), as
// opposed to a request the store refused.
type storageError struct{ err error }

func (e *storageError) Error() string { return e.err.Error() }
func (e *storageError) Unwrap() error { return e.err }

func notFound(id string) error { return fmt.Errorf("%w: %q", ErrNotFound, id) }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
