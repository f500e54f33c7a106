package host

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/errordetails"

	"github.com/looopy-go/looopy/host/taskrt"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/sse"
	"github.com/looopy-go/looopy/store"
)

// Errors of the host itself. Each is in the table below.
var (
	// ErrBodyTooLarge: a request body over Limits.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrUnauthenticated: no or an unknown credential.
	ErrUnauthenticated = a2a.ErrUnauthenticated
	// ErrForbidden: a known credential without the right to do this.
	ErrForbidden = a2a.ErrUnauthorized
	// ErrShuttingDown: the host no longer starts turns.
	ErrShuttingDown = taskrt.ErrShuttingDown
	// ErrConversationDeleted ends an event stream whose conversation was
	// deleted while it was open (DELETE /admin/conversations/{contextId},
	// or its expiry): nothing more of it will come.
	ErrConversationDeleted = errors.New("the conversation was deleted; no more events will come")
	// ErrDataDirInUse: the data folder's database is open in another
	// process (or another host of this one).
	ErrDataDirInUse = errors.New("is in use by another process")
)

// errorCode is one row of the table: what an error is called on the wire.
type errorCode struct {
	err    error  // matched with errors.Is, in table order
	code   int    // JSON-RPC error code
	status int    // HTTP status on the non-JSON-RPC routes
	reason string // ErrorInfo reason (A2A 1.0 error.data)
}

