package artifacts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/looopy-go/looopy/loop"
)

func writable(m metaRecord, kind Kind) error {
	if m.Status != StatusBuilding {
		return &StateError{ID: m.ID, Status: m.Status}
	}
	if m.Kind != kind {
		return fmt.Errorf("%w: artifact %q is a %s", ErrWrongKind, m.ID, m.Kind)
	}
	return nil
}

// putPart makes the stored form of a part's bytes: inline, or a new blob.
func (d *DB) putPart(ctx context.Context, id string, data []byte, rows int) (part, error) {
	if int64(len(data)) > d.maxPart {
		return part{}, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(data), d.maxPart)
	}
	if int64(len(data)) <= d.inlineMax {
		return part{Inline: data, Size: int64(len(data)), Rows: rows}, nil
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	key := id + "/" + hex.EncodeToString(r[:])
	n, err := d.blobs.Put(ctx, key, bytesReader(data))
	if err != nil {
		if ctx.Err() != nil {
			return part{}, err
		}
		return part{}, &storageError{err}
	}
	return part{Blob: key, Size: n, Rows: rows}, nil
}

// dropBlob removes a blob after the record that named it is gone; failure
// is logged, since the write it belongs to has already happened.
func (d *DB) dropBlob(ctx context.Context, key string) {
	if key == "" {
		return
	}
	if err := d.blobs.Delete(context.WithoutCancel(ctx), key); err != nil {
		d.log.Warn("artifact blob not removed", "key", key, "err", err)
	}
}

// errSpill aborts the one-transaction path of appendPart when the part is
// too large to keep inline.
var errSpill = errors.New("part goes to a blob")

// appendPart is the common path of AppendChunk and AppendRows: check the
// record and build the part's bytes, store them, update the record. A part
// that fits inline takes one transaction; a larger one is written to a
// blob first and recorded by a second transaction. The caller holds the
// artifact's lock, so the record cannot change in between.
func (d *DB) appendPart(ctx context.Context, id string, kind Kind, last bool, build func(metaRecord) ([]byte, int, error)) (Info, error) {
	var m metaRecord
	var data []byte
	var rows int
	now := d.now().UTC()
	commit := func(tx kvTxn, p part) error {
		if len(data) > 0 {
			if err := tx.set(partKey(id, m.Parts), encodePart(p)); err != nil {
				return err
			}
			m.Parts++
			m.Size += p.Size
			m.Rows += int64(rows)
			m.Version++
		}
		m.UpdatedAt = now
		if last {
			m.Status, m.CompletedAt = StatusComplete, now
		}
		return d.save(tx, m)
	}
	err := d.kv.update(func(tx kvTxn) error {
		var err error
		if m, err = d.load(tx, id); err != nil {
			return err
		}
		if err := writable(m, kind); err != nil {
			return err
		}
		if data, rows, err = build(m); err != nil {
			return err
		}
		if int64(len(data)) > d.maxPart {
			return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(data), d.maxPart)
		}
		if int64(len(data)) > d.inlineMax {
			return errSpill
		}
		return commit(tx, part{Inline: data, Size: int64(len(data)), Rows: rows})
	})
	if !errors.Is(err, errSpill) {
		if err != nil {
			return Info{}, err
		}
		return m.Info, nil
	}
	p, err := d.putPart(ctx, id, data, rows)
	if err != nil {
		return Info{}, err
	}
	err = d.kv.update(func(tx kvTxn) error {
		if m, err = d.load(tx, id); err != nil {
			return err
		}
		if err := writable(m, kind); err != nil {
			return err
		}
		return commit(tx, p)
	})
	if err != nil {
		d.dropBlob(ctx, p.Blob)
		return Info{}, err
	}
	return m.Info, nil
}

// AppendChunk implements Store.
func (d *DB) AppendChunk(ctx context.Context, id string, data []byte, last bool) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("append to artifact %q: %w", id, err)
	}
	if len(data) == 0 && !last {
		return Info{}, fmt.Errorf("append to artifact %q: %w", id, invalid("empty chunk"))
	}
	defer d.lock(id)()
	info, err := d.appendPart(ctx, id, KindFile, last, func(m metaRecord) ([]byte, int, error) {
		if !m.Binary && !utf8.Valid(data) {
			return nil, 0, invalid("chunk is not valid UTF-8 text; create a binary artifact for bytes")
		}
		return data, 0, nil
	})
	if err != nil {
		err = d.failOnStorage(ctx, id, err)
		return Info{}, fmt.Errorf("append to artifact %q: %w", id, err)
	}
	return info, nil
}

// ReplaceChunk implements Store.
func (d *DB) ReplaceChunk(ctx context.Context, id string, index int, data []byte) (Info, error) {
	info, err := d.replacePart(ctx, id, KindFile, index, data, func(m metaRecord) error {
		if index < 0 || index >= m.Parts {
			return fmt.Errorf("%w: part %d of artifact %q, which has %d parts", ErrPartRange, index, id, m.Parts)
		}
		if !m.Binary && !utf8.Valid(data) {
			return invalid("chunk is not valid UTF-8 text; create a binary artifact for bytes")
		}
		return nil
	})
	if err != nil {
		return Info{}, fmt.Errorf("replace part %d of artifact %q: %w", index, id, d.failOnStorage(ctx, id, err))
	}
	return info, nil
}

// WriteData implements Store.
func (d *DB) WriteData(ctx context.Context, id string, data map[string]any) (Info, error) {
	_, b, err := CanonicalData(data)
	if err != nil {
		return Info{}, fmt.Errorf("write data artifact %q: %w", id, err)
	}
	info, err := d.replacePart(ctx, id, KindData, 0, b, nil)
	if err != nil {
		return Info{}, fmt.Errorf("write data artifact %q: %w", id, d.failOnStorage(ctx, id, err))
	}
	return info, nil
}

