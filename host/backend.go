package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/artifacts/s3blob"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
	"github.com/looopy-go/looopy/store/redisstore"
)

// StoreConfig selects where the host keeps its state. Badger (the default)
// keeps everything in the data directory of one host; Redis lets several
// hosts serve one agent service (see README, "Several hosts").
type StoreConfig struct {
	// Backend is "badger" (default) or "redis".
	Backend string `json:"backend,omitempty"`
	// Redis is used when Backend is "redis".
	Redis RedisConfig `json:"redis"`
	// S3, when its bucket is set, keeps the large parts of artifacts in
	// S3-compatible storage (with either backend). With Redis and no S3,
	// every part of an artifact is kept in Redis.
	S3 S3Config `json:"s3"`
	// MemoryBytes is the memory Badger may use for its memtables, the
	// tables it builds and its caches (default DefaultStoreMemory of the
	// host's memory). A flood of writes past what it can flush waits for
	// the disk instead of growing the host's memory.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// MinFreeBytes is the free space Badger's data folder's filesystem
	// keeps (default 32 memtables: 512 MiB with the default memoryBytes on
	// 8 GiB or more; -1: no check): below it new tasks are refused
	// (-32000 STORAGE_FULL, HTTP 507), below half of it every write, so
	// that Badger never meets a full disk (it writes its files through
	// memory maps, and a full disk there kills the process).
	MinFreeBytes int64 `json:"minFreeBytes,omitempty"`
	// MaxBytes caps the data folder's size: at it new tasks are refused
	// (STORAGE_FULL). 0: no cap.
	MaxBytes int64 `json:"maxBytes,omitempty"`
}

// RedisConfig is the Redis server of the "redis" backend (7.0 or later,
// with appendonly yes and appendfsync always for the promise that nothing
// acknowledged is lost).
type RedisConfig struct {
	// Addr is host:port (default 127.0.0.1:6379).
	Addr string `json:"addr,omitempty"`
	// Username (an ACL user) and Password ("env:NAME" reads the
	// environment) authenticate the host.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// DB is the database number (default 0).
	DB int `json:"db,omitempty"`
	// Prefix starts every key (default "looopy:"); services sharing one
	// Redis need different prefixes, hosts of one service the same.
	Prefix string `json:"prefix,omitempty"`
	// PoolSize bounds the connections of this host (default 10 per CPU).
	PoolSize int `json:"poolSize,omitempty"`
	// AllowNoFsync lets the host start on a Redis that does not fsync
	// every write (appendonly no, or appendfsync everysec/no): a crash of
	// the Redis machine may then lose acknowledged tasks and events.
	AllowNoFsync bool `json:"allowNoFsync,omitempty"`
}

// S3Config is the object storage of large artifact parts.
type S3Config struct {
	// Endpoint is host:port of the S3 service (no scheme).
	Endpoint string `json:"endpoint,omitempty"`
	// Bucket holds the parts; empty turns S3 off. It is created when
	// missing.
	Bucket string `json:"bucket,omitempty"`
	Region string `json:"region,omitempty"`
	// AccessKey and SecretKey, or "env:NAME".
	AccessKey string `json:"accessKey,omitempty"`
	SecretKey string `json:"secretKey,omitempty"`
	// Insecure talks plain HTTP (default HTTPS).
	Insecure bool `json:"insecure,omitempty"`
	// Prefix starts every object name (default "artifacts/").
	Prefix string `json:"prefix,omitempty"`
	// InlineMax is the largest part kept with the artifact's record, in
	// bytes (default 1 MiB); larger ones go to S3.
	InlineMax int64 `json:"inlineMax,omitempty"`
}

func (c StoreConfig) validate() error {
	switch c.Backend {
	case "", "badger":
	case "redis":
		if c.Redis.DB < 0 || c.Redis.PoolSize < 0 {
			return errors.New("config: store.redis: db and poolSize must not be negative")
		}
	default:
		return fmt.Errorf("config: store.backend %q: want badger or redis", c.Backend)
	}
	if c.S3.Bucket != "" {
		if c.S3.Endpoint == "" {
			return errors.New("config: store.s3.bucket needs store.s3.endpoint")
		}
		if strings.Contains(c.S3.Endpoint, "://") {
			return fmt.Errorf("config: store.s3.endpoint %q: give host:port (insecure selects http)", c.S3.Endpoint)
		}
		if c.S3.InlineMax < 0 {
			return errors.New("config: store.s3.inlineMax must not be negative")
		}
	}
	return nil
}

// backend is everything one engine keeps for the host.
type backend interface {
	loop.MessageStore
	loop.AgentStore
	loop.TaskStore
	loop.TaskPresence
	loop.TurnCommitter
	loop.CheckpointStore
	loop.Journal
	loop.DurableLister
	loop.LeaseStore
	store.KV
}

