package plugins

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
)

// guestOutput is a guest's stdout or stderr: each line goes to the log with
// the plugin's name, at most maxBytes per call; the tail is kept so that an
// error (a Go guest's fatal "out of memory", say) can quote it.
type guestOutput struct {
	log    *slog.Logger
	level  slog.Level
	stream string

	mu      sync.Mutex
	line    []byte
	written int
	dropped bool
	tail    []byte
	fatal   string // the first "fatal error:" or "panic:" line of the call
}

const (
	guestOutputPerCall = 64 << 10
	guestLineMax       = 2 << 10
	guestTailMax       = 4 << 10
)

func newGuestOutput(log *slog.Logger, level slog.Level, stream string) *guestOutput {
	return &guestOutput{log: log, level: level, stream: stream}
}

func (g *guestOutput) Write(p []byte) (int, error) {
	n := len(p)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tail = append(g.tail, p...)
	if len(g.tail) > guestTailMax {
		g.tail = append(g.tail[:0], g.tail[len(g.tail)-guestTailMax:]...)
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := guestLineMax - len(g.line); room > 0 {
			g.line = append(g.line, chunk[:min(len(chunk), room)]...)
		}
		if i < 0 {
			break
		}
		g.flushLocked()
		p = p[i+1:]
	}
	return n, nil
}

func (g *guestOutput) flushLocked() {
	if len(g.line) == 0 {
		return
	}
	if g.fatal == "" && (bytes.HasPrefix(g.line, []byte("fatal error:")) || bytes.HasPrefix(g.line, []byte("panic:"))) {
		g.fatal = string(g.line)
	}
	if g.written+len(g.line) > guestOutputPerCall {
		if !g.dropped {
			g.dropped = true
			g.log.Warn("plugin output over its limit; dropping the rest of this call's", "stream", g.stream)
		}
	} else {
		g.written += len(g.line)
		g.log.Log(context.Background(), g.level, string(g.line), "stream", g.stream)
	}
	g.line = g.line[:0]
}

// endCall flushes a partial line and resets the per-call budget.
func (g *guestOutput) endCall() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.line) > 0 || g.written > 0 || g.dropped {
		g.flushLocked()
		g.written, g.dropped = 0, false
	}
}

// lastLines returns the guest's fatal line when it wrote one, else the
// tail of what it wrote, trimmed.
func (g *guestOutput) lastLines() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fatal != "" {
		return g.fatal
	}
	return string(bytes.TrimSpace(g.tail))
}

func (g *guestOutput) clearTail() {
	g.mu.Lock()
	g.tail = g.tail[:0]
	g.fatal = ""
	g.mu.Unlock()
}
