package cli

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// echoSwitch returns a function that turns the echo of the terminal r
// reads from off and on, or nil when r is not a terminal.
func echoSwitch(r io.Reader) func(on bool) {
	f, ok := r.(*os.File)
	if !ok {
		return nil
	}
	fd := int(f.Fd())
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return nil
	}
	return func(on bool) {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return
		}
		if on {
			t.Lflag |= unix.ECHO
		} else {
			t.Lflag &^= unix.ECHO
		}
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, t)
	}
}
