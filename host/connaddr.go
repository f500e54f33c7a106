package host

import (
	"container/heap"
	"container/list"
	"net"
)

// addrConns is one client address's connections under the listener's cap.
type addrConns struct {
	key   string
	live  int       // its open connections
	idle  list.List // its idle connections (*countedConn), the oldest first
	index int       // its place in the listener's addrHeap
}

// addrHeap orders the client addresses for taking an idle connection at the
// cap: first the address with the most open connections among those with an
// idle one, so that one client address flooding the host loses its own
// connections before another address's slow request loses its own.
type addrHeap []*addrConns

func (h addrHeap) Len() int { return len(h) }
func (h addrHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if ai, bi := a.idle.Len() > 0, b.idle.Len() > 0; ai != bi {
		return ai
	}
	return a.live > b.live
}
func (h addrHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *addrHeap) Push(x any) {
	a := x.(*addrConns)
	a.index = len(*h)
	*h = append(*h, a)
}
func (h *addrHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return a
}

// addrKey is the client address a connection counts under: its IP (all the
// ports of one host are one client).
func addrKey(c net.Conn) string {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	return c.RemoteAddr().String()
}

// The methods below hold l.mu.

// admit counts cc under its address, idle.
func (l *connListener) admit(cc *countedConn) {
	key := addrKey(cc.Conn)
	a := l.byAddr[key]
	if a == nil {
		if l.byAddr == nil {
			l.byAddr = map[string]*addrConns{}
		}
		a = &addrConns{key: key}
		l.byAddr[key] = a
		heap.Push(&l.addrs, a)
	}
	a.live++
	cc.addr = a
	cc.elem = a.idle.PushBack(cc)
	heap.Fix(&l.addrs, a.index)
}

// setIdle puts cc at the end of its address's idle connections, or takes
// it out of them.
func (l *connListener) setIdle(cc *countedConn, idle bool) {
	a := cc.addr
	switch {
	case idle && cc.elem == nil:
		cc.elem = a.idle.PushBack(cc)
	case !idle && cc.elem != nil:
		a.idle.Remove(cc.elem)
		cc.elem = nil
	default:
		return
	}
	heap.Fix(&l.addrs, a.index)
}

// release uncounts cc, closed.
func (l *connListener) release(cc *countedConn) {
	l.setIdle(cc, false)
	a := cc.addr
	if a.live--; a.live == 0 {
		heap.Remove(&l.addrs, a.index)
		delete(l.byAddr, a.key)
		return
	}
	heap.Fix(&l.addrs, a.index)
}

// takeIdle takes the connection to close for a new one out of the idle
// ones: the oldest idle connection of the address with the most
// connections; nil when none is idle.
func (l *connListener) takeIdle() *countedConn {
	if len(l.addrs) == 0 || l.addrs[0].idle.Len() == 0 {
		return nil
	}
	cc := l.addrs[0].idle.Front().Value.(*countedConn)
	l.setIdle(cc, false)
	return cc
}
