package pdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// This file holds the parts of the guest SDK that need no host: they are the
// same with GOOS=wasip1 and in a plugin's native tests.

// ErrCanceled is returned by the functions that talk to the host once the
// call was cancelled: the handler should return.
var ErrCanceled = &Error{Code: CodeCanceled, Message: "call cancelled"}

// Logf logs a formatted line at info level.
func Logf(format string, args ...any) { Log(LevelInfo, fmt.Sprintf(format, args...)) }

// HTTPResponse is a response from the egress broker. Body streams: read it
// as it arrives and close it when done.
type HTTPResponse struct {
	Status  int
	Headers map[string][]string
	Body    io.ReadCloser
}

var config = sync.OnceValue(func() map[string]any {
	m := map[string]any{}
	if s := os.Getenv(EnvConfig); s != "" {
		_ = json.Unmarshal([]byte(s), &m)
	}
	return m
})

// Config returns a value of the manifest's config map: a string as it is,
// any other value as JSON; "" when absent.
func Config(key string) string {
	v, ok := config()[key]
	if !ok || v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// ConfigJSON decodes the whole config map into v.
func ConfigJSON(v any) error {
	b, err := json.Marshal(config())
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Secret returns a secret the manifest names and the host resolved from its
// environment ("" when absent). Never log it.
func Secret(name string) string { return os.Getenv(EnvSecretPrefix + name) }

// ErrNoHost is what the functions that need the host answer outside its
// sandbox (a native test, a program run by hand).
var ErrNoHost = errors.New("pdk: no host here: this function works inside the Looopy host's sandbox (a GOOS=wasip1 plugin)")

// IsAuthRequired reports whether err says a credential is not there yet
// (GetCredential): the tool should return, and runs again once the client
// has supplied it.
func IsAuthRequired(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Code == CodeAuthRequired
}
