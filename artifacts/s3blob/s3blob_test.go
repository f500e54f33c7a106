package s3blob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/artifacts/artifactstest"
	"github.com/looopy-go/looopy/artifacts/s3blob"
	"github.com/looopy-go/looopy/artifacts/s3blob/miniotest"
	"github.com/looopy-go/looopy/store/redisstore"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

var buckets atomic.Int64

func open(t *testing.T, srv *miniotest.Server) *s3blob.Store {
	t.Helper()
	s, err := s3blob.Open(context.Background(), s3blob.Config{Endpoint: srv.Endpoint, Bucket: fmt.Sprintf("test-%d", buckets.Add(1)),
		AccessKey: miniotest.AccessKey, SecretKey: miniotest.SecretKey, Insecure: true, CreateBucket: true, Prefix: "art/"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t *testing.T, s artifacts.BlobStore, key string) []byte {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return b
}

func TestBlobs(t *testing.T) {
	srv := miniotest.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	if _, err := s.Get(ctx, "a1/missing"); !errors.Is(err, artifacts.ErrNotFound) {
		t.Fatalf("Get of a missing object: err = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a1/missing"); err != nil {
		t.Fatalf("Delete of a missing object: %v", err)
	}
	n, err := s.Put(ctx, "a1/0", bytes.NewReader([]byte("hello")))
	if err != nil || n != 5 {
		t.Fatalf("Put = %d, %v", n, err)
	}
	if b := get(t, s, "a1/0"); string(b) != "hello" {
		t.Fatalf("Get = %q", b)
	}
	if _, err := s.Put(ctx, "a1/0", bytes.NewReader([]byte("again"))); err != nil {
		t.Fatal(err)
	}
	if b := get(t, s, "a1/0"); string(b) != "again" {
		t.Fatalf("Get after overwrite = %q", b)
	}
	// Larger than a part: a multipart upload of unknown size.
	big := make([]byte, 21<<20)
	_, _ = rand.Read(big)
	if n, err := s.Put(ctx, "a1/1", bytes.NewReader(big)); err != nil || n != int64(len(big)) {
		t.Fatalf("Put of %d bytes = %d, %v", len(big), n, err)
	}
	if b := get(t, s, "a1/1"); !bytes.Equal(b, big) {
		t.Fatalf("Get of the large object returned %d bytes that differ", len(b))
	}
	if err := s.Delete(ctx, "a1/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "a1/1"); !errors.Is(err, artifacts.ErrNotFound) {
		t.Fatalf("Get after Delete: err = %v, want ErrNotFound", err)
	}
	// A failed upload leaves nothing half-written behind.
	failing := io.MultiReader(bytes.NewReader(big[:6<<20]), errReader{})
	if _, err := s.Put(ctx, "a1/2", failing); err == nil {
		t.Fatal("Put from a failing reader succeeded")
	}
	if _, err := s.Get(ctx, "a1/2"); !errors.Is(err, artifacts.ErrNotFound) {
		t.Fatalf("Get after a failed Put: err = %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "/abs", "a/../b"} {
		if _, err := s.Put(ctx, bad, bytes.NewReader(nil)); err == nil {
			t.Fatalf("Put(%q) succeeded", bad)
		}
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("the writer went away") }

// The whole artifact store on shared engines: records in Redis, parts over
// 1 KiB in S3. It passes the same suite as Badger and memory.
func TestConformanceRedisS3(t *testing.T) {
	minio := miniotest.Start(t)
	redis := redistest.Start(t, redistest.Options{})
	var n atomic.Int64
	artifactstest.Run(t, func(t *testing.T) artifacts.Store {
		rs, err := redisstore.Open(context.Background(), redisstore.Options{Addr: redis.Addr, Prefix: fmt.Sprintf("art%d:", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		db, err := artifacts.OpenKV(orderedKV{rs.OrderedKV("artifacts")}, open(t, minio), artifacts.Config{InlineMax: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		return db
	})
}

// The suite with every part in Redis (no blob store configured).
func TestConformanceRedisInline(t *testing.T) {
	redis := redistest.Start(t, redistest.Options{})
	var n atomic.Int64
	artifactstest.Run(t, func(t *testing.T) artifacts.Store {
		rs, err := redisstore.Open(context.Background(), redisstore.Options{Addr: redis.Addr, Prefix: fmt.Sprintf("inl%d:", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		db, err := artifacts.OpenKV(orderedKV{rs.OrderedKV("artifacts")}, nil, artifacts.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return db
	})
}

// orderedKV adapts the Redis ordered space to artifacts.KV (as the host
// does).
type orderedKV struct{ k *redisstore.OrderedKV }

func (o orderedKV) View(fn func(artifacts.KVTxn) error) error {
	return o.k.View(func(t *redisstore.Txn) error { return fn(t) })
}

func (o orderedKV) Update(fn func(artifacts.KVTxn) error) error {
	return o.k.Update(func(t *redisstore.Txn) error { return fn(t) })
}
