//go:build !unix

package host

import "os"

// killSelf ends the process at once: nothing is flushed or closed.
func killSelf() { os.Exit(137) }
