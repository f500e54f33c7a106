//go:build !linux

package plugins

// threadCPU is not available here: GuestClock stays at 0.
func threadCPU() (int64, bool) { return 0, false }
