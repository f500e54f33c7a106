//go:build !unix

package plugins

// hostFilesLimit is the host's budget of files open through granted
// folders (the process's descriptor limit is not known here).
func hostFilesLimit(configured int64) int64 { return configured }
