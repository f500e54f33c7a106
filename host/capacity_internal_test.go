package host

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupMemoryLimitAt reads the memory limit of the process's own
// cgroup from a cgroup file system laid out on disk: v1 (the memory
// controller's hierarchy, where the limit of the process's cgroup, not the
// root's, binds), v2, an ancestor's lower limit, no limit, and a path that
// names cgroups outside a container's view.
func TestCgroupMemoryLimitAt(t *testing.T) {
	const v1NoLimit = "9223372036854771712"
	for _, tc := range []struct {
		name  string
		files map[string]string // path under the root: content
		self  string            // /proc/self/cgroup
		want  int64             // 0: no limit found
	}{
		{"v1, the process's cgroup", map[string]string{
			"memory/memory.limit_in_bytes":                     v1NoLimit,
			"memory/process_api/abc/memory.limit_in_bytes":     v1NoLimit,
			"memory/process_api/abc/job/memory.limit_in_bytes": "4294967296",
		}, "5:devices:/\n4:memory:/process_api/abc/job\n1:cpu:/\n0::/\n", 4 << 30},
		{"v1, a lower limit above", map[string]string{
			"memory/memory.limit_in_bytes":     v1NoLimit,
			"memory/a/memory.limit_in_bytes":   "1073741824",
			"memory/a/b/memory.limit_in_bytes": "4294967296",
		}, "4:memory:/a/b\n", 1 << 30},
		{"v1, controllers named together", map[string]string{
			"memory/k/memory.limit_in_bytes": "2147483648",
		}, "3:cpuacct,memory:/k\n", 2 << 30},
		{"v1, no limit", map[string]string{
			"memory/memory.limit_in_bytes":   v1NoLimit,
			"memory/x/memory.limit_in_bytes": v1NoLimit,
		}, "4:memory:/x\n", 0},
		{"v1, in a container (its own cgroup at the root)", map[string]string{
			"memory/memory.limit_in_bytes": "536870912",
		}, "4:memory:/docker/0123abcd\n", 512 << 20},
		{"v2", map[string]string{
			"user.slice/memory.max":     "max",
			"user.slice/app/memory.max": "3221225472",
		}, "0::/user.slice/app\n", 3 << 30},
		{"v2, in a container", map[string]string{
			"memory.max": "1073741824",
		}, "0::/\n", 1 << 30},
		{"v2, no limit", map[string]string{
			"app/memory.max": "max",
		}, "0::/app\n", 0},
		{"nothing readable", nil, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, c := range tc.files {
				f := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f, []byte(c+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := cgroupMemoryLimitAt(root, tc.self)
			if ok != (tc.want > 0) || got != tc.want {
				t.Fatalf("limit %d (found %v), want %d", got, ok, tc.want)
			}
		})
	}
}
