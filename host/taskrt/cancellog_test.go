package taskrt

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// levelLog keeps the level and text of every record logged.
type levelLog struct {
	mu   sync.Mutex
	recs []string
}

func (l *levelLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *levelLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *levelLog) WithGroup(string) slog.Handler            { return l }
func (l *levelLog) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		sb.WriteString(" " + a.String())
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, sb.String())
	l.mu.Unlock()
	return nil
}

func (l *levelLog) at(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if strings.HasPrefix(r, level.String()+" ") {
			out = append(out, r)
		}
	}
	return out
}

// A client's cancel that lands just after an answer's turn was saved,
// before the turn read its task, ends the task canceled and is no error:
// nothing is logged at ERROR for it. Before, "turn not started ... context
// canceled" was logged at ERROR.
func TestCancelBeforeTheAnswersTurnReadsItsTaskIsNoError(t *testing.T) {
	t.Parallel()
	logs := &levelLog{}
	tools := &relayTools{}
	var h *harness
	var answering atomic.Value // the task id, once the answer is sent
	canceled := make(chan error, 1)
	h = newHarness(t, t.TempDir(), helperModel{}, func(c *Config) {
		l, err := loop.New(loop.Config{Model: helperModel{}, Toolsets: []loop.Toolset{tools},
			Checkpoints: c.Stores.Checkpoints, Journal: c.Stores.Journal, Subtasks: c.Stores.Tasks})
		if err != nil {
			t.Fatal(err)
		}
		c.Loop, c.Logger = l, slog.New(logs)
		c.Crashpoint = func(p string) {
			id, _ := answering.Load().(string)
			if p != PointTaskSaved || id == "" {
				return
			}
			r := h.rt.Running(id)
			if r == nil {
				return
			}
			// The answer's turn is saved and not launched: the client's
			// cancel lands here.
			go func() {
				_, err := h.rt.Cancel(context.Background(), "alice", id)
				canceled <- err
			}()
			<-r.ctx.Done()
		}
	})
	rec := pausedOnRelay(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	answering.Store(rec.ID)
	st, err := h.rt.Start(ctx, StartRequest{Auth: alice(), TaskID: rec.ID,
		Answers: []loop.InputAnswer{{InputID: rec.OpenRequests()[0].InputID, Decision: loop.DecisionApprove}}})
	if err != nil {
		t.Fatalf("answer: %v", err)
	}
	if err := h.rt.Wait(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	if err := <-canceled; err != nil {
		t.Fatalf("cancel: %v", err)
	}
	got, err := h.db.LoadTask(ctx, rec.ID)
	if err != nil || got.Status != loop.TaskCanceled || got.Message != "canceled by the client" {
		t.Fatalf("task after the cancel: %s %q (%v), want canceled by the client", got.Status, got.Message, err)
	}
	wantChainEnded(t, h, tools, rec.ID)
	if errs := logs.at(slog.LevelError); len(errs) > 0 {
		t.Fatalf("logged at ERROR for a client's cancel: %q", errs)
	}
	if infos := logs.at(slog.LevelInfo); !strings.Contains(strings.Join(infos, "\n"), "canceled by its client") {
		t.Fatalf("no record says the turn was canceled by its client: %q", infos)
	}
}
