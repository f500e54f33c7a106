//go:build !unix

package plugins

import "os"

// tryLockExclusive: without file locks no process can tell another's use of
// a folder, so none is removed.
func tryLockExclusive(*os.File) bool { return false }

func lockSharedWait(*os.File) error { return nil }