// replacePart stores data as part index (index == Parts appends, for the
// first write of a data artifact) and removes the old part's blob.
func (d *DB) replacePart(ctx context.Context, id string, kind Kind, index int, data []byte, check func(metaRecord) error) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	defer d.lock(id)()
	var m metaRecord
	err := d.kv.view(func(tx kvTxn) error {
		var err error
		if m, err = d.load(tx, id); err != nil {
			return err
		}
		if err := writable(m, kind); err != nil {
			return err
		}
		if check != nil {
			return check(m)
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	p, err := d.putPart(ctx, id, data, 0)
	if err != nil {
		return Info{}, err
	}
	var old part
	now := d.now().UTC()
	err = d.kv.update(func(tx kvTxn) error {
		if m, err = d.load(tx, id); err != nil {
			return err
		}
		if err := writable(m, kind); err != nil {
			return err
		}
		key := partKey(id, index)
		prev, err := tx.get(key, nil)
		switch {
		case err == nil:
			if old, err = decodePart(prev); err != nil {
				return &loop.CorruptError{Key: string(key), Err: err}
			}
			m.Size -= old.Size
		case errors.Is(err, errNoKey) && kind == KindData:
			m.Parts, m.Size = 1, 0
		default:
			if errors.Is(err, errNoKey) {
				return fmt.Errorf("%w: part %d missing", ErrPartRange, index)
			}
			return err
		}
		if err := tx.set(key, encodePart(p)); err != nil {
			return err
		}
		m.Size += p.Size
		m.Version++
		m.UpdatedAt = now
		return d.save(tx, m)
	})
	if err != nil {
		d.dropBlob(ctx, p.Blob)
		return Info{}, err
	}
	d.dropBlob(ctx, old.Blob)
	return m.Info, nil
}

// AppendRows implements Store.
func (d *DB) AppendRows(ctx context.Context, id string, rows []Row, last bool) (Info, []Row, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, nil, fmt.Errorf("append rows to artifact %q: %w", id, err)
	}
	if len(rows) == 0 && !last {
		return Info{}, nil, fmt.Errorf("append rows to artifact %q: %w", id, invalid("no rows"))
	}
	defer d.lock(id)()
	var norm []Row
	info, err := d.appendPart(ctx, id, KindDataset, last, func(m metaRecord) ([]byte, int, error) {
		var err error
		if norm, err = NormalizeRows(m.Schema, rows, m.Rows); err != nil {
			return nil, 0, err
		}
		var data []byte
		enc := newRowEncoder(m.Schema)
		for _, r := range norm {
			if data, err = enc.append(data, r); err != nil {
				return nil, 0, err
			}
		}
		return data, len(norm), nil
	})
	if err != nil {
		err = d.failOnStorage(ctx, id, err)
		return Info{}, nil, fmt.Errorf("append rows to artifact %q: %w", id, err)
	}
	return info, norm, nil
}

// failOnStorage ends artifact id as failed when err is the storage's own
// (a write refused on a full disk, a blob or record not written): left
// building, the artifact would wait forever for writes that could not be
// taken. The write's blob is gone already and nothing of it is recorded.
// The failed status is written past Config.Writable (one small record,
// within the margin the disk check keeps). It returns a *WriteFailedError,
// or err as it was for any other error (or when even the failed status
// could not be written). The artifact's write lock is held by the caller.
func (d *DB) failOnStorage(ctx context.Context, id string, err error) error {
	var se *storageError
	if !errors.As(err, &se) {
		return err
	}
	reason := "write failed: " + se.err.Error()
	var m metaRecord
	now := d.now().UTC()
	ferr := d.raw.update(func(tx kvTxn) error {
		var err error
		if m, err = d.load(tx, id); err != nil {
			return err
		}
		if m.Status != StatusBuilding {
			return &StateError{ID: id, Status: m.Status}
		}
		m.Status, m.Error, m.UpdatedAt, m.CompletedAt = StatusFailed, reason, now, now
		return d.save(tx, m)
	})
	if ferr != nil {
		d.log.Warn("artifact left building after a failed write", "id", id, "err", ferr)
		return err
	}
	return &WriteFailedError{Info: m.Info, Err: se.err}
}

// Complete implements Store.
func (d *DB) Complete(ctx context.Context, id string) (Info, error) {
	info, err := d.finish(ctx, id, StatusComplete, "")
	if err != nil {
		return Info{}, fmt.Errorf("complete artifact %q: %w", id, err)
	}
	return info, nil
}

// Fail implements Store.
func (d *DB) Fail(ctx context.Context, id string, reason string) (Info, error) {
	info, err := d.finish(ctx, id, StatusFailed, reason)
	if err != nil {
		return Info{}, fmt.Errorf("fail artifact %q: %w", id, err)
	}
	return info, nil
}

func (d *DB) finish(ctx context.Context, id string, st Status, reason string) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	defer d.lock(id)()
	var m metaRecord
	now := d.now().UTC()
	err := d.kv.update(func(tx kvTxn) error {
		var err error
		if m, err = d.load(tx, id); err != nil {
			return err
		}
		if m.Status != StatusBuilding {
			return &StateError{ID: id, Status: m.Status}
		}
		m.Status, m.Error, m.UpdatedAt, m.CompletedAt = st, reason, now, now
		return d.save(tx, m)
	})
	return m.Info, err
}
