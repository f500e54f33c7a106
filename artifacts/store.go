package artifacts

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// Store keeps artifacts. Implementations are safe for concurrent use.
//
// Writes to one artifact are linearizable: each append takes the next part
// index atomically, and a reader opened after a write returns sees it.
// Concurrent appends to one artifact are each stored whole at their own
// index, in the order they reach the artifact; appends made one after the
// other by one goroutine keep their order. (Writer adds: the events of an
// artifact come out in index order.)
// Cancelling ctx aborts the call; a write either happened whole or not at
// all. Reads stream: no method holds a whole artifact in memory.
type Store interface {
	Reader
	// Create makes a new, building artifact and returns its Info.
	Create(ctx context.Context, spec Spec) (Info, error)

	// AppendChunk adds a chunk at the end of a file artifact; last
	// completes it. A text artifact's chunks must be valid UTF-8. An empty
	// chunk is allowed only with last (it just completes).
	AppendChunk(ctx context.Context, id string, data []byte, last bool) (Info, error)
	// ReplaceChunk swaps chunk index of a building file artifact.
	ReplaceChunk(ctx context.Context, id string, index int, data []byte) (Info, error)
	// WriteData replaces a data artifact's object; its version grows by one.
	WriteData(ctx context.Context, id string, data map[string]any) (Info, error)
	// AppendRows adds a batch of rows at the end of a dataset, all or none:
	// a row that does not match the schema refuses the batch with a
	// *RowError. It returns the rows as stored (see NormalizeRows); last
	// completes the dataset.
	AppendRows(ctx context.Context, id string, rows []Row, last bool) (Info, []Row, error)
	// Complete ends a building artifact: status complete.
	Complete(ctx context.Context, id string) (Info, error)
	// Fail ends a building artifact: status failed, with the reason.
	Fail(ctx context.Context, id string, reason string) (Info, error)

	// OpenPart streams one part: a chunk, a batch's JSON lines, the data.
	OpenPart(ctx context.Context, id string, index int) (io.ReadCloser, error)

	// ListByTask and ListByContext return the artifacts of a task or a
	// context, oldest first.
	ListByTask(ctx context.Context, taskID string) ([]Info, error)
	ListByContext(ctx context.Context, contextID string) ([]Info, error)

	// Delete removes an artifact and its blobs. A missing one is not an error.
	Delete(ctx context.Context, id string) error
	// DeleteTask deletes every artifact of a task.
	DeleteTask(ctx context.Context, taskID string) error
	// ExpireTask makes every artifact of a task expire after ttl (<= 0: now),
	// as the task record does. Expired artifacts are invisible at once and
	// removed, blobs included, by Sweep.
	ExpireTask(ctx context.Context, taskID string, ttl time.Duration) error
	// Sweep deletes the artifacts whose time has passed and returns how many.
	Sweep(ctx context.Context) (int, error)
}

// Reader is what serving an artifact needs (see Export).
type Reader interface {
	// Get returns an artifact's Info; ErrNotFound if it does not exist or
	// has expired.
	Get(ctx context.Context, id string) (Info, error)
	// Open streams the content: a file's bytes, a data artifact's JSON, a
	// dataset's JSON lines (see AppendRowJSON). The reader sees the parts
	// that existed when Open returned. Cancelling ctx makes later reads
	// fail; the caller must Close the reader.
	Open(ctx context.Context, id string) (io.ReadCloser, Info, error)
}

// Config configures a DB. Zero fields mean their default.
type Config struct {
	// InlineMax is the largest part kept in Badger itself; larger parts go
	// to blob storage. Default 1 MiB.
	InlineMax int64
	// MaxPartSize refuses larger parts (chunks, batches, data). Default 64 MiB.
	MaxPartSize int64
	// BlobDir is the folder of the default blob store when Open is given
	// none. Default: "artifact-blobs" beside the Badger folder.
	BlobDir string
	// Logger reports cleanup problems that do not fail a call (a blob
	// that could not be removed). Nil: discard.
	Logger *slog.Logger
	// Now is the clock, for tests. Nil: time.Now.
	Now func() time.Time
	// Writable, when set, is asked before every write the store makes (a
	// record's transaction; a blob, before it and after each BlobCheckEvery
	// bytes of it): an error refuses the write, and the call returns it
	// with nothing of the write visible. The host gives the Badger store's
	// check of its disk (store.ErrNoSpace below half of store.minFreeBytes
	// free), so artifacts cannot fill the disk Badger writes through its
	// memory maps.
	Writable func() error
	// Deletable, when set with Writable, is asked instead of it before
	// the writes of Sweep, which only remove what has expired (and mark
	// a record as being deleted), and of ExpireTask, which gives a
	// finished task's artifacts their expiry (once per task, what lets
	// Sweep remove them): the host gives the Badger store's check
	// for its cleanup, which lets deletes through below the floor where
	// Writable refuses, while a reserve lasts, so a full disk can free
	// itself. Other deletes (a client's, a tool's) still ask Writable.
	Deletable func() error
}

