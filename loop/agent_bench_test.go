package loop_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// oneToolModel asks for one tool call, then answers: a turn of two
// iterations, as in a typical tool-using exchange.
type oneToolModel struct{}

func (oneToolModel) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	if req.Messages[len(req.Messages)-1].Role == loop.RoleTool {
		return text("done"), nil
	}
	return calls(call("c1", "noop", `{}`)), nil
}

// BenchmarkDurableTurn measures whole Agent turns (one tool call, history,
// metadata and task record saved, synced) on Badger on disk, with 1 and 64
// contexts taking turns at once. Each op is one turn; turns/s is reported.
func BenchmarkDurableTurn(b *testing.B) {
	for _, contexts := range []int{1, 64} {
		for _, durable := range []bool{false, true} {
			name := fmt.Sprintf("contexts=%d/checkpoints=%v", contexts, durable)
			b.Run(name, func(b *testing.B) {
				benchTurns(b, contexts, func(db *store.Badger, cfg *loop.Config) {
					if durable {
						cfg.Checkpoints, cfg.Journal = durableStores(db)
					}
				})
			})
		}
	}
}

// benchTurns runs whole Agent turns on Badger on disk, one goroutine per
// context, until b.N turns are done; set adjusts the loop's configuration.
func benchTurns(b *testing.B, contexts int, set func(db *store.Badger, cfg *loop.Config)) {
	// The store's memory is the host's default on a machine of 8 GiB or
	// more (host.DefaultStoreMemory).
	db, err := store.Open(store.Options{Dir: b.TempDir(), Memory: 512 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	cfg := loop.Config{Model: oneToolModel{}, Toolsets: []loop.Toolset{instantTools{defs: []loop.ToolDefinition{{Name: "noop"}}}}}
	set(db, &cfg)
	l, err := loop.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	agents := make([]*loop.Agent, contexts)
	for i := range agents {
		agents[i], err = loop.NewAgent(loop.AgentConfig{ContextID: fmt.Sprint("bench-", i), Loop: l,
			Messages: db, Agents: db, Tasks: db, Commit: db, HistoryLimit: 20})
		if err != nil {
			b.Fatal(err)
		}
		if err := agents[i].Start(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	// One goroutine per context, each taking turns until b.N are done.
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, contexts)
	b.ReportAllocs()
	b.ResetTimer()
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; done.Add(1) <= int64(b.N); n++ {
				out, err := a.Turn(context.Background(), loop.TurnInput{TaskID: fmt.Sprintf("t%d-%d", i, n),
					Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}}})
				if err == nil && out.Status != loop.TaskCompleted {
					err = fmt.Errorf("turn ended %s: %v", out.Status, out.Err)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
}
