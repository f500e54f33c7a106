package host

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// connListener guards the HTTP server's accept loop against a connection
// flood:
//
//   - an accept error that is temporary (out of file descriptors, a
//     connection aborted before it was taken) never reaches the server,
//     which would stop for good on it: Accept backs off (5 ms doubling to
//     1 s) and tries again, and logs once per burst of such errors;
//   - at most max connections are open at once: one past the cap is
//     closed at once, never queued, so the process keeps descriptors for
//     its store, its plugins and their egress whatever the clients do.
type connListener struct {
	net.Listener
	max  int64
	log  *slog.Logger
	live atomic.Int64

	mu       sync.Mutex
	refused  int64 // connections closed over the cap in the current burst
	lastWarn time.Time
}

func newConnListener(ln net.Listener, max int, log *slog.Logger) *connListener {
	return &connListener{Listener: ln, max: int64(max), log: log}
}

// Live is how many accepted connections are open.
func (l *connListener) Live() int64 { return l.live.Load() }

func (l *connListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !temporaryAcceptError(err) {
				return nil, err
			}
			if delay == 0 {
				delay = 5 * time.Millisecond
				l.log.Warn("accept failed; retrying with backoff", "error", err.Error())
			} else if delay *= 2; delay > time.Second {
				delay = time.Second
			}
			time.Sleep(delay)
			continue
		}
		if delay != 0 {
			l.log.Info("accepting connections again")
			delay = 0
		}
		if l.live.Add(1) > l.max {
			l.live.Add(-1)
			_ = c.Close()
			l.noteRefused()
			continue
		}
		return &countedConn{Conn: c, l: l}, nil
	}
}

// noteRefused logs the connections closed over the cap, at most once a
// minute.
func (l *connListener) noteRefused() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused++
	if time.Since(l.lastWarn) < time.Minute {
		return
	}
	l.log.Warn("connection cap reached: closing new connections", "max_connections", l.max, "closed", l.refused)
	l.lastWarn, l.refused = time.Now(), 0
}

// temporaryAcceptError says whether an accept error passes: the process or
// the system is out of descriptors or memory for a moment, or the peer
// went away before the connection was taken.
func temporaryAcceptError(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED,
		syscall.ECONNRESET, syscall.ENOBUFS, syscall.ENOMEM, syscall.EAGAIN, syscall.EINTR, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type countedConn struct {
	net.Conn
	l    *connListener
	once sync.Once
}

// NetConn returns the connection it counts (a stream's client watch reads
// the socket's state from it).
func (c *countedConn) NetConn() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.live.Add(-1) })
	return err
}

// connectionCap is the number of HTTP connections the host keeps open at
// most: configured (limits.maxConnections) or, with 0, three eighths of
// the process's open-file limit (Go raises the soft limit to the hard one
// at start). The plugins' granted folders may hold half of it
// (budgets.openFilesTotal), so an eighth always stays for the store and
// egress. A configured value above that is lowered to it.
func connectionCap(configured int) (limit int, nofile uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 || rl.Cur > 1<<30 {
		rl.Cur = 1 << 16
	}
	nofile = rl.Cur
	auto := int(rl.Cur / 8 * 3)
	if auto < 16 {
		auto = 16
	}
	if configured <= 0 || configured > auto {
		return auto, nofile
	}
	return configured, nofile
}

func concurrencyCap(configured int) int {
	limit, _ := connectionCap(configured)
	return limit
}
