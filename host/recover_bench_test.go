package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// seedWorking writes n tasks left working by a crash into a Badger store
// in dir, as a killed host leaves them: the context's metadata, the task
// record with its input, and for every other task a checkpoint after the
// first model call (the others died before it, with no checkpoint).
func seedWorking(tb testing.TB, dir string, n int) []string {
	tb.Helper()
	st, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	now := time.Now().UTC()
	ids := make([]string, n)
	for i := range n {
		cid, tid := fmt.Sprintf("recover-ctx-%04d", i), fmt.Sprintf("recover-task-%04d", i)
		ids[i] = tid
		if err := st.SaveAgent(ctx, loop.AgentMetadata{ContextID: cid, Owner: host.DefaultPrincipal,
			Status: loop.AgentBusy, CreatedAt: now, LastActivity: now}); err != nil {
			tb.Fatal(err)
		}
		input := loop.Message{Role: loop.RoleUser, Content: fmt.Sprintf("hello %d", i)}
		if err := st.SaveTask(ctx, loop.TaskRecord{ID: tid, ContextID: cid, Owner: host.DefaultPrincipal,
			Status: loop.TaskWorking, History: []loop.Message{input}, TurnInput: 1,
			CreatedAt: now, UpdatedAt: now}); err != nil {
			tb.Fatal(err)
		}
		if i%2 == 0 {
			if err := st.SaveCheckpoint(ctx, loop.Checkpoint{TaskID: tid, ContextID: cid, Iteration: 1,
				Stage: loop.StageModel, UpdatedAt: now}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return ids
}

// workingTasks asks the admin API how many tasks are working (up to limit).
func workingTasks(tb testing.TB, base, token string, limit int) int {
	tb.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/admin/tasks?state=working,submitted&limit=%d", base, limit), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
		tb.Fatalf("list working tasks: %d %s", resp.StatusCode, b)
	}
	return len(out.Tasks)
}

// echoModel answers every call at once, in process: with it the figure is
// the host's own cost of taking over and resuming turns.
type echoModel struct{}

func (echoModel) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		Content: "You said: " + req.Messages[len(req.Messages)-1].Content}, FinishReason: loop.FinishStop}, nil
}

// BenchmarkRecover1000 measures a host starting on a store that a crash
// left with 1,000 tasks working: from the start of Main.Run (store opened,
// plugins loaded, every task taken over) to ready (ms-ready/op), and to
// every one of them resumed and finished (ms-all-done/op, the figure ns/op
// also measures), with the scripted-model plugin and with an in-process
// model.
func BenchmarkRecover1000(b *testing.B) {
	const n = 1000
	seed := filepath.Join(b.TempDir(), "seed")
	ids := seedWorking(b, seed, n)
	for _, model := range []string{"plugin", "go"} {
		b.Run("model="+model, func(b *testing.B) {
			var ready, done time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := filepath.Join(b.TempDir(), "data")
				if err := os.CopyFS(dir, os.DirFS(seed)); err != nil {
					b.Fatal(err)
				}
				cfg := baseConfig(dir)
				cfg.Admin.Token = "bench-admin"
				cfg.Limits.Heartbeat = host.Duration(15 * time.Second)
				m := host.NewMain()
				m.Config, m.Stdout = cfg, io.Discard
				if model == "go" {
					m.Model = echoModel{}
				}
				b.StartTimer()
				start := time.Now()
				if err := m.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
				ready += time.Since(start)
				for workingTasks(b, m.URL(), "bench-admin", 1) > 0 {
					time.Sleep(2 * time.Millisecond)
				}
				done += time.Since(start)
				b.StopTimer()
				c := client10(b, m.URL(), "")
				for _, id := range []string{ids[0], ids[n-1]} {
					task, err := c.GetTask(context.Background(), &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
					if err != nil {
						b.Fatalf("get task %s: %v", id, err)
					}
					if task.Status.State != a2a.TaskStateCompleted || len(task.History) < 2 {
						b.Fatalf("task %s after recovery: %s with %d messages", id, task.Status.State, len(task.History))
					}
				}
				if err := m.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(ready.Milliseconds())/float64(b.N), "ms-ready/op")
			b.ReportMetric(float64(done.Milliseconds())/float64(b.N), "ms-all-done/op")
		})
	}
}
