package host

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// durableLister lists the tasks that have a checkpoint or a journal; the
// Badger and memory stores implement it.
type durableLister interface {
	DurableTaskIDs(ctx context.Context) ([]string, error)
}

// What expires on its own and what the cleanup removes, once a task is
// finished:
//   - the task record: at ExpiresAt (Limits.TaskTTL after it ended), by the
//     store;
//   - its event stream: the hub gives a finished stream the same retention;
//   - its artifacts: ExpireTask when it ends, removed by the artifact sweep;
//   - its checkpoint: deleted with the turn's last write; one left behind
//     (a task failed because it could not resume, a task canceled while it
//     waited) is removed by the cleanup as soon as the task is finished;
//   - its journal: kept as long as the task record, so an operator can read
//     it; the cleanup removes it once the record is gone.

// cleanup is the goroutine that removes the checkpoints and journals of
// tasks that are finished or gone. The server owns it.
type cleanup struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// cleanupEvery is how often the cleanup runs: a tenth of the retention,
// between a second and ten minutes.
func cleanupEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/10, time.Second), 10*time.Minute)
}

// startCleanup starts the cleanup when the stores keep checkpoints and a
// journal that can be listed; otherwise there is nothing to clean.
func (s *Server) startCleanup() *cleanup {
	lister, ok := s.stores.Journal.(durableLister)
	if !ok || s.stores.Checkpoints == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &cleanup{cancel: cancel, done: make(chan struct{})}
	every := cleanupEvery(time.Duration(s.cfg.Limits.TaskTTL))
	go func() {
		defer close(c.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if n, err := s.tasks.sweepDurable(ctx, lister); err != nil && ctx.Err() == nil {
				s.log.LogAttrs(ctx, slog.LevelWarn, "cleanup of finished tasks", slog.String("error", err.Error()))
			} else if n > 0 {
				s.log.LogAttrs(ctx, slog.LevelDebug, "cleanup of finished tasks", slog.Int("tasks", n))
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

// stop ends the cleanup and waits for it. A nil cleanup is a no-op.
func (c *cleanup) stop() {
	if c == nil {
		return
	}
	c.cancel()
	<-c.done
}

// sweepDurable removes the journal and checkpoint of every task whose
// record is gone (expired or deleted), and the checkpoint of every
// finished task. A task with a turn running here is left alone. It returns
// how many tasks it cleaned; a failure on one task does not stop the
// others.
func (m *taskManager) sweepDurable(ctx context.Context, lister durableLister) (int, error) {
	ids, err := lister.DurableTaskIDs(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, id := range ids {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if m.runOf(id) != nil {
			continue
		}
		rec, err := m.stores.Tasks.LoadTask(ctx, id)
		gone := errors.Is(err, loop.ErrNotFound)
		switch {
		case err != nil && !gone:
			errs = append(errs, err)
			continue
		case !gone && !rec.Status.Terminal():
			continue // working, or waiting for its client: it still needs them
		}
		if !gone {
			// Finished: only a checkpoint left behind goes (the journal
			// stays as long as the record).
			if _, err := m.stores.Checkpoints.LoadCheckpoint(ctx, id); errors.Is(err, loop.ErrNotFound) {
				continue
			}
		}
		if err := m.stores.Checkpoints.DeleteCheckpoint(ctx, id); err != nil && !errors.Is(err, loop.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		if gone {
			if err := m.stores.Journal.DeleteCalls(ctx, id); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		n++
	}
	return n, errors.Join(errs...)
}
