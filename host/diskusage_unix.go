//go:build unix

package host

import (
	"io/fs"
	"syscall"
)

// diskUsage is the space a file takes on disk (allocated blocks).
func diskUsage(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}
