//go:build unix

package plugins

import (
	"os"
	"syscall"
)

// tryLockExclusive takes an exclusive lock on f without waiting.
func tryLockExclusive(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// lockSharedWait takes a shared lock on f, waiting while another process
// holds an exclusive one (for as long as it removes a folder).
func lockSharedWait(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
		if err != syscall.EINTR {
			return err
		}
	}
}
