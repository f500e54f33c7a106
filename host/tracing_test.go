package host_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

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

func TestTraceSpansAreLogged(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.TraceSpans = true
	cfg.LogFormat = "json"
	var logs syncBuffer
	m := host.NewMain()
	m.Config, m.Stdout = cfg, &logs
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := client10(t, m.URL(), "")
	task := send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("traced")})
	if err := m.Close(); err != nil { // flushes the spans
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, `"span":"agent.turn"`) || !strings.Contains(out, string(task.ID)) {
		t.Fatalf("no agent.turn span for task %s in the log:\n%.2000s", task.ID, out)
	}
}
