package sse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// Frame is what an Encoder makes of one event.
type Frame struct {
	// Event is the SSE event name ("" writes no event: line, so browsers
	// deliver the frame to onmessage).
	Event string
	// Data is the frame's payload, usually one line of JSON.
	Data []byte
	// Last ends the stream after this frame (a final A2A status).
	Last bool
}

// Encoder turns an event of the log into an SSE frame for one protocol.
// Encode returns ok false for events the protocol does not carry. Encoders
// are stateless, so a stream resumed from any id encodes the same frames.
type Encoder interface {
	Encode(it Item) (f Frame, ok bool, err error)
}

// ServeOptions tunes Serve. Zero fields take their defaults.
type ServeOptions struct {
	// Heartbeat is the interval of ": ping" comment frames on an idle stream,
	// which keep proxies from closing it and reveal a departed client.
	// Default 15s; negative disables.
	Heartbeat time.Duration
	// WriteTimeout is how long one write or flush may block before the
	// subscriber counts as stalled and is disconnected. Default 30s;
	// negative disables.
	WriteTimeout time.Duration
	// Abort is called (from another goroutine) when a write or flush has
	// blocked past WriteTimeout. It should break the blocked write, e.g. by
	// closing the connection; Serve then returns ErrStalled. Without it,
	// Serve returns ErrStalled only once the write comes back (a server
	// write timeout would make it).
	Abort func()
	// Alive, when set, is asked at each heartbeat of a stream that was idle
	// since the last one whether what it follows still exists; an error
	// ends Serve with that error (a stream whose task is gone, for
	// instance, would otherwise wait for events no one will write).
	Alive func(context.Context) error
	// Retry, when positive, is sent first as the client's reconnection
	// delay ("retry:" field).
	Retry time.Duration
	// FlushEvery is the most frames written between flushes while the
	// subscriber catches up (it always flushes when caught up). Default 64.
	FlushEvery int
	// Probe, when set, asks for a ": ping" comment frame at once, written
	// and flushed when the stream is caught up (while it catches up, its
	// events are written anyway): the host sends it to learn whether a
	// client that half-closed its connection still reads.
	Probe <-chan struct{}
}

const pingFrame = ": ping\n\n"

