//go:build unix

package host

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// killSelf ends the process as kill -9 would: nothing is flushed or closed.
// Where a sandbox refuses a process's signal to itself, it exits at once
// instead (no deferred function runs either way).
func killSelf() {
	if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
		fmt.Fprintln(os.Stderr, "crashpoint: kill:", err)
	}
	time.Sleep(100 * time.Millisecond)
	os.Exit(137)
}

// termSelf asks the process to stop gracefully, as a SIGTERM from outside
// does.
func termSelf() {
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		fmt.Fprintln(os.Stderr, "crashpoint: kill:", err)
	}
}
