package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/looopy-go/looopy/pdk"
)

// StatusError classifies a response that is not 200: rate limits (429),
// timeouts (408), conflicts and early data (409, 425) and server errors (5xx)
// are transient and worth a retry; any other status is permanent. The message
// is the API's own error message when the body carries one.
func StatusError(status int, body []byte) *pdk.Error {
	e := &pdk.Error{Message: fmt.Sprintf("HTTP %d", status)}
	var wrapped struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(body, &wrapped) == nil && wrapped.Error != nil && wrapped.Error.Message != "" {
		e.Message += ": " + wrapped.Error.Message
	} else if text := strings.TrimSpace(string(body)); text != "" {
		e.Message += ": " + clip(text, 300)
	}
	switch {
	case status == 429:
		e.Code, e.Transient = "rate_limit", true
	case status == 408:
		e.Code, e.Transient = "timeout", true
	case status == 409 || status == 425:
		e.Code, e.Transient = "conflict", true
	case status >= 500:
		e.Code, e.Transient = "server_error", true
	case status == 401 || status == 403:
		e.Code = "unauthorized"
	case status == 404:
		e.Code = "not_found"
	case status == 400 || status == 422:
		e.Code = "bad_request"
	default:
		e.Code = fmt.Sprintf("http_%d", status)
	}
	return e
}

// apiErrorOf classifies an error object sent inside a stream.
func apiErrorOf(a *apiError) *pdk.Error {
	code := a.Type
	if s, ok := a.Code.(string); ok && s != "" {
		code = s
	}
	if code == "" {
		code = "api_error"
	}
	lc := strings.ToLower(code + " " + a.Type)
	transient := strings.Contains(lc, "rate") || strings.Contains(lc, "server") ||
		strings.Contains(lc, "overloaded") || strings.Contains(lc, "timeout") || strings.Contains(lc, "unavailable")
	msg := a.Message
	if msg == "" {
		msg = "the API reported an error without a message"
	}
	return &pdk.Error{Code: code, Message: msg, Transient: transient}
}

// TransportError classifies a failure to get any response: a refusal by the
// host's egress policy is permanent, anything else (connection refused,
// timeout, reset) is transient.
func TransportError(err error) *pdk.Error {
	var pe *pdk.Error
	if errors.As(err, &pe) && pe.Code == pdk.CodeDenied {
		return &pdk.Error{Code: pe.Code, Message: err.Error()}
	}
	if errors.As(err, &pe) && pe.Code == pdk.CodeCanceled {
		return pe
	}
	return &pdk.Error{Code: "unavailable", Message: err.Error(), Transient: true}
}

// readError classifies a failure while reading the response body: the host
// ends the read of a cancelled call (its error has the code canceled),
// which is no reason to retry; anything else broke the stream and is
// transient.
func readError(err error) *pdk.Error {
	var pe *pdk.Error
	if errors.As(err, &pe) && pe.Code == pdk.CodeCanceled {
		return &pdk.Error{Code: pdk.CodeCanceled, Message: "reading the stream: " + err.Error()}
	}
	return &pdk.Error{Code: "stream_broken", Message: "reading the stream: " + err.Error(), Transient: true}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// RetryAfter reads how long a server asks to be left alone: the
// retry-after-ms header some APIs send, or Retry-After in seconds or as an
// HTTP date (relative to now). Zero when neither says anything usable.
func RetryAfter(headers map[string][]string, now time.Time) time.Duration {
	if v := strings.TrimSpace(header(headers, "retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(header(headers, "Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 || secs > 1<<31 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

func header(h map[string][]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}
