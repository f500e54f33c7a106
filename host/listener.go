package host

import (
	"container/list"
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
//   - at most max connections are open at once, so the process keeps
//     descriptors for its store, its plugins and their egress whatever
//     the clients do;
//   - at the cap, a new connection takes the place of an idle one, the
//     oldest of the client address (IP) with the most connections: a
//     connection with no request in flight (nothing sent yet, a
//     request's head or body still arriving, or a kept-alive connection
//     between requests). Only when every connection has a request in a
//     handler or a response (an event stream) going is the new one closed
//     at once, never queued. A client that connects and sends nothing, or
//     trickles, therefore holds no place another client needs: it keeps
//     its connection only as long as the connections opened after it
//     leave it alone.
//
// A request is in flight from its handler's start (requestStarted, the
// server's first middleware) to the end of its response (requestEnded,
// the server's connection-state hook); connections of a server that does
// not report these (a caller's own Fiber application) are all idle.
type connListener struct {
	net.Listener
	max  int64
	log  *slog.Logger
	live atomic.Int64

	mu       sync.Mutex
	byAddr   map[string]*addrConns // the open connections by client address (connaddr.go)
	addrs    addrHeap              // the same, the address to take an idle connection from first
	refused  int64                 // connections closed over the cap in the current burst
	evicted  int64                 // idle connections closed for new ones in the current burst
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
		cc := &countedConn{Conn: c, l: l, released: make(chan struct{})}
		if l.live.Add(1) > l.max {
			victim := l.idleToClose()
			if victim == nil {
				l.live.Add(-1)
				_ = c.Close()
				continue
			}
			// Its descriptor is free at once; the server, reading from it,
			// lets it go (closes it) a moment later, and only then has a
			// place for cc. The wait is bounded: a server that does not
			// let go in time leaves the count over the cap until it does.
			_ = victim.Conn.Close()
			t := time.NewTimer(releaseWait)
			select {
			case <-victim.released:
			case <-t.C:
			}
			t.Stop()
		}
		l.mu.Lock()
		l.admit(cc)
		l.mu.Unlock()
		return cc, nil
	}
}

// DefaultHeaderTimeout is limits.headerTimeout's default: how long a
// connection may take to send a request's line and headers. bodyReadTimeout
// bounds the reading of its body once they are in.
const (
	DefaultHeaderTimeout = 10 * time.Second
	bodyReadTimeout      = 30 * time.Second
)

// releaseWait bounds how long Accept waits for the server to let go of an
// idle connection it closed for a new one.
const releaseWait = time.Second

// idleToClose takes the idle connection to close for a new one out of the
// idle ones (takeIdle: the oldest of the client address with the most
// connections), marked evicted (no request starts on it any more), or nil with none;
// either way it counts and logs the connection closed over the cap, at
// most once a minute.
func (l *connListener) idleToClose() *countedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	var victim *countedConn
	if victim = l.takeIdle(); victim != nil {
		victim.evicted = true
		l.evicted++
	} else {
		l.refused++
	}
	if time.Since(l.lastWarn) >= time.Minute {
		l.log.Warn("connection cap reached: closing the oldest idle connections for new ones, new ones when none is idle",
			"max_connections", l.max, "idle_closed", l.evicted, "new_closed", l.refused)
		l.lastWarn, l.refused, l.evicted = time.Now(), 0, 0
	}
	return victim
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
	// released is closed once the server has closed the connection.
	released chan struct{}

	// Under l.mu: its client address; its place in the address's idle
	// connections (nil while a request is in flight, and once closed);
	// evicted: closed for a new connection, no request may start on it.
	addr    *addrConns
	elem    *list.Element
	evicted bool
	closed  bool
}

// requestStarted marks a request in flight on c, which is then never
// closed for a new connection until requestEnded. It reports false when
// c was closed for a new connection already: the request must not run
// (its client sees the connection closed, and nothing was done for it).
func (c *countedConn) requestStarted() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.evicted || c.closed {
		return false
	}
	c.l.setIdle(c, false)
	return true
}

// requestEnded marks c idle again once a response is written: the
// youngest idle connection of its address.
func (c *countedConn) requestEnded() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.evicted || c.closed {
		return
	}
	c.l.setIdle(c, true)
}

// NetConn returns the connection it counts (a stream's client watch reads
// the socket's state from it).
func (c *countedConn) NetConn() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	c.l.mu.Lock()
	if !c.closed {
		c.closed = true
		c.l.release(c)
	}
	c.l.mu.Unlock()
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.live.Add(-1)
		close(c.released)
	})
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

// concurrencyCap is the server's own bound on connections served at once:
// twice the listener's, as a connection the listener closed for a new one
// is still being let go by the server when the new one arrives (the
// listener holds the descriptors to its cap).
func concurrencyCap(configured int) int {
	limit, _ := connectionCap(configured)
	return 2 * limit
}