// openBackend opens the configured engine: its stores, its event log and
// the artifact store. shared says that other hosts use the same data.
func (m *Main) openBackend(ctx context.Context, cfg Config, dataDir string) (b backend, events loop.EventLog, arts *artifacts.DB, shared bool, err error) {
	blobs, inlineMax, err := m.openBlobs(ctx, cfg.Store.S3)
	if err != nil {
		return nil, nil, nil, false, err
	}
	artCfg := artifacts.Config{InlineMax: inlineMax, Logger: m.log.With("component", "artifacts")}
	if cfg.InMemory && cfg.Store.Backend != "redis" {
		// Nothing is to survive a restart: the stores are maps, with the
		// same contract as Badger's (store/storetest) and none of the
		// cost of an LSM tree kept in memory (RATIONALE.md).
		st := store.NewMemory(store.MemoryOptions{})
		m.closers = append(m.closers, st.Close)
		return st, st.Events(), artifacts.NewMemory(blobs, artCfg), false, nil
	}
	if cfg.Store.Backend != "redis" {
		// Artifacts share this database: values from store.ValueThreshold
		// (64 KiB, an artifact's full chunk) go to the value log
		// (RATIONALE.md, docs/PERFORMANCE.md).
		st, err := store.Open(store.Options{Dir: dataDir, Logger: m.log.With("component", "badger"),
			Memory: storeMemory(cfg.Store), MinFreeBytes: cfg.Store.MinFreeBytes, MaxBytes: cfg.Store.MaxBytes})
		if err != nil {
			return nil, nil, nil, false, dataDirError(dataDir, err)
		}
		m.closers = append(m.closers, st.Close)
		arts, err := m.openArtifacts(st, dataDir, blobs, artCfg)
		if err != nil {
			return nil, nil, nil, false, err
		}
		return st, st.Events(), arts, false, nil
	}
	rc := cfg.Store.Redis
	pw, err := resolveSecret(rc.Password)
	if err != nil {
		return nil, nil, nil, false, fmt.Errorf("store.redis.password: %w", err)
	}
	addr := rc.Addr
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rs, err := redisstore.Open(ctx, redisstore.Options{Addr: addr, Username: rc.Username, Password: pw, DB: rc.DB,
		Prefix: rc.Prefix, PoolSize: rc.PoolSize, Logger: m.log.With("component", "redis")})
	if err != nil {
		return nil, nil, nil, false, err
	}
	m.closers = append(m.closers, rs.Close)
	if err := m.checkRedisDurability(ctx, rs, rc.AllowNoFsync); err != nil {
		return nil, nil, nil, false, err
	}
	if blobs == nil {
		m.log.Info("artifacts: no store.s3 bucket, every part is kept in Redis")
	}
	arts, err = artifacts.OpenKV(orderedKV{rs.OrderedKV("artifacts")}, blobs, artCfg)
	if err != nil {
		return nil, nil, nil, false, fmt.Errorf("open artifacts: %w", err)
	}
	m.closers = append(m.closers, arts.Close)
	return rs, rs.Events(), arts, true, nil
}

// checkRedisDurability refuses a Redis that would lose acknowledged writes
// in a crash, unless the operator allowed it.
func (m *Main) checkRedisDurability(ctx context.Context, rs *redisstore.Store, allow bool) error {
	ao, fsync, err := rs.Durability(ctx)
	if err != nil {
		// Managed services often refuse CONFIG: say what to check.
		m.log.Warn("redis: cannot read the persistence settings; make sure appendonly is yes and appendfsync always", "err", err)
		return nil
	}
	if ao == "yes" && fsync == "always" {
		return nil
	}
	msg := fmt.Sprintf("redis at %s has appendonly %s, appendfsync %s: a crash of Redis may lose acknowledged tasks and events "+
		"(set appendonly yes and appendfsync always, or store.redis.allowNoFsync)", rs.Client().Options().Addr, ao, fsync)
	if !allow {
		return errors.New("config: " + msg)
	}
	m.log.Warn(msg)
	return nil
}

// openBlobs opens the S3 blob store when configured (nil otherwise) and
// returns the inline limit to use with it.
func (m *Main) openBlobs(ctx context.Context, c S3Config) (artifacts.BlobStore, int64, error) {
	if c.Bucket == "" {
		return nil, 0, nil
	}
	ak, err := resolveSecret(c.AccessKey)
	if err != nil {
		return nil, 0, fmt.Errorf("store.s3.accessKey: %w", err)
	}
	sk, err := resolveSecret(c.SecretKey)
	if err != nil {
		return nil, 0, fmt.Errorf("store.s3.secretKey: %w", err)
	}
	prefix := c.Prefix
	if prefix == "" {
		prefix = "artifacts/"
	}
	b, err := s3blob.Open(ctx, s3blob.Config{Endpoint: c.Endpoint, Bucket: c.Bucket, Region: c.Region,
		AccessKey: ak, SecretKey: sk, Insecure: c.Insecure, Prefix: prefix, CreateBucket: true})
	if err != nil {
		return nil, 0, err
	}
	return b, c.InlineMax, nil
}

