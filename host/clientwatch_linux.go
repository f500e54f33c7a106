package host

import (
	"net"

	"golang.org/x/sys/unix"
)

// tcpAcked returns how many bytes the peer of a connection has
// acknowledged, and whether the connection is still open (not reset, not
// closed); known is false when the socket's state could not be read.
func tcpAcked(c *net.TCPConn) (acked uint64, open, known bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false, false
	}
	var info *unix.TCPInfo
	cerr := rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if cerr != nil {
		return 0, false, true // the connection was closed
	}
	if err != nil || info == nil {
		return 0, false, false
	}
	if info.State == 7 { // TCP_CLOSE: the peer reset it
		return 0, false, true
	}
	return info.Bytes_acked, true, true
}
