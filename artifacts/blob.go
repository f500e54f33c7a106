package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// BlobStore keeps the large parts of artifacts as whole objects, written
// once and read as streams. It is shaped after object stores so that an
// S3-compatible store can implement it: Put writes an object whole (a
// multipart upload for S3), Get streams it, Delete removes it.
//
// Implementations must be safe for concurrent use. Keys are made by the
// artifact store: slash-separated segments of [A-Za-z0-9._:-].
type BlobStore interface {
	// Put stores everything r yields under key, replacing any object of
	// that name, and returns the number of bytes written. The object must
	// be durable when Put returns and must never be seen half-written.
	Put(ctx context.Context, key string, r io.Reader) (int64, error)
	// Get opens the object for reading. A missing object is ErrNotFound
	// (wrapped). Cancelling ctx may abort reads of the returned stream.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes the object. Deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
}

func checkBlobKey(key string) error {
	if key == "" || len(key) > 512 {
		return fmt.Errorf("bad blob key %q", key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if !ValidID(seg) {
			return fmt.Errorf("bad blob key %q", key)
		}
	}
	return nil
}

// LocalBlobs is a BlobStore in a folder of the local file system. Each
// object is a file; writes go to a temporary file that is synced and then
// renamed into place, so a crash leaves either the old object or the new
// one, never a torn file.
type LocalBlobs struct {
	dir    string
	noSync bool
}

var _ BlobStore = (*LocalBlobs)(nil)

// LocalConfig configures a LocalBlobs.
type LocalConfig struct {
	// Dir is the folder; created (0o700) if missing. Required.
	Dir string
	// NoSync skips fsync of objects and folders: faster, and a crash may
	// lose recent objects. For tests and throwaway data only.
	NoSync bool
}

// OpenLocal opens (creating if needed) a blob folder.
func OpenLocal(cfg LocalConfig) (*LocalBlobs, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("open blob folder: %w", invalid("no folder given"))
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open blob folder: %w", err)
	}
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("open blob folder: %w", err)
	}
	return &LocalBlobs{dir: abs, noSync: cfg.NoSync}, nil
}

func (l *LocalBlobs) path(key string) (string, error) {
	if err := checkBlobKey(key); err != nil {
		return "", err
	}
	return filepath.Join(l.dir, filepath.FromSlash(key)), nil
}

// Put implements BlobStore.
func (l *LocalBlobs) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	p, err := l.path(key)
	if err != nil {
		return 0, fmt.Errorf("put blob: %w", err)
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("put blob %q: %w", key, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("put blob %q: %w", key, err)
	}
	tmp := f.Name()
	fail := func(err error) (int64, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("put blob %q: %w", key, err)
	}
	n, err := io.Copy(f, ctxReader{ctx: ctx, r: r})
	if err != nil {
		return fail(err)
	}
	if !l.noSync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("put blob %q: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("put blob %q: %w", key, err)
	}
	if !l.noSync {
		if err := syncDir(dir); err != nil {
			return 0, fmt.Errorf("put blob %q: %w", key, err)
		}
	}
	return n, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Get implements BlobStore.
func (l *LocalBlobs) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, fmt.Errorf("get blob: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get blob %q: %w", key, err)
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get blob %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get blob %q: %w", key, err)
	}
	return f, nil
}

// Delete implements BlobStore. Folders left empty are removed.
func (l *LocalBlobs) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete blob %q: %w", key, err)
	}
	// Remove the artifact's folder when it is empty; failure (not empty,
	// a concurrent Put) is fine.
	if dir := filepath.Dir(p); dir != l.dir {
		_ = os.Remove(dir)
	}
	return nil
}

// ctxReader stops a copy when ctx is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// MemoryBlobs is a BlobStore in memory, for tests and embedding. Get
// returns a reader over the stored bytes (no copy).
type MemoryBlobs struct {
	mu   sync.Mutex
	objs map[string][]byte
}

var _ BlobStore = (*MemoryBlobs)(nil)

// NewMemoryBlobs returns an empty in-memory blob store.
func NewMemoryBlobs() *MemoryBlobs { return &MemoryBlobs{objs: map[string][]byte{}} }

// Put implements BlobStore.
func (m *MemoryBlobs) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := checkBlobKey(key); err != nil {
		return 0, fmt.Errorf("put blob: %w", err)
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, ctxReader{ctx: ctx, r: r})
	if err != nil {
		return 0, fmt.Errorf("put blob %q: %w", key, err)
	}
	m.mu.Lock()
	m.objs[key] = buf.Bytes()
	m.mu.Unlock()
	return n, nil
}

// Get implements BlobStore.
func (m *MemoryBlobs) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	m.mu.Lock()
	b, ok := m.objs[key]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("get blob %q: %w", key, ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Delete implements BlobStore.
func (m *MemoryBlobs) Delete(ctx context.Context, key string) error {
	m.mu.Lock()
	delete(m.objs, key)
	m.mu.Unlock()
	return nil
}

// Len returns the number of objects held.
func (m *MemoryBlobs) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.objs)
}
