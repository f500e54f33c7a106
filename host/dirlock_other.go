//go:build !unix

package host

// dataDirLocked: where flock is not available the folder's lock is not
// probed, and a folder in use is reported as one that does not open.
func dataDirLocked(dir string) bool { return false }
