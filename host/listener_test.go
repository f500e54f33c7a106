package host

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// flakyListener is a real TCP listener whose first accepts fail as they do
// when the process is out of descriptors.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: fmt.Errorf("accept4: %w", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestConnListenerRetriesAndCaps: an accept that fails with EMFILE is
// retried rather than returned (the server would stop on it); at the cap a
// new connection takes the place of the oldest idle one (no request in
// flight), and is closed at once only when every connection has a request
// in flight; a connection closed for a newer one starts no request.
func TestConnListenerRetriesAndCaps(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: raw}
	fl.fails.Store(3)
	ln := newConnListener(fl, 2, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer ln.Close()

	// The server's part: each connection is read until it fails, then
	// closed, as fasthttp does.
	accepted := make(chan *countedConn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			go func() {
				_, _ = io.Copy(io.Discard, c)
				_ = c.Close()
			}()
			accepted <- c.(*countedConn)
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
		return c
	}
	guard := time.After(time.Minute)
	next := func() *countedConn {
		select {
		case c, ok := <-accepted:
			if !ok {
				t.Fatal("Accept returned an error: the server would have stopped")
			}
			return c
		case <-guard:
			t.Fatal("wedged")
		}
		return nil
	}
	closedByHost := func(what string, c net.Conn) {
		t.Helper()
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s was kept open (%v)", what, err)
		}
	}
	aClient := dial()
	a := next() // after three EMFILE failures
	dial()
	b := next()
	if got := ln.Live(); got != 2 {
		t.Fatalf("live connections %d, want 2", got)
	}
	if !b.requestStarted() {
		t.Fatal("a request could not start on a live connection")
	}
	// The third is over the cap: a, idle, gives it its place; b, with a
	// request in flight, stays.
	dial()
	c := next()
	closedByHost("the oldest idle connection at the cap", aClient)
	if a.requestStarted() {
		t.Fatal("a request started on a connection closed for a newer one")
	}
	if !c.requestStarted() {
		t.Fatal("a request could not start on the new connection")
	}
	// Every connection busy: the next one is closed at once.
	closedByHost("a connection past a cap of busy ones", dial())
	if got := ln.Live(); got != 2 {
		t.Fatalf("live connections %d, want 2", got)
	}
	// b's request ended: b is idle, the next connection takes its place.
	b.requestEnded()
	dial()
	next()
	// One closed under the cap makes room for a new one, counted once.
	c.Close()
	c.Close()
	if got := ln.Live(); got != 1 {
		t.Fatalf("live connections %d after a close, want 1", got)
	}
	dial()
	next()
	if got := ln.Live(); got != 2 {
		t.Fatalf("live connections %d, want 2", got)
	}
}

func TestTemporaryAcceptError(t *testing.T) {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED} {
		if !temporaryAcceptError(&net.OpError{Op: "accept", Err: e}) {
			t.Errorf("%v not retried", e)
		}
	}
	if temporaryAcceptError(net.ErrClosed) || temporaryAcceptError(syscall.EBADF) {
		t.Error("a closed listener is retried")
	}
}

func TestConnectionCapKeepsAReserve(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	auto, nofile := connectionCap(0)
	// The plugins' folders may hold half the limit: connections and
	// plugins together still leave descriptors for the store.
	if nofile != rl.Cur || uint64(auto)+nofile/2 >= nofile {
		t.Fatalf("cap %d with limit %d (soft %d): no reserve beside the plugins' half", auto, nofile, rl.Cur)
	}
	if got, _ := connectionCap(int(nofile) * 2); got != auto {
		t.Fatalf("a configured cap over the limit stays %d, want %d", got, auto)
	}
	if got, _ := connectionCap(10); got != 10 && auto >= 10 {
		t.Fatalf("configured 10, got %d", got)
	}
}
