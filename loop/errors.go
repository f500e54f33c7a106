package loop

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ReasonBusy is the reason a host gives ErrBusy in an A2A error (the
// ErrorInfo's reason, and its metadata's "reason" key, which the A2A
// client SDK keeps): a client tells busy apart from other refusals by it,
// never by the message.
const ReasonBusy = "CONTEXT_BUSY"

// Sentinel errors. Match them with errors.Is.
var (
	// ErrNotFound: no such context, task, message or record.
	ErrNotFound = errors.New("not found")
	// ErrBusy: the agent already runs a turn for this context. On the
	// wire (A2A) it is the reason ReasonBusy.
	ErrBusy = errors.New("agent is busy with another turn")
	// ErrNotReady: the agent is not in a state that takes turns.
	ErrNotReady = errors.New("agent is not ready")
	// ErrToolConflict: two toolsets offer a tool of the same name.
	ErrToolConflict = errors.New("tool name offered twice")
	// ErrCorrupt: a stored record could not be decoded.
	ErrCorrupt = errors.New("corrupt record")
	// ErrInvalid: a request or configuration is not valid.
	ErrInvalid = errors.New("invalid")
	// ErrConflict: a versioned write lost a race: the stored record is not
	// the version the writer read (another writer, maybe in another
	// process, changed it first). Read it again and decide anew.
	ErrConflict = errors.New("concurrent modification")
	// ErrLeaseHeld: another owner holds a lease that has not lapsed.
	ErrLeaseHeld = errors.New("lease held by another owner")
	// ErrLeaseLost: the lease is no longer held by its owner (it lapsed and
	// was taken over, or was released): the owner must stop the work.
	ErrLeaseLost = errors.New("lease lost")
)

// CorruptError names the key of a stored record that could not be decoded.
// It matches ErrCorrupt.
type CorruptError struct {
	Key string
	Err error
}

func (e *CorruptError) Error() string { return fmt.Sprintf("corrupt record %q: %v", e.Key, e.Err) }
func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// NotFoundError names what was not found. It matches ErrNotFound.
type NotFoundError struct {
	What string // "task", "context", ...
	ID   string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %q not found", e.What, e.ID) }

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ModelError is an error from a model call. Transient ones are retried.
type ModelError struct {
	Code      string // rate_limit, server_error, timeout, invalid_request, ...
	Message   string
	Transient bool
	// RetryAfter is the wait the service asked for before a retry (0:
	// none asked); the loop waits at least that long, or does not retry
	// when it is longer than RetryPolicy.MaxRetryAfter.
	RetryAfter time.Duration
	Err        error
}

func (e *ModelError) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Code != "" {
		return "model: " + e.Code + ": " + msg
	}
	return "model: " + msg
}

func (e *ModelError) Unwrap() error { return e.Err }

// Transient reports whether err is worth retrying: a ModelError marked
// transient, or any error that says so through a Transient() bool method.
func Transient(err error) bool {
	var me *ModelError
	if errors.As(err, &me) {
		return me.Transient
	}
	var t interface{ Transient() bool }
	if errors.As(err, &t) {
		return t.Transient()
	}
	return false
}

// ErrStorageFull: the store refuses writes for want of space (its disk is
// nearly full). Stores return it (wrapped) for every write they refuse;
// a turn whose write is refused with it is suspended (see
// ReasonStorageFull), never run on with effects it cannot record.
var ErrStorageFull = errors.New("storage full")

// StopError is the cause a host gives a turn's context when it stops the
// turn itself (context.WithCancelCause, context.WithTimeoutCause): its time
// limit ran out, the host shut down. The turn ends failed, its error
// saying why, never canceled: canceled is what a client's (or a parent
// task's) cancel gives, and a client reading its task must not be told it
// cancelled what it did not.
type StopError struct {
	// Reason is the Outcome's reason (ReasonTimeout, ReasonShutdown...).
	Reason string
	// Message says what stopped the turn, for the task's status.
	Message string
	// Suspend says the host hands the turn on instead of ending it (its
	// shutdown): the turn stops where it stands and writes nothing more
	// (no tool result in the journal, no checkpoint, no end, no event),
	// so that its task is left exactly as a crash at that moment leaves
	// it, working, and resumes from its last checkpoint on the next start
	// or on another host. The Outcome says TaskWorking, Reason the
	// StopError's, Err the StopError.
	Suspend bool
}

func (e *StopError) Error() string { return e.Message }

// Suspended reports whether ctx was stopped by a StopError that suspends
// its turn (StopError.Suspend).
func Suspended(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	var se *StopError
	return errors.As(context.Cause(ctx), &se) && se.Suspend
}
