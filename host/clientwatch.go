package host

import (
	"errors"
	"net"
	"time"
)

// watchClient calls gone once the client of a streaming response has
// closed its connection (end of stream or a reset), from a goroutine that
// reads from conn while the response streams.
//
// fasthttp reports a departed client only when a write fails: a closed
// connection is seen at the next heartbeat at best, often two or three
// later (the first write after the client's FIN is taken by the kernel),
// and the stream's place under limits.maxStreams,
// limits.maxStreamsPerPrincipal and limits.maxStreamsPerStream stays taken
// meanwhile. An event-stream client sends nothing once its request is
// read, so a read that ends is the client leaving. The response must
// close the connection at its end (sendSSE does): the goroutine reads
// until the connection closes, and nothing else may read from it after
// the stream.
//
// Bytes the client sends while it streams stop the watch (the stream then
// notices a departure at its next failed write, as without the watch): a
// client cannot make the host spin reading. A nil conn is not watched.
func watchClient(conn net.Conn, gone func()) {
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
		gone()
	}()
}
