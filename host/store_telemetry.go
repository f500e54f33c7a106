package host

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/looopy-go/looopy/loop"
)

// tracedStore is the backend's store with spans and a latency histogram on
// the writes that matter: the commit of a finished turn and the turn's
// checkpoints. Every other method is the backend's own.
type tracedStore struct {
	backend
	tel      *telemetry
	duration metric.Float64Histogram
}

var (
	_ loop.TurnCommitter   = (*tracedStore)(nil)
	_ loop.CheckpointStore = (*tracedStore)(nil)
	_ loop.MessageStore    = (*tracedStore)(nil)
	_ loop.TaskStore       = (*tracedStore)(nil)
)

var storeBuckets = []float64{0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1}

func newTracedStore(b backend, tel *telemetry) (*tracedStore, error) {
	d, err := tel.meter.Float64Histogram("looopy.store.write.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the store's synced writes, by operation (commit_turn, checkpoint)."),
		metric.WithExplicitBucketBoundaries(storeBuckets...))
	if err != nil {
		return nil, fmt.Errorf("store metrics: %w", err)
	}
	return &tracedStore{backend: b, tel: tel, duration: d}, nil
}

var (
	opCommit     = metric.WithAttributeSet(attribute.NewSet(attribute.String("op", "commit_turn")))
	opCheckpoint = metric.WithAttributeSet(attribute.NewSet(attribute.String("op", "checkpoint")))
)

// CommitTurn saves a finished turn in one synced write, in a
// store.commit_turn span.
func (s *tracedStore) CommitTurn(ctx context.Context, c loop.TurnCommit) error {
	ctx, done := s.startCommit(ctx, c)
	err := s.backend.CommitTurn(ctx, c)
	done(err)
	return err
}

// startCommit opens the store.commit_turn span of c's write (made by
// CommitTurn, or by the event log with the turn's final events) and
// returns what records its end.
func (s *tracedStore) startCommit(ctx context.Context, c loop.TurnCommit) (context.Context, func(error)) {
	began := time.Now()
	ctx, span := s.tel.startSpan(ctx, "store.commit_turn")
	if span.IsRecording() {
		attrs := []attribute.KeyValue{attribute.String("looopy.context_id", c.ContextID),
			attribute.Int("looopy.messages", len(c.Messages))}
		if c.Task != nil {
			attrs = append(attrs, attribute.String("looopy.task_id", c.Task.ID), attribute.String("looopy.status", string(c.Task.Status)))
		}
		span.SetAttributes(attrs...)
	}
	return ctx, func(err error) { s.end(ctx, span, began, opCommit, err) }
}

// UnwrapCommitter is the backend: an event log of the same store writes a
// turn's commit with the turn's final events (loop.EventCommitter), with
// no store.commit_turn span of its own.
func (s *tracedStore) UnwrapCommitter() loop.TurnCommitter { return s.backend }

// SaveCheckpoint saves a turn's checkpoint, in a store.checkpoint span.
func (s *tracedStore) SaveCheckpoint(ctx context.Context, cp loop.Checkpoint) error {
	began := time.Now()
	ctx, span := s.tel.startSpan(ctx, "store.checkpoint")
	if span.IsRecording() {
		span.SetAttributes(attribute.String("looopy.task_id", cp.TaskID), attribute.Int("looopy.iteration", cp.Iteration),
			attribute.String("looopy.stage", string(cp.Stage)))
	}
	err := s.backend.SaveCheckpoint(ctx, cp)
	s.end(ctx, span, began, opCheckpoint, err)
	return err
}

func (s *tracedStore) end(ctx context.Context, span trace.Span, began time.Time, op metric.MeasurementOption, err error) {
	s.duration.Record(ctx, time.Since(began).Seconds(), op)
	if span.IsRecording() {
		recordError(span, err)
		span.End()
	}
}
