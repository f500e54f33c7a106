package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/looopy-go/looopy/loop"
)

var _ loop.CancelSignals = (*Store)(nil)

// A cancel request is a key with an expiry (cx:<task>), found by the
// renewal of the turn's lease, and a message on one Pub/Sub channel (cxc)
// that wakes the process running the turn at once. Pub/Sub delivers only
// to those connected: the key is what a watcher whose connection dropped
// finds later.
func (s *Store) cancelKey(taskID string) string { return s.p + "cx:" + taskID }
func (s *Store) cancelChannel() string          { return s.p + "cxc" }

// RequestCancel implements loop.CancelSignals.
func (s *Store) RequestCancel(ctx context.Context, taskID string, ttl time.Duration) error {
	if err := s.checkID("task id", taskID); err != nil {
		return fmt.Errorf("request cancel: %w", err)
	}
	if ttl <= 0 {
		return fmt.Errorf("request cancel: %w: ttl %v is not positive", loop.ErrInvalid, ttl)
	}
	if err := ctxErr(ctx, "request cancel"); err != nil {
		return err
	}
	pipe := s.rdb.TxPipeline()
	pipe.Set(ctx, s.cancelKey(taskID), "1", ttl)
	pipe.Publish(ctx, s.cancelChannel(), taskID)
	_, err := pipe.Exec(ctx)
	return wrap(fmt.Sprintf("request cancel of %q", taskID), err)
}

// CancelRequested implements loop.CancelSignals.
func (s *Store) CancelRequested(ctx context.Context, taskID string) (bool, error) {
	if err := s.checkID("task id", taskID); err != nil {
		return false, fmt.Errorf("cancel requested: %w", err)
	}
	if err := ctxErr(ctx, "cancel requested"); err != nil {
		return false, err
	}
	n, err := s.rdb.Exists(ctx, s.cancelKey(taskID)).Result()
	if err != nil {
		return false, wrap(fmt.Sprintf("cancel requested of %q", taskID), err)
	}
	return n > 0, nil
}

// WatchCancels implements loop.CancelSignals. It returns once subscribed
// only through fn's calls; the subscription is made before it first
// waits, and go-redis subscribes again after a dropped connection.
func (s *Store) WatchCancels(ctx context.Context, fn func(taskID string)) error {
	sub := s.rdb.Subscribe(ctx, s.cancelChannel())
	defer func() { _ = sub.Close() }()
	// Wait for the confirmation: requests made after it are heard.
	if _, err := sub.Receive(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return wrap("watch cancels", err)
	}
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case msg, ok := <-ch:
			if !ok {
				return ctx.Err()
			}
			fn(msg.Payload)
		}
	}
}
