//go:build unix

package plugins

import "syscall"

// hostFilesLimit is the host's budget of files open through granted folders:
// the configured one, at most half the process's descriptor limit, so that
// the guests together never take the descriptors the host serves with.
func hostFilesLimit(configured int64) int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return configured
	}
	return capFilesLimit(configured, rl.Cur)
}
