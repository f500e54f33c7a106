//go:build !unix

package host

import "os"

// killSelf ends the process at once: nothing is flushed or closed.
func killSelf() { os.Exit(137) }

// termSelf asks the process to stop gracefully; without signals to itself
// it stops at once.
func termSelf() { os.Exit(143) }
