//go:build !unix

package store

import (
	"errors"
	"io/fs"
)

// freeSpace is not measured on this system: the checks are off.
func freeSpace(string) (int64, error) { return 0, errors.New("free space not measured on this system") }

// allocated is a file's length (its blocks are not portable).
func allocated(fi fs.FileInfo) int64 { return fi.Size() }
