//go:build unix

package store

import (
	"io/fs"
	"syscall"
)

// freeSpace is the space available to the process on dir's filesystem.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// allocated is the space a file takes on disk (its blocks: Badger's files
// are sparse until written).
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}
