package host

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// TurnMemory is what one running turn may make the host hold at worst with
// the default budgets: the events of a model call queued for its two
// streams (budgets.eventBytesPerCall, 4 MiB, each event's stored and client
// forms), the model's answer in flight (1 MiB output), the history handed
// to the model and kept for the conversation (agent.historyBytes, 1 MiB,
// twice). Measured, turns hold far less (docs/PERFORMANCE.md, "A flood of
// turns"): 4 turns holding 4,000 thoughts each, +25 MiB, nearly all the
// model instances' memory, which the plugin's pool bounds; the volume a
// flood writes goes through Badger's write path, which Badger's options
// bound whatever the number of turns.
const TurnMemory = 16 << 20

// TurnsPerCPU bounds the default of limits.maxRunning by the CPUs: a turn
// mostly waits on its model, but a flood of turns whose models answer at
// once (the scripted model, a fast local server) makes every one of them
// work on the host's CPUs: beyond a few dozen per CPU they only queue.
const TurnsPerCPU = 64

// DefaultMaxRunning is the default of limits.maxRunning for a process that
// may use mem bytes on cpus CPUs: half of the memory for running turns at
// TurnMemory each, at most TurnsPerCPU per CPU, within [16, 1024]. The
// other half of the memory is the host's own (Badger's memtables, tables
// being built and caches, conversations in memory, plugins' compiled code
// and instances). 2 CPUs and 8 GiB or more give 128.
func DefaultMaxRunning(mem int64, cpus int) int {
	n := min(mem/2/TurnMemory, int64(TurnsPerCPU*max(cpus, 1)))
	return int(min(max(n, 16), 1024))
}

// DefaultMaxRunningPerPrincipal is the default of
// limits.maxRunningPerPrincipal: a quarter of the host's bound (at least
// 1), so that one principal leaves three quarters of the host's turns to
// the others.
func DefaultMaxRunningPerPrincipal(maxRunning int) int {
	if maxRunning < 0 {
		return -1
	}
	return max(maxRunning/4, 1)
}

// DefaultStoreMemory is the default of store.memoryBytes for a process that
// may use mem bytes: a sixteenth of it, within [64 MiB, 512 MiB]. Badger's
// own defaults let a flood of writes take 2.6 GiB (docs/PERFORMANCE.md,
// "The store's memory under a flood"); this share sits inside the half of
// the memory DefaultMaxRunning leaves to the host's own use.
func DefaultStoreMemory(mem int64) int64 {
	return min(max(mem/16, 64<<20), 512<<20)
}

// storeMemory is the memory budget of Badger the host opens.
func storeMemory(sc StoreConfig) int64 {
	if sc.MemoryBytes > 0 {
		return sc.MemoryBytes
	}
	return DefaultStoreMemory(MemoryLimit())
}

// MemoryLimit is the memory this process may use: the Go runtime's soft
// limit when one is set (GOMEMLIMIT; the host sets one when it starts,
// setMemoryLimit), else systemMemory.
func MemoryLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return l
	}
	return systemMemory()
}

// systemMemory is the memory the process's cgroup allows (v2 memory.max,
// v1 memory.limit_in_bytes, of its own cgroup and its ancestors), else the machine's (/proc/meminfo); 4 GiB
// when neither can be read.
func systemMemory() int64 {
	if l, ok := cgroupMemoryLimit(); ok {
		return l
	}
	if l, ok := machineMemory(); ok {
		return l
	}
	return 4 << 30
}

// cgroupMemoryLimit reads the memory limit of the process's cgroup.
func cgroupMemoryLimit() (int64, bool) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		self = nil // the roots' own files are still read
	}
	l, ok := cgroupMemoryLimitAt("/sys/fs/cgroup", string(self))
	if !ok {
		return 0, false
	}
	if m, mok := machineMemory(); mok && l > m {
		return m, true
	}
	return l, true
}

// cgroupMemoryLimitAt is the memory limit of the cgroups that self (the
// text of /proc/self/cgroup) names under the cgroup file system mounted at
// root: cgroup v2's memory.max (the "0::" line, under root) and v1's
// memory.limit_in_bytes (the line of the memory controller, under
// root/memory), each read at the process's cgroup and every ancestor up to
// the root (a limit binds everything below it; in a container the path may
// name cgroups outside its view, which are then not found), the lowest
// found. "max" (v2) and v1's huge no-limit value mean no limit.
func cgroupMemoryLimitAt(root, self string) (int64, bool) {
	v2, v1 := "/", "/"
	for _, line := range strings.Split(self, "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	var best int64
	found := false
	read := func(dir, path, file string) {
		for p := filepath.Clean("/" + path); ; p = filepath.Dir(p) {
			b, err := os.ReadFile(filepath.Join(dir, p, file))
			if err == nil {
				v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				if err == nil && v > 0 && v < 1<<60 && (!found || v < best) {
					best, found = v, true
				}
			}
			if p == "/" {
				return
			}
		}
	}
	read(root, v2, "memory.max")
	read(filepath.Join(root, "memory"), v1, "memory.limit_in_bytes")
	return best, found
}

// machineMemory reads MemTotal from /proc/meminfo.
func machineMemory() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}