// Serve writes the events of sub to w as Server-Sent Events, encoded by enc,
// calling flush after each burst, until:
//   - the stream is finished and drained, or enc marked a frame Last: nil;
//   - ctx is done: ctx's error;
//   - a write or flush fails (the client left): ErrClientWrite and that
//     error, wrapped;
//   - one write or flush blocked longer than opts.WriteTimeout: ErrStalled;
//   - the subscription or the Hub is closed: ErrClosed;
//   - the stream was deleted (Hub.Delete): ErrDeleted.
//
// Each frame is "id: <seq>\nevent: <name>\ndata: <payload>\n\n"; an idle
// stream gets ": ping\n\n" every opts.Heartbeat. Internal events are never
// written, whatever the subscription's filter. Serve does not close sub.
func Serve(ctx context.Context, w io.Writer, flush func() error, sub *Subscription, enc Encoder, opts ServeOptions) error {
	if w == nil || sub == nil || enc == nil {
		return errors.New("serve events: nil writer, subscription or encoder")
	}
	if flush == nil {
		flush = func() error { return nil }
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 64
	}

	out := &guardedWriter{w: w, flush: flush, limit: opts.WriteTimeout}
	if opts.WriteTimeout > 0 {
		out.watchdog = time.AfterFunc(time.Hour, func() {
			out.stalled.Store(true)
			if opts.Abort != nil {
				opts.Abort()
			}
		})
		out.watchdog.Stop()
		defer out.watchdog.Stop()
	}

	var tick <-chan time.Time
	if opts.Heartbeat > 0 {
		t := time.NewTicker(opts.Heartbeat)
		defer t.Stop()
		tick = t.C
	}

	var frame []byte
	if opts.Retry > 0 {
		frame = append(frame, "retry: "...)
		frame = strconv.AppendInt(frame, opts.Retry.Milliseconds(), 10)
		frame = append(frame, "\n\n"...)
		if err := out.write(frame); err != nil {
			return err
		}
		if err := out.doFlush(); err != nil {
			return err
		}
	}

	da, _ := enc.(dataAppender)
	pending := 0   // frames written since the last flush
	wrote := false // something was written since the last heartbeat tick
	for {
		it, ok, err := sub.TryNext(ctx)
		if err != nil {
			if errors.Is(err, ErrFinished) {
				return out.flushIf(pending)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if ok {
			if it.Kind.Internal() && !(it.Kind == loop.KindInternalThoughtProcess && sub.filter.Debug) {
				continue // internal events never leave the host, the admin's debug thoughts aside
			}
			var f Frame
			var send bool
			var err error
			if da != nil {
				frame = appendHead(frame[:0], it.ID, "")
				frame, send, f.Last, err = da.appendData(frame, it)
				frame = append(frame, "\n\n"...)
			} else if f, send, err = enc.Encode(it); send && err == nil {
				frame = AppendFrame(frame[:0], it.ID, f.Event, f.Data)
			}
			if err != nil {
				return fmt.Errorf("serve events: encode event %d of %q: %w", it.ID, sub.Stream(), err)
			}
			if send {
				if err := out.write(frame); err != nil {
					return err
				}
				if cap(frame) > 64<<10 {
					frame = nil // do not keep a big event's buffer
				}
				pending++
				wrote = true
			}
			if f.Last {
				return out.flushIf(pending)
			}
			if pending >= opts.FlushEvery {
				if err := out.doFlush(); err != nil {
					return err
				}
				pending = 0
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			continue
		}
		if err := out.flushIf(pending); err != nil {
			return err
		}
		pending = 0
		select {
		case <-sub.wake:
		case <-tick:
			if !wrote && opts.Alive != nil {
				if err := opts.Alive(ctx); err != nil {
					return err
				}
			}
			if !wrote {
				if err := out.write([]byte(pingFrame)); err != nil {
					return err
				}
				if err := out.doFlush(); err != nil {
					return err
				}
			}
			wrote = false
		case <-opts.Probe:
			if err := out.write([]byte(pingFrame)); err != nil {
				return err
			}
			if err := out.doFlush(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.closed:
			return ErrClosed
		case <-sub.hub.done:
			return ErrClosed
		}
	}
}

// guardedWriter arms a watchdog around each write and flush.
type guardedWriter struct {
	w        io.Writer
	flush    func() error
	limit    time.Duration
	watchdog *time.Timer
	start    time.Time // of the current write or flush
	stalled  atomic.Bool
}

func (g *guardedWriter) arm() {
	if g.watchdog != nil {
		g.start = time.Now()
		g.watchdog.Reset(g.limit)
	}
}

func (g *guardedWriter) disarm(err error, op string) error {
	// Stop reports false when the watchdog already fired during this op;
	// an op that outlasted the limit is a stall even if the watchdog has
	// not run yet.
	if g.watchdog != nil && (!g.watchdog.Stop() || time.Since(g.start) > g.limit) {
		g.stalled.Store(true)
	}
	if g.stalled.Load() {
		return fmt.Errorf("serve events: %s blocked longer than %v: %w", op, g.limit, ErrStalled)
	}
	if err != nil {
		return fmt.Errorf("serve events: %s: %w: %w", op, ErrClientWrite, err)
	}
	return nil
}

func (g *guardedWriter) write(p []byte) error {
	g.arm()
	_, err := g.w.Write(p)
	return g.disarm(err, "write")
}

func (g *guardedWriter) doFlush() error {
	g.arm()
	err := g.flush()
	return g.disarm(err, "flush")
}

func (g *guardedWriter) flushIf(pending int) error {
	if pending == 0 {
		return nil
	}
	return g.doFlush()
}

// AppendFrame appends one SSE frame to dst: an id: line when id > 0, an
// event: line when event is not empty (line breaks in it are dropped), and
// data split into one data: line per line of it.
func AppendFrame(dst []byte, id uint64, event string, data []byte) []byte {
	dst = appendHead(dst, id, event)
	for {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			break
		}
		dst = append(dst, data[:i]...)
		dst = append(dst, "\ndata: "...)
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// appendHead appends the id: and event: lines and the start of a data line.
func appendHead(dst []byte, id uint64, event string) []byte {
	if id > 0 {
		dst = append(dst, "id: "...)
		dst = strconv.AppendUint(dst, id, 10)
		dst = append(dst, '\n')
	}
	if event != "" {
		if strings.ContainsAny(event, "\r\n") {
			event = strings.NewReplacer("\r", "", "\n", "").Replace(event)
		}
		dst = append(dst, "event: "...)
		dst = append(dst, event...)
		dst = append(dst, '\n')
	}
	return append(dst, "data: "...)
}

// ParseLastEventID parses the Last-Event-ID header of a reconnecting client:
// the decimal id of the last event it received. An empty value is 0 (start
// from the beginning). Anything else is an error that says why.
func ParseLastEventID(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	if len(t) > 20 {
		return 0, fmt.Errorf("parse Last-Event-ID: %d characters is too long for an event id", len(t))
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return 0, fmt.Errorf("parse Last-Event-ID %q: an event id is a decimal number, found %q", t, t[i])
		}
	}
	id, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse Last-Event-ID %q: out of range for an event id", t)
	}
	return id, nil
}
