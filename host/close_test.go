package host_test

import (
	"context"
	"testing"
	"time"
)

// TestCloseAfterTheServerStopped: once the server has stopped by itself
// and its result was taken from Done (what the command does before it
// shuts down), Close still returns: it waited forever for a second result,
// so a host whose listener died never exited for a supervisor to restart.
func TestCloseAfterTheServerStopped(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Server().Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(time.Minute):
		t.Fatal("the server did not stop (guard)")
	}
	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Close hangs after the server stopped")
	}
	select {
	case err := <-h.Done():
		if err != nil {
			t.Fatalf("Done after Close: %v", err)
		}
	default:
		t.Fatal("Done no longer answers after Close")
	}
}
