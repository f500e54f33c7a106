package artifacts

import (
	"context"
	"fmt"
	"io"
)

// guardedKV asks check before each update: a refused update changes
// nothing. Reads are never refused.
type guardedKV struct {
	kv
	check func() error
}

func (g guardedKV) update(fn func(kvTxn) error) error {
	if err := g.check(); err != nil {
		return &storageError{err}
	}
	return g.kv.update(fn)
}

// guardedBlobs asks check before a blob is written and again after each
// BlobCheckEvery bytes of it: a refused Put stores nothing (the blob store
// removes what it had written of the object, which no record names yet).
type guardedBlobs struct {
	BlobStore
	check func() error
}

func (g guardedBlobs) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := g.check(); err != nil {
		return 0, fmt.Errorf("put blob %q: %w", key, err)
	}
	return g.BlobStore.Put(ctx, key, &checkedReader{r: r, check: g.check})
}

// checkedReader fails a copy once check refuses, asked every
// BlobCheckEvery bytes read.
type checkedReader struct {
	r     io.Reader
	check func() error
	n     int64
}

func (c *checkedReader) Read(p []byte) (int, error) {
	if c.n >= BlobCheckEvery {
		c.n = 0
		if err := c.check(); err != nil {
			return 0, err
		}
	}
	if rest := BlobCheckEvery - c.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
