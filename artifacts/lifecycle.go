package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// ListByTask implements Store.
func (d *DB) ListByTask(ctx context.Context, taskID string) ([]Info, error) {
	infos, err := d.list(ctx, taskPrefix(taskID))
	if err != nil {
		return nil, fmt.Errorf("list artifacts of task %q: %w", taskID, err)
	}
	return infos, nil
}

// ListByContext implements Store.
func (d *DB) ListByContext(ctx context.Context, contextID string) ([]Info, error) {
	infos, err := d.list(ctx, ctxPrefix(contextID))
	if err != nil {
		return nil, fmt.Errorf("list artifacts of context %q: %w", contextID, err)
	}
	return infos, nil
}

// indexIDs returns the artifact ids under an index prefix.
func (d *DB) indexIDs(ctx context.Context, prefix []byte) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ids []string
	err := d.kv.view(func(tx kvTxn) error {
		return tx.keys(prefix, func(k []byte) error {
			ids = append(ids, string(k[len(prefix):]))
			return nil
		})
	})
	return ids, err
}

func (d *DB) list(ctx context.Context, prefix []byte) ([]Info, error) {
	ids, err := d.indexIDs(ctx, prefix)
	if err != nil {
		return nil, err
	}
	infos := make([]Info, 0, len(ids))
	err = d.kv.view(func(tx kvTxn) error {
		for _, id := range ids {
			m, err := d.load(tx, id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			infos = append(infos, m.Info)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(infos, func(a, b Info) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return infos, nil
}

// deleteBatch bounds the keys one transaction deletes (Badger refuses
// transactions that grow too large).
const deleteBatch = 1000

// Delete implements Store. It marks the record as being deleted (from then
// on the artifact is invisible), removes its parts and their blobs in
// batches, and then the record and its index keys. If the process stops
// halfway, the next Delete, DeleteTask or Sweep of it finishes the job.
func (d *DB) Delete(ctx context.Context, id string) error {
	if err := d.delete(ctx, id); err != nil {
		return fmt.Errorf("delete artifact %q: %w", id, err)
	}
	return nil
}

func (d *DB) delete(ctx context.Context, id string) error {
	return d.deleteWith(ctx, d.kv, id)
}

// deleteWith deletes artifact id through k (d.kv, or d.sweepKV for Sweep).
func (d *DB) deleteWith(ctx context.Context, k kv, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !ValidID(id) {
		return nil
	}
	defer d.lock(id)()
	var m metaRecord
	err := k.update(func(tx kvTxn) error {
		var err error
		if m, err = d.loadRaw(tx, id); err != nil {
			return err
		}
		if m.Deleting {
			return nil
		}
		m.Deleting = true
		if err := tx.set(delKey(id), nil); err != nil {
			return err
		}
		return d.save(tx, m)
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := d.dropParts(ctx, k, id); err != nil {
		return err
	}
	return k.update(func(tx kvTxn) error {
		for _, k := range [][]byte{metaKey(id), ctxKey(m.ContextID, id), taskKey(m.TaskID, id), delKey(id)} {
			if err := tx.del(k); err != nil {
				return err
			}
		}
		if !m.ExpiresAt.IsZero() {
			return tx.del(expKey(m.ExpiresAt.UnixNano(), id))
		}
		return nil
	})
}

// DeleteTask implements Store.
func (d *DB) DeleteTask(ctx context.Context, taskID string) error {
	ids, err := d.indexIDs(ctx, taskPrefix(taskID))
	if err != nil {
		return fmt.Errorf("delete artifacts of task %q: %w", taskID, err)
	}
	for _, id := range ids {
		if err := d.delete(ctx, id); err != nil {
			return fmt.Errorf("delete artifacts of task %q: artifact %q: %w", taskID, id, err)
		}
	}
	return nil
}

// ExpireTask implements Store. Its writes (an expiry and its index entry
// per artifact, what lets Sweep delete it) ask Config.Deletable, as the
// sweep's do.
func (d *DB) ExpireTask(ctx context.Context, taskID string, ttl time.Duration) error {
	if ttl <= 0 {
		return d.DeleteTask(ctx, taskID)
	}
	ids, err := d.indexIDs(ctx, taskPrefix(taskID))
	if err != nil {
		return fmt.Errorf("expire artifacts of task %q: %w", taskID, err)
	}
	at := d.now().Add(ttl).UTC()
	for _, id := range ids {
		err := func() error {
			defer d.lock(id)()
			return d.sweepKV.update(func(tx kvTxn) error {
				m, err := d.loadRaw(tx, id)
				if errors.Is(err, ErrNotFound) {
					return nil
				}
				if err != nil {
					return err
				}
				if !m.ExpiresAt.IsZero() {
					if err := tx.del(expKey(m.ExpiresAt.UnixNano(), id)); err != nil {
						return err
					}
				}
				m.ExpiresAt = at
				if err := tx.set(expKey(at.UnixNano(), id), nil); err != nil {
					return err
				}
				return d.save(tx, m)
			})
		}()
		if err != nil {
			return fmt.Errorf("expire artifacts of task %q: artifact %q: %w", taskID, id, err)
		}
	}
	return nil
}

// Sweep implements Store. The host's cleanup loop calls it. It also
// finishes deletions that a stopped process left halfway.
func (d *DB) Sweep(ctx context.Context) (int, error) {
	now := d.now().UnixNano()
	var ids []string
	err := d.kv.view(func(tx kvTxn) error {
		if err := tx.keys(delPrefix, func(k []byte) error {
			ids = append(ids, string(k[len(delPrefix):]))
			return nil
		}); err != nil {
			return err
		}
		return tx.keys(expPrefix, func(k []byte) error {
			rest := k[len(expPrefix):]
			i := bytes.IndexByte(rest, '/')
			if i < 0 {
				return nil
			}
			at, err := strconv.ParseInt(string(rest[:i]), 10, 64)
			if err != nil {
				return nil
			}
			if at > now {
				return errStop
			}
			ids = append(ids, string(rest[i+1:]))
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("sweep artifacts: %w", err)
	}
	for i, id := range ids {
		if err := d.deleteWith(ctx, d.sweepKV, id); err != nil {
			return i, fmt.Errorf("sweep artifacts: %w", err)
		}
	}
	return len(ids), nil
}

// SweepEvery calls Sweep every interval until ctx is done, and returns
// ctx's error then. The host runs it in its cleanup goroutine; a failed
// sweep is logged and retried at the next tick.
func (d *DB) SweepEvery(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("sweep artifacts: %w", invalid("interval must be positive"))
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if n, err := d.Sweep(ctx); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				d.log.Warn("artifact sweep failed", "err", err)
			} else if n > 0 {
				d.log.Debug("expired artifacts removed", "count", n)
			}
		}
	}
}

// dropParts removes every part of artifact id, in batches of deleteBatch,
// writing through k: each batch's blobs first, then its keys, so that a
// crash between the two leaves keys naming blobs already gone (passed over
// when the deletion runs again) and never a blob that no key names, which
// nothing would ever remove. A part that cannot be decoded is removed all
// the same.
func (d *DB) dropParts(ctx context.Context, k kv, id string) error {
	prefix := partPrefix(id)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var keys [][]byte
		var blobs []string
		err := d.kv.view(func(tx kvTxn) error {
			return tx.keys(prefix, func(key []byte) error {
				key = bytes.Clone(key)
				v, err := tx.get(key, nil)
				if err != nil {
					return err
				}
				if p, err := decodePart(v); err == nil && p.Blob != "" {
					blobs = append(blobs, p.Blob)
				}
				keys = append(keys, key)
				if len(keys) == deleteBatch {
					return errStop
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		for _, b := range blobs {
			if err := d.blobs.Delete(ctx, b); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		}
		if err := k.update(func(tx kvTxn) error {
			for _, key := range keys {
				if err := tx.del(key); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
}