// orderedKV adapts the Redis ordered space to the artifact store's KV.
type orderedKV struct{ k *redisstore.OrderedKV }

func (o orderedKV) View(fn func(artifacts.KVTxn) error) error {
	return o.k.View(func(t *redisstore.Txn) error { return fn(t) })
}

func (o orderedKV) Update(fn func(artifacts.KVTxn) error) error {
	return o.k.Update(func(t *redisstore.Txn) error { return fn(t) })
}

// openArtifacts opens the artifact store of the Badger backend in the
// store's own database (its value-log GC covers both), large parts in
// blobs (nil: files in <data>/artifacts/artifact-blobs). Artifacts an
// earlier version kept in a Badger database of their own in
// <data>/artifacts are moved in first.
func (m *Main) openArtifacts(st *store.Badger, dataDir string, blobs artifacts.BlobStore, cfg artifacts.Config) (*artifacts.DB, error) {
	dir := filepath.Join(dataDir, "artifacts")
	if cfg.BlobDir == "" {
		cfg.BlobDir = filepath.Join(dir, "artifact-blobs")
	}
	// Artifact records go into the store's database, their blob files
	// into its folder: every write of them asks the store's check of its
	// disk first (store.ErrNoSpace), as the store's own writes do; the
	// sweep of expired artifacts asks the check of the store's cleanup
	// (its deletes pass below the floor while a reserve lasts).
	cfg.Writable = st.Writable
	cfg.Deletable = st.Deletable
	if err := migrateArtifactDB(dir, st.DB(), st.Writable, m.log); err != nil {
		return nil, err
	}
	adb, err := artifacts.Open(st.DB(), blobs, cfg)
	if err != nil {
		return nil, fmt.Errorf("open artifacts: %w", err)
	}
	m.closers = append(m.closers, adb.Close)
	return adb, nil
}

// dataDirError says, once and plainly, why the data folder did not open
// and what to do about it.
func dataDirError(dir string, err error) error {
	cause := err
	if u := errors.Unwrap(err); u != nil {
		cause = u // the store's own wrapping repeats the folder
	}
	switch {
	case dataDirLocked(dir):
		return fmt.Errorf("data folder %s %w (another looopy?): stop it, or give this one its own folder with -data", dir, ErrDataDirInUse)
	case errors.Is(err, store.ErrNoSpace) || errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("data folder %s: its filesystem is full (%w): make space on it (or raise its size), then start again; nothing stored is lost, do not move the folder aside", dir, cause)
	case errors.Is(err, loop.ErrInvalid):
		return err // a setting the store refuses: its error says which
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("data folder %s: permission denied: run as a user who may write it, or choose another folder with -data", dir)
	}
	return fmt.Errorf("data folder %s does not open as a Looopy database (%w): it is damaged or holds something else; move it aside (or choose another folder with -data) to start with an empty one, or restore it from a backup",
		dir, cause)
}

// migrateArtifactDB moves the records of a separate artifact database in
// dir (an earlier layout) into db, then sets the old files aside and
// removes them. Copying is idempotent: a start interrupted half-way copies
// again.
func migrateArtifactDB(dir string, db *badger.DB, writable func() error, log *slog.Logger) error {
	aside := filepath.Join(dir, "old-artifact-db")
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err != nil {
		// nothing of the old layout (or what a start interrupted while
		// removing it left)
		_ = os.RemoveAll(aside)
		return nil
	}
	if err := writable(); err != nil {
		return fmt.Errorf("artifacts of an earlier version in %s are not moved: %w", dir, err)
	}
	old, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		return fmt.Errorf("artifacts of an earlier version in %s do not open (%w): move the folder's Badger files aside to start without them", dir, err)
	}
	n := 0
	wb := db.NewWriteBatch()
	err = old.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			e := badger.NewEntry(item.KeyCopy(nil), v).WithMeta(item.UserMeta())
			if exp := item.ExpiresAt(); exp > 0 {
				e.ExpiresAt = exp
			}
			if err := wb.SetEntry(e); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err == nil {
		err = wb.Flush()
	} else {
		wb.Cancel()
	}
	if cerr := old.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = db.Sync()
	}
	if err != nil {
		return fmt.Errorf("moving artifacts of an earlier version from %s: %w", dir, err)
	}
	// Set the old database aside in one rename per file, then remove it:
	// the artifact blobs stay where they are.
	if err := os.MkdirAll(aside, 0o750); err != nil {
		return err
	}
	// MANIFEST first: once it is gone, the old database is never read again.
	if err := os.Rename(filepath.Join(dir, "MANIFEST"), filepath.Join(aside, "MANIFEST")); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(aside, e.Name())); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(aside); err != nil {
		return err
	}
	log.Info("artifacts moved into the host's database", "from", dir, "records", n)
	return nil
}
