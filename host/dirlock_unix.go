//go:build unix

package host

import (
	"errors"
	"os"
	"syscall"
)

// dataDirLocked reports whether another open of the Badger database in dir
// (another process, or another host in this one) holds it: Badger flocks
// the folder itself, so a shared, non-blocking flock on the folder is
// refused with EWOULDBLOCK. The probe is let go at once.
func dataDirLocked(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false
	}
	return errors.Is(err, syscall.EWOULDBLOCK)
}
