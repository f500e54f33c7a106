package remote

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An agent that stays unreachable is a warning once; the tries after it
// (a call waiting for the agent tries every 2 s) are logged at debug.
func TestUnreachableWarnsOnce(t *testing.T) {
	// A port nobody listens on: a listener closed at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := New(Config{Name: "child", URL: "http://" + addr}, nil, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, _, err := a.readyOr(context.Background(), true); err == nil {
			t.Fatal("an agent with no listener is ready")
		}
	}
	warns := strings.Count(logs.String(), `level=WARN msg="remote agent not reachable"`)
	debugs := strings.Count(logs.String(), `level=DEBUG msg="remote agent not reachable"`)
	if warns != 1 || debugs != 3 {
		t.Fatalf("%d warnings, %d debug lines, want 1 and 3:\n%s", warns, debugs, logs.String())
	}

}
