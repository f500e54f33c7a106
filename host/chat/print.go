package chat

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Styles of the lines the chat writes (ANSI SGR codes), used only when
// the output is a terminal.
const (
	styleNone   = ""
	styleDim    = "2"
	styleTool   = "36"
	styleAsk    = "33"
	styleErr    = "31"
	styleOK     = "32"
	styleBold   = "1"
	styleAgent  = "35"
	maxShownArg = 400 // characters of a tool's arguments or result shown
)

// printer writes the chat's output: the answer's text as it streams, and
// whole lines for everything else. It is safe for concurrent use (the
// Looopy event stream prints from its own goroutine); a line that comes
// while the answer's text is mid-line starts on a new line.
type printer struct {
	mu      sync.Mutex
	w       io.Writer
	color   bool
	midLine bool
}

func (p *printer) paint(style, s string) string {
	if !p.color || style == "" {
		return s
	}
	return "\x1b[" + style + "m" + s + "\x1b[0m"
}

// text writes streamed answer text, terminal control characters removed.
func (p *printer) text(s string) {
	s = sanitize(s)
	if s == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.w, s)
	p.midLine = !strings.HasSuffix(s, "\n")
}

// line writes one line (or several) in a style, on a line of its own.
// Everything printed is sanitized here, not at each caller: ids, state
// names, file names and error texts come from the server as much as the
// answer does, and one unsanitized argument would let it drive the
// terminal.
func (p *printer) line(style, format string, args ...any) {
	s := sanitize(fmt.Sprintf(format, args...))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.midLine {
		_, _ = io.WriteString(p.w, "\n")
	}
	_, _ = io.WriteString(p.w, p.paint(style, s)+"\n")
	p.midLine = false
}

// endLine ends a line the answer's text left open.
func (p *printer) endLine() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.midLine {
		_, _ = io.WriteString(p.w, "\n")
		p.midLine = false
	}
}

// newline ends the prompt's line when the terminal did not echo the Enter
// that ended the input.
func (p *printer) newline() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.w, "\n")
	p.midLine = false
}

// prompt writes the prompt (no newline after it).
func (p *printer) prompt(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.midLine {
		_, _ = io.WriteString(p.w, "\n")
	}
	_, _ = io.WriteString(p.w, p.paint(styleBold, sanitize(s)))
	p.midLine = false
}

// clip shortens s for display, saying how long it was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("… (%d bytes)", len(s))
}

// oneLine folds newlines so that a value stays on its line.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r", ""), "\n", "⏎")
}

// sanitize removes terminal control characters (escape sequences among
// them) from text that comes from the server, so that an answer can not
// drive the terminal; newlines and tabs stay.
func sanitize(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return -1
		}
		return r
	}, s)
}

// isControl: C0 (but newline and tab), DEL, C1 (0x9b is a one-byte CSI on
// some terminals), and the bidirectional overrides and isolates that make
// a terminal show text in another order than it was written.
func isControl(r rune) bool {
	return (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) ||
		r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// Sanitize is sanitize for the command line's own messages that carry
// text from the server (the error Run returns).
func Sanitize(s string) string { return sanitize(s) }
