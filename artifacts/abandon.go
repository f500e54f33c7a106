package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// Abandoned artifacts. An artifact is written by calls of one task (a
// tool's artifact_write, the model's artifact tools, a call over MCP); once
// that task has ended, or the process that ran its calls died, an artifact
// still building can never be completed. Left so, it stays building for
// ever, holding the parts it was given (a failed status record refused on
// a full disk left it so too). Abandoning it ends it failed with a reason
// and removes what it held: its part records and their blobs first (blobs
// before the records that name them, so a crash midway leaves it building
// and the next pass goes on), then the failed status with no part. Its
// record stays, so a reader learns why, until it expires with its task.
//
// The writes ask Config.Deletable, as the sweep's do: they only remove
// data, and one small record per artifact ends it.

// AbandonTask abandons the artifacts of task taskID still building: the
// host calls it when the task has ended (its turn's task finished, its
// MCP call returned), when nothing can write them any more. It returns
// how many it ended.
func (d *DB) AbandonTask(ctx context.Context, taskID, reason string) (int, error) {
	ids, err := d.indexIDs(ctx, taskPrefix(taskID))
	if err != nil {
		return 0, fmt.Errorf("abandon artifacts of task %q: %w", taskID, err)
	}
	n := 0
	for _, id := range ids {
		ok, err := d.abandon(ctx, id, reason, nil)
		if err != nil {
			return n, fmt.Errorf("abandon artifacts of task %q: artifact %q: %w", taskID, id, err)
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// AbandonBuilding abandons every artifact still building for which dead
// says so (asked with the artifact's write lock held, so no write of it
// runs meanwhile). The host runs it when it starts and with its periodic
// cleanup. It returns how many it ended; a failure on one artifact does
// not stop the others.
func (d *DB) AbandonBuilding(ctx context.Context, dead func(Info) bool, reason string) (int, error) {
	var ids []string
	err := d.kv.view(func(tx kvTxn) error {
		return tx.keys([]byte("arttask/"), func(k []byte) error {
			if i := bytes.LastIndexByte(k, '/'); i >= 0 {
				ids = append(ids, string(k[i+1:]))
			}
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("abandon artifacts: %w", err)
	}
	n := 0
	var errs []error
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		ok, err := d.abandon(ctx, id, reason, dead)
		if err != nil {
			errs = append(errs, fmt.Errorf("artifact %q: %w", id, err))
			continue
		}
		if ok {
			n++
		}
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("abandon artifacts: %w", err)
	}
	return n, nil
}

// abandon ends artifact id failed with reason, and removes its parts, if
// it is building (and dead, when dead is set). ok says it did.
func (d *DB) abandon(ctx context.Context, id, reason string, dead func(Info) bool) (ok bool, err error) {
	if !ValidID(id) {
		return false, nil
	}
	defer d.lock(id)()
	var m metaRecord
	err = d.kv.view(func(tx kvTxn) error {
		var err error
		m, err = d.loadRaw(tx, id)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if m.Status != StatusBuilding || m.Deleting || (dead != nil && !dead(m.Info)) {
		return false, nil
	}
	if err := d.dropParts(ctx, d.sweepKV, id); err != nil {
		return false, err
	}
	now := d.now().UTC()
	err = d.sweepKV.update(func(tx kvTxn) error {
		cur, err := d.loadRaw(tx, id)
		if err != nil {
			return err
		}
		if cur.Status != StatusBuilding || cur.Deleting {
			return errStop
		}
		cur.Status, cur.Error, cur.UpdatedAt, cur.CompletedAt = StatusFailed, reason, now, now
		cur.Parts, cur.Size, cur.Rows = 0, 0, 0
		return d.save(tx, cur)
	})
	if errors.Is(err, errStop) || errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
