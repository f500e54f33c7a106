package host

import (
	"errors"
	"io"
	"net"
	"time"
)

// watchClient calls gone once the client of a streaming response has
// closed its connection (a reset, or an end of stream it no longer reads
// past), from a goroutine that reads from conn while the response streams.
//
// fasthttp reports a departed client only when a write fails: a closed
// connection is seen at the next heartbeat at best, often two or three
// later (the first write after the client's FIN is taken by the kernel),
// and the stream's place under limits.maxStreams,
// limits.maxStreamsPerPrincipal and limits.maxStreamsPerStream stays taken
// meanwhile. An event-stream client sends nothing once its request is
// read, so a read that ends is the client leaving, or the client
// half-closing (shutdown of its sending side, legal in HTTP/1.1) while it
// still reads. The two are told apart by what the client's end answers
// data sent after its FIN: each send on probe asks the stream to write an
// SSE comment at once. A closed socket answers with a reset (gone); a
// half-closed one acknowledges it (reading: the stream goes on, and the
// watch ends). See clientReads.
//
// The response must close the connection at its end (sendSSE does): the
// goroutine reads until the connection closes, and nothing else may read
// from it after the stream.
//
// Bytes the client sends while it streams stop the watch (the stream then
// notices a departure at its next failed write, as without the watch): a
// client cannot make the host spin reading. A nil conn is not watched.
func watchClient(conn net.Conn, gone func(), probe chan<- struct{}) {
	if conn == nil {
		return
	}
	// The read deadline the server set for reading the request would end
	// the watch with a timeout mid-stream.
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	go func() {
		var b [1]byte
		n, err := conn.Read(b[:])
		if n > 0 {
			return
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return
		}
		if errors.Is(err, io.EOF) && probe != nil && clientReads(conn, probe) {
			return // half-closed, and reading
		}
		gone()
	}()
}

// Probing a client that sent its FIN: how long to wait for its answer at
// most (a peer that neither acknowledges nor resets is left to the
// heartbeat), and the longest pause between looks.
const (
	probeGuard   = 30 * time.Second
	probeMaxWait = 500 * time.Millisecond
)

// clientReads reports whether a client that sent its FIN still reads: it
// asks for probes (SSE comments written by the stream) and waits for the
// client's end to answer the data sent since the FIN, with an
// acknowledgment (reading) or a reset (gone). It never judges by time
// alone where the socket's state can be read (Linux): a socket that was
// closed resets whatever it is sent after its FIN, and every byte it took
// before was acknowledged by that FIN at the latest, so bytes acknowledged
// after it were read by an open socket. Elsewhere, a reset within two
// probes a moment apart means gone.
func clientReads(conn net.Conn, probe chan<- struct{}) bool {
	tc := tcpConn(conn)
	if tc == nil {
		return false
	}
	ask := func() {
		select {
		case probe <- struct{}{}:
		default: // one is pending
		}
	}
	base, open, known := tcpAcked(tc)
	if known && !open {
		return false // reset already
	}
	if !known {
		// No socket state to read: two probes a moment apart, then a
		// read, which a reset ends with an error and a FIN with EOF.
		for range 2 {
			ask()
			time.Sleep(100 * time.Millisecond)
		}
		_ = tc.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [1]byte
		_, err := tc.Read(b[:])
		_ = tc.SetReadDeadline(time.Time{})
		return errors.Is(err, io.EOF)
	}
	wait := 5 * time.Millisecond
	for deadline := time.Now().Add(probeGuard); time.Now().Before(deadline); {
		ask()
		time.Sleep(wait)
		acked, open, _ := tcpAcked(tc)
		if !open {
			return false // reset, or the connection closed
		}
		if acked > base {
			return true
		}
		wait = min(2*wait, probeMaxWait)
	}
	return true
}

// tcpConn finds the TCP connection under conn (the listener's counting
// wrapper, TLS).
func tcpConn(conn net.Conn) *net.TCPConn {
	for range 4 {
		switch c := conn.(type) {
		case *net.TCPConn:
			return c
		case interface{ NetConn() net.Conn }:
			conn = c.NetConn()
		default:
			return nil
		}
	}
	return nil
}
