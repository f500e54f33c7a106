//go:build long

package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// BenchmarkLongCluster measures finished tasks per second through the real
// binary: the Badger single host, then 1, 2 and 3 hosts sharing one Redis,
// in the same run. Clients (16 at once) send blocking SendMessage requests
// round robin over the hosts; each task is one short turn of the scripted
// model (no tool call). It reports tasks/s and, for Redis, the commands
// Redis processed per task (INFO stats), which are its round trips but for
// pipelines.
//
//	go test -tags long -run '^$' -bench LongCluster -benchtime 400x ./host
func BenchmarkLongCluster(b *testing.B) {
	redisSrv := redistest.Start(b, redistest.Options{})
	root := b.TempDir()
	bin := hostBinary(b)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr})
	defer rdb.Close()
	run := 0
	for _, bc := range []struct {
		name  string
		hosts int
		redis bool
	}{{"badger/hosts=1", 1, false}, {"redis/hosts=1", 1, true}, {"redis/hosts=2", 2, true}, {"redis/hosts=3", 3, true}} {
		b.Run(bc.name, func(b *testing.B) {
			run++
			var procs []*benchProc
			for i := range bc.hosts {
				dir := filepath.Join(root, fmt.Sprintf("run%d-host%d", run, i))
				cfg := map[string]any{
					"dataDir":   filepath.Join(dir, "data"),
					"pluginDir": filepath.Join(dir, "plugins"),
					"plugins":   map[string]any{"only": []string{"scripted-model"}, "cacheDir": wasmCache},
					"limits":    map[string]any{"hostId": fmt.Sprintf("run%d-host%d", run, i)},
					"logLevel":  "warn",
				}
				if bc.redis {
					cfg["store"] = map[string]any{"backend": "redis", "redis": map[string]any{"addr": redisSrv.Addr, "prefix": fmt.Sprintf("bench%d:", run)}}
				}
				benchPlugin(b, filepath.Join(dir, "plugins"), "scripted-model")
				p := startBenchProc(b, bin, dir, cfg)
				defer p.stop()
				procs = append(procs, p)
			}
			clients := make([]*a2aClient, len(procs))
			for i, p := range procs {
				clients[i] = &a2aClient{c: client10(b, p.base, "")}
			}
			before := commands(b, rdb)
			beforeStats := commandStats(b, rdb)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						msg := userMsg("hello " + strconv.FormatInt(i, 10))
						msg.ContextID = fmt.Sprintf("bench-%d-%d-%d", run, w, i)
						r, err := clients[int(i)%len(clients)].c.SendMessage(context.Background(), &a2a.SendMessageRequest{Message: msg})
						if err != nil {
							b.Errorf("send: %v", err)
							return
						}
						if task, ok := r.(*a2a.Task); ok && task.Status.State != a2a.TaskStateCompleted {
							b.Errorf("task %s", task.Status.State)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
			if bc.redis {
				b.ReportMetric(float64(commands(b, rdb)-before)/float64(b.N), "redis-cmds/task")
				after := commandStats(b, rdb)
				var parts []string
				for name, n := range after {
					if d := n - beforeStats[name]; d > 0 {
						parts = append(parts, fmt.Sprintf("%s %.1f", name, float64(d)/float64(b.N)))
					}
				}
				slices.Sort(parts)
				b.Logf("Redis commands per task: %s", strings.Join(parts, ", "))
			}
		})
	}
}

type a2aClient struct {
	c interface {
		SendMessage(context.Context, *a2a.SendMessageRequest) (a2a.SendMessageResult, error)
	}
}

// commandStats is the number of calls of each command (INFO commandstats).
func commandStats(b *testing.B, rdb *redis.Client) map[string]int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// commands is the number of commands Redis has processed.
func commands(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func benchPlugin(b *testing.B, dir, name string) {
	src := filepath.Join("..", "examples", "plugins", name)
	wasm, err := os.ReadFile(filepath.Join(src, name+".wasm"))
	if err != nil {
		b.Fatalf("read %s wasm (run make plugins-go): %v", name, err)
	}
	dst := filepath.Join(dir, name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, name+".wasm"), wasm, 0o644); err != nil {
		b.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(src, "plugin.template.json"))
	if err != nil {
		b.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(tmpl, &m)
	// The template's grant and rules file name a placeholder only the build
	// fills: the benchmark plays the demo script alone.
	if caps, ok := m["capabilities"].(map[string]any); ok {
		delete(caps, "allowedPaths")
	}
	delete(m, "config")
	sum := sha256.Sum256(wasm)
	m["sha256"] = hex.EncodeToString(sum[:])
	mb, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dst, "plugin.json"), mb, 0o644); err != nil {
		b.Fatal(err)
	}
}

type benchProc struct {
	cmd  *exec.Cmd
	base string
}

func startBenchProc(b *testing.B, bin, dir string, cfg map[string]any) *benchProc {
	cb, _ := json.Marshal(cfg)
	config := filepath.Join(dir, "looopy.json")
	if err := os.WriteFile(config, cb, 0o644); err != nil {
		b.Fatal(err)
	}
	ln := freeAddrTB(b)
	cmd := exec.Command(bin, "-config", config, "-addr", ln, "-public-url", "http://"+ln)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &benchProc{cmd: cmd, base: "http://" + ln}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := http.Get(p.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			b.Fatal("host not ready after 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *benchProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
}

func freeAddrTB(b *testing.B) string {
	l, err := (&netListen{}).listen()
	if err != nil {
		b.Fatal(err)
	}
	return l
}

type netListen struct{}

func (netListen) listen() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
