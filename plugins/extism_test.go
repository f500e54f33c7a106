package plugins

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a log sink tests read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestExtismABIPlugin(t *testing.T) {
	var logs syncBuffer
	r := newRegistry(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	dir := t.TempDir()
	info, err := r.Load(context.Background(), install(t, dir, "xecho", guestWasm(t, "xecho"), func(m map[string]any) {
		caps(m)["hostFunctions"] = []string{"log"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if info.ABI != "extism" || len(info.Tools) != 1 || info.Tools[0] != "xecho" {
		t.Fatalf("info = %+v", info)
	}
	if res := mustCall(t, r, "xecho", `{"text":"hi"}`); res.IsError || res.Content != "hi" {
		t.Fatalf("xecho = %+v", res)
	}
	// the schema check applies to Extism-ABI plugins too
	if res := mustCall(t, r, "xecho", `{}`); !res.IsError || !strings.Contains(res.Content, "missing property 'text'") {
		t.Fatalf("xecho({}) = %+v", res)
	}
	// a guest error comes back as an error result; the instance stays
	if res := mustCall(t, r, "xecho", `{"text":"fail"}`); !res.IsError || res.Content != "asked to fail" {
		t.Fatalf("xecho(fail) = %+v", res)
	}
	if res := mustCall(t, r, "xecho", `{"text":"log"}`); res.IsError {
		t.Fatalf("xecho(log) = %+v", res)
	}
	if !strings.Contains(logs.String(), "logged by xecho") || !strings.Contains(logs.String(), "plugin=xecho") {
		t.Fatalf("the host log lacks the guest's line:\n%s", logs.String())
	}

	// without the grant, the import is refused at load
	_, err = r.Load(context.Background(), install(t, dir, "xecho2", guestWasm(t, "xecho"), nil))
	if err == nil || !strings.Contains(err.Error(), "looopy.log, which was not granted") {
		t.Fatalf("ungranted Extism import: %v", err)
	}

	// a manifest of another kind is refused at load for the export that
	// kind needs, before any guest code runs
	_, err = r.Load(context.Background(), install(t, dir, "xecho3", guestWasm(t, "xecho"), func(m map[string]any) {
		m["kind"] = "model"
		caps(m)["hostFunctions"] = []string{"log"}
	}))
	if err == nil || !strings.Contains(err.Error(), "an Extism-ABI model plugin must export generate") {
		t.Fatalf("an Extism-ABI tool plugin loaded as a model: %v", err)
	}
}
