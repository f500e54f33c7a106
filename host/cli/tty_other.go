//go:build !linux

package cli

import (
	"io"
	"os"
)

// isTerminal reports whether w is a character device (a terminal, most
// likely).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// echoSwitch is nil here: a credential typed in the chat is echoed.
func echoSwitch(io.Reader) func(on bool) { return nil }