// errorTable maps Go errors to JSON-RPC codes and HTTP statuses: the one
// place where that mapping is decided. The first row that matches wins, so
// the more specific errors come first.
var errorTable = []errorCode{
	{a2a.ErrParseError, -32700, http.StatusBadRequest, "PARSE_ERROR"},
	{ErrBodyTooLarge, -32600, http.StatusRequestEntityTooLarge, "INVALID_REQUEST"},
	{ErrForeignOrigin, -32600, http.StatusForbidden, "FOREIGN_ORIGIN"},
	{ErrNotJSON, -32600, http.StatusUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE"},
	{a2a.ErrInvalidRequest, -32600, http.StatusBadRequest, "INVALID_REQUEST"},
	{a2a.ErrMethodNotFound, -32601, http.StatusNotFound, "METHOD_NOT_FOUND"},
	{a2a.ErrInvalidParams, -32602, http.StatusBadRequest, "INVALID_PARAMS"},
	{taskrt.ErrTaskEnded, -32602, http.StatusConflict, "TASK_ENDED"},
	{loop.ErrInvalid, -32602, http.StatusBadRequest, "INVALID_PARAMS"},
	{sse.ErrAhead, -32602, http.StatusBadRequest, "LAST_EVENT_ID_AHEAD"},
	{ErrConversationDeleted, -32001, http.StatusNotFound, "CONVERSATION_DELETED"},
	{sse.ErrExpired, -32602, http.StatusGone, "LAST_EVENT_ID_EXPIRED"},
	{a2a.ErrTaskNotFound, -32001, http.StatusNotFound, "TASK_NOT_FOUND"},
	{loop.ErrNotFound, -32001, http.StatusNotFound, "TASK_NOT_FOUND"},
	{a2a.ErrTaskNotCancelable, -32002, http.StatusConflict, "TASK_NOT_CANCELABLE"},
	{taskrt.ErrNotCancelable, -32002, http.StatusConflict, "TASK_NOT_CANCELABLE"},
	{taskrt.ErrConversationBusy, -32000, http.StatusConflict, "CONVERSATION_BUSY"},
	{a2a.ErrPushNotificationNotSupported, -32003, http.StatusBadRequest, "PUSH_NOTIFICATION_NOT_SUPPORTED"},
	{a2a.ErrUnsupportedOperation, -32004, http.StatusBadRequest, "UNSUPPORTED_OPERATION"},
	{a2a.ErrUnsupportedContentType, -32005, http.StatusUnsupportedMediaType, "CONTENT_TYPE_NOT_SUPPORTED"},
	{a2a.ErrExtendedCardNotConfigured, -32007, http.StatusNotFound, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"},
	{a2a.ErrVersionNotSupported, -32009, http.StatusBadRequest, "VERSION_NOT_SUPPORTED"},
	{loop.ErrBusy, -32000, http.StatusConflict, loop.ReasonBusy},
	{loop.ErrNotReady, -32000, http.StatusServiceUnavailable, "AGENT_NOT_READY"},
	{ErrShuttingDown, -32000, http.StatusServiceUnavailable, "SHUTTING_DOWN"},
	{taskrt.ErrQuota, -32000, http.StatusTooManyRequests, "QUOTA_EXCEEDED"},
	{taskrt.ErrHostBusy, -32000, http.StatusTooManyRequests, "HOST_BUSY"},
	{ErrTooManyStreams, -32000, http.StatusTooManyRequests, "TOO_MANY_STREAMS"},
	{store.ErrNoSpace, -32000, http.StatusInsufficientStorage, "STORAGE_FULL"},
	{a2a.ErrUnauthenticated, -31401, http.StatusUnauthorized, "UNAUTHENTICATED"},
	{a2a.ErrUnauthorized, -31403, http.StatusForbidden, "UNAUTHORIZED"},
	{context.DeadlineExceeded, -32000, http.StatusGatewayTimeout, "TIMEOUT"},
}

// RetryAfterSeconds is the Retry-After (seconds) of a turn refused because
// its principal or the host runs as many turns as allowed: a running turn
// may end any moment, and a refusal costs the host next to nothing.
const RetryAfterSeconds = 1

// retryable reports whether err refuses a turn for now only: its answer
// carries Retry-After (and, in A2A 1.0, a google.rpc.RetryInfo detail).
func retryable(err error) bool {
	return errors.Is(err, taskrt.ErrQuota) || errors.Is(err, taskrt.ErrHostBusy)
}

// setRetryAfter adds Retry-After to the answer of a retryable refusal.
func setRetryAfter(c interface{ Set(key, val string) }, err error) {
	if err != nil && retryable(err) {
		c.Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
}

// internalRow is what an error no row matches becomes.
var internalRow = errorCode{a2a.ErrInternalError, -32603, http.StatusInternalServerError, "INTERNAL_ERROR"}

// lookupError returns the row of err.
func lookupError(err error) errorCode {
	for _, row := range errorTable {
		if errors.Is(err, row.err) {
			return row
		}
	}
	return internalRow
}

// HTTPStatus is the HTTP status of err on the plain HTTP routes.
func HTTPStatus(err error) int { return lookupError(err).status }

// RPCCode is the JSON-RPC error code of err.
func RPCCode(err error) int { return lookupError(err).code }

// rpcError is a JSON-RPC error object. Data is A2A 1.0's array of typed
// details, or A2A 0.3's object (or nothing): version-specific.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// errorMessage is the text a client sees. Internal errors are not spelled
// out to clients: their text may name files or keys of the host.
func errorMessage(row errorCode, err error) string {
	if row.code == internalRow.code {
		return "internal error"
	}
	return err.Error()
}

// toRPCError10 is the A2A 1.0 form: error.data is an array of typed
// objects, always with a google.rpc.ErrorInfo naming the reason, also in
// its metadata ("reason"): the A2A client SDK drops an ErrorInfo's reason
// and keeps its metadata, and a client (host/remote) decides by it.
func toRPCError10(err error) *rpcError {
	row := lookupError(err)
	var data []*errordetails.Typed
	var ae *a2a.Error
	if errors.As(err, &ae) && len(ae.Details) > 0 {
		data = append(data, errordetails.NewFromStruct(ae.Details))
	}
	data = append(data, errordetails.NewErrorInfo(row.reason, a2a.ProtocolDomain, map[string]string{"reason": row.reason}))
	if retryable(err) {
		data = append(data, errordetails.NewTyped("type.googleapis.com/google.rpc.RetryInfo",
			map[string]any{"retryDelay": strconv.Itoa(RetryAfterSeconds) + "s"}))
	}
	return &rpcError{Code: row.code, Message: errorMessage(row, err), Data: data}
}

// toRPCError03 is the A2A 0.3 form: error.data an object, or nothing.
func toRPCError03(err error) *rpcError {
	row := lookupError(err)
	e := &rpcError{Code: row.code, Message: errorMessage(row, err)}
	if row.code == -32000 {
		// Several reasons share -32000 and 0.3 has no typed details a
		// client SDK keeps: the reason leads the message, a stable marker
		// a client can tell them apart by (remote.IsBusy).
		e.Message = row.reason + ": " + e.Message
	}
	var ae *a2a.Error
	if errors.As(err, &ae) && len(ae.Details) > 0 {
		e.Data = ae.Details
	}
	return e
}