// BlobCheckEvery is how many bytes of a blob are written between two
// questions to Config.Writable.
const BlobCheckEvery = 1 << 20

const (
	defaultInlineMax   = 1 << 20
	defaultMaxPartSize = 64 << 20
	lockStripes        = 64
)

// DB is the artifact store: records in Badger (or in memory), large parts
// in a BlobStore. It is safe for concurrent use within one process.
type DB struct {
	kv        kv
	raw       kv // kv without Config.Writable's check (failOnStorage)
	sweepKV   kv // kv with Config.Deletable's check (Sweep, ExpireTask)
	blobs     BlobStore
	inlineMax int64
	maxPart   int64
	log       *slog.Logger
	now       func() time.Time
	seed      maphash.Seed
	// mu serializes the writes of one artifact (striped by id); order
	// serializes a write and its events (see Writer).
	mu    [lockStripes]sync.Mutex
	order [lockStripes]sync.Mutex
}

var _ Store = (*DB)(nil)

// Open returns a store over an open Badger database, shared with the rest
// of the host (its keys all start with "art"). blobs nil means a LocalBlobs
// in cfg.BlobDir, or in memory when Badger runs in memory. The caller keeps
// owning db: Close does not close it.
func Open(db *badger.DB, blobs BlobStore, cfg Config) (*DB, error) {
	if db == nil {
		return nil, fmt.Errorf("open artifact store: %w", invalid("no Badger database"))
	}
	if blobs == nil {
		opts := db.Opts()
		switch {
		case cfg.BlobDir != "":
			b, err := OpenLocal(LocalConfig{Dir: cfg.BlobDir})
			if err != nil {
				return nil, fmt.Errorf("open artifact store: %w", err)
			}
			blobs = b
		case opts.InMemory:
			blobs = NewMemoryBlobs()
		default:
			b, err := OpenLocal(LocalConfig{Dir: filepath.Join(opts.Dir, "artifact-blobs")})
			if err != nil {
				return nil, fmt.Errorf("open artifact store: %w", err)
			}
			blobs = b
		}
	}
	d := newDB(badgerKV{db}, blobs, cfg)
	// An inline part rides in one transaction with its record. Badger
	// counts a value under its ValueThreshold at full size against the
	// transaction limit, so keep such parts well inside it.
	if opts := db.Opts(); d.inlineMax < opts.ValueThreshold {
		if limit := db.MaxBatchSize() / 2; d.inlineMax > limit {
			d.log.Info("artifact inline part size lowered to fit Badger transactions", "from", d.inlineMax, "to", limit)
			d.inlineMax = limit
		}
	}
	return d, nil
}

// NewMemory returns a store held in memory, for tests and embedding. blobs
// nil means a MemoryBlobs.
func NewMemory(blobs BlobStore, cfg Config) *DB {
	if blobs == nil {
		blobs = NewMemoryBlobs()
	}
	return newDB(newMemKV(), blobs, cfg)
}

func newDB(k kv, blobs BlobStore, cfg Config) *DB {
	raw, sweep := k, k
	if cfg.Writable != nil {
		k = guardedKV{kv: k, check: cfg.Writable}
		sweep = k
		blobs = guardedBlobs{BlobStore: blobs, check: cfg.Writable}
		if cfg.Deletable != nil {
			sweep = guardedKV{kv: raw, check: cfg.Deletable}
		}
	}
	d := &DB{kv: k, raw: raw, sweepKV: sweep, blobs: blobs, inlineMax: cfg.InlineMax, maxPart: cfg.MaxPartSize, log: cfg.Logger, now: cfg.Now, seed: maphash.MakeSeed()}
	if d.inlineMax <= 0 {
		d.inlineMax = defaultInlineMax
	}
	if d.maxPart <= 0 {
		d.maxPart = defaultMaxPartSize
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.now == nil {
		d.now = time.Now
	}
	return d
}

// Close releases nothing today (the Badger database belongs to the caller);
// it exists so the store can grow resources without changing callers.
func (d *DB) Close() error { return nil }

// Blobs returns the blob store in use.
func (d *DB) Blobs() BlobStore { return d.blobs }

func (d *DB) stripe(id string) int { return int(maphash.String(d.seed, id) % lockStripes) }

func (d *DB) lock(id string) func() {
	m := &d.mu[d.stripe(id)]
	m.Lock()
	return m.Unlock
}

// orderLock serializes a write with the events that announce it.
func (d *DB) orderLock(id string) func() {
	m := &d.order[d.stripe(id)]
	m.Lock()
	return m.Unlock
}

// load reads an artifact's record; ErrNotFound when absent, being deleted
// or expired.
func (d *DB) load(tx kvTxn, id string) (metaRecord, error) {
	m, err := d.loadRaw(tx, id)
	if err != nil {
		return m, err
	}
	if m.Deleting || (!m.ExpiresAt.IsZero() && !d.now().Before(m.ExpiresAt)) {
		return m, notFound(id)
	}
	return m, nil
}

func (d *DB) loadRaw(tx kvTxn, id string) (metaRecord, error) {
	if !ValidID(id) {
		return metaRecord{}, notFound(id)
	}
	key := metaKey(id)
	b, err := tx.get(key, nil)
	if errors.Is(err, errNoKey) {
		return metaRecord{}, notFound(id)
	}
	if err != nil {
		return metaRecord{}, err
	}
	m, err := decodeMeta(b)
	if err != nil {
		return m, &loop.CorruptError{Key: string(key), Err: err}
	}
	return m, nil
}

func (d *DB) save(tx kvTxn, m metaRecord) error {
	b, err := encodeMeta(m)
	if err != nil {
		return err
	}
	return tx.set(metaKey(m.ID), b)
}

// Create implements Store.
func (d *DB) Create(ctx context.Context, spec Spec) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("create artifact: %w", err)
	}
	spec, err := spec.validate()
	if err != nil {
		return Info{}, fmt.Errorf("create artifact: %w", err)
	}
	if spec.ID == "" {
		spec.ID = NewID()
	}
	now := d.now().UTC()
	m := metaRecord{Info: Info{
		ID: spec.ID, Kind: spec.Kind, TaskID: spec.TaskID, ContextID: spec.ContextID, Owner: spec.Owner,
		Name: spec.Name, Description: spec.Description, MimeType: spec.MimeType, Binary: spec.Binary,
		Schema: spec.Schema, Status: StatusBuilding, CreatedAt: now, UpdatedAt: now, Metadata: spec.Metadata,
	}}
	if spec.Kind == KindData {
		m.Size = int64(len(emptyObject))
	}
	defer d.lock(m.ID)()
	err = d.kv.update(func(tx kvTxn) error {
		if _, err := tx.get(metaKey(m.ID), nil); err == nil {
			return invalid("artifact %q exists already", m.ID)
		} else if !errors.Is(err, errNoKey) {
			return err
		}
		if err := d.save(tx, m); err != nil {
			return err
		}
		if err := tx.set(ctxKey(m.ContextID, m.ID), nil); err != nil {
			return err
		}
		return tx.set(taskKey(m.TaskID, m.ID), nil)
	})
	if err != nil {
		return Info{}, fmt.Errorf("create artifact: %w", err)
	}
	return m.Info, nil
}

const emptyObject = "{}"

// Get implements Store.
func (d *DB) Get(ctx context.Context, id string) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("get artifact: %w", err)
	}
	var m metaRecord
	err := d.kv.view(func(tx kvTxn) error {
		var err error
		m, err = d.load(tx, id)
		return err
	})
	if err != nil {
		return Info{}, fmt.Errorf("get artifact: %w", err)
	}
	return m.Info, nil
}
