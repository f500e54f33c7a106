// Package s3blob keeps the large parts of artifacts in S3-compatible
// object storage (AWS S3, MinIO, Ceph RGW, ...), through the MinIO Go
// client: the BlobStore of several hosts that serve the same artifacts.
package s3blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/looopy-go/looopy/artifacts"
)

// Config configures a Store.
type Config struct {
	// Endpoint is host[:port] of the S3 service (no scheme).
	Endpoint string
	// Bucket holds the objects. It must exist unless CreateBucket.
	Bucket string
	// Region of the bucket ("" lets the client ask).
	Region string
	// AccessKey and SecretKey are the credentials.
	AccessKey, SecretKey string
	// Insecure talks plain HTTP (a server on loopback); default HTTPS.
	Insecure bool
	// Prefix starts every object name (e.g. "looopy/").
	Prefix string
	// CreateBucket makes the bucket when it does not exist.
	CreateBucket bool
	// PartSize is the size of a multipart upload's parts (default 16 MiB,
	// at least 5 MiB): Put holds one part in memory at a time.
	PartSize uint64
}

// Store is an artifacts.BlobStore on S3. It is safe for concurrent use.
type Store struct {
	c        *minio.Client
	bucket   string
	prefix   string
	partSize uint64
}

var _ artifacts.BlobStore = (*Store)(nil)

// Open checks the configuration and that the bucket exists (creating it
// when asked).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("open s3 blob store: endpoint and bucket are required")
	}
	if strings.Contains(cfg.Endpoint, "://") {
		return nil, fmt.Errorf("open s3 blob store: endpoint %q: give host:port, no scheme (insecure selects http)", cfg.Endpoint)
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: !cfg.Insecure,
		Region: cfg.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("open s3 blob store: %w", err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	// A server that is still starting (MinIO answers XMinioServerNotInitialized)
	// gets up to 30 s, so hosts and storage can start together.
	for deadline := time.Now().Add(30 * time.Second); err != nil && starting(err) && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("open s3 blob store: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		ok, err = c.BucketExists(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("open s3 blob store: bucket %q at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !ok {
		if !cfg.CreateBucket {
			return nil, fmt.Errorf("open s3 blob store: bucket %q does not exist at %s", cfg.Bucket, cfg.Endpoint)
		}
		if err := c.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
			// Another host may have made it at the same moment.
			if ok, err2 := c.BucketExists(ctx, cfg.Bucket); err2 != nil || !ok {
				return nil, fmt.Errorf("open s3 blob store: make bucket %q: %w", cfg.Bucket, err)
			}
		}
	}
	ps := cfg.PartSize
	if ps == 0 {
		ps = 16 << 20
	}
	if ps < 5<<20 {
		return nil, fmt.Errorf("open s3 blob store: part size %d is under S3's minimum of 5 MiB", ps)
	}
	return &Store{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix, partSize: ps}, nil
}

func (s *Store) name(key string) (string, error) {
	if key == "" || len(key) > 512 || strings.Contains(key, "..") || strings.HasPrefix(key, "/") {
		return "", fmt.Errorf("bad blob key %q", key)
	}
	return s.prefix + key, nil
}

// Put implements artifacts.BlobStore: a single PUT or a multipart upload,
// which S3 makes visible whole or not at all, and durable when it returns.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	name, err := s.name(key)
	if err != nil {
		return 0, fmt.Errorf("put blob: %w", err)
	}
	info, err := s.c.PutObject(ctx, s.bucket, name, r, -1, minio.PutObjectOptions{
		ContentType: "application/octet-stream", PartSize: s.partSize,
	})
	if err != nil {
		return 0, fmt.Errorf("put blob %q: %w", key, err)
	}
	return info.Size, nil
}

// Get implements artifacts.BlobStore. A missing object is
// artifacts.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	name, err := s.name(key)
	if err != nil {
		return nil, fmt.Errorf("get blob: %w", err)
	}
	obj, err := s.c.GetObject(ctx, s.bucket, name, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get blob %q: %w", key, err)
	}
	// GetObject is lazy: Stat makes the request, so that a missing object
	// is an error now and not at the first Read.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		if notFound(err) {
			return nil, fmt.Errorf("get blob %q: %w", key, artifacts.ErrNotFound)
		}
		return nil, fmt.Errorf("get blob %q: %w", key, err)
	}
	return obj, nil
}

// Delete implements artifacts.BlobStore.
func (s *Store) Delete(ctx context.Context, key string) error {
	name, err := s.name(key)
	if err != nil {
		return fmt.Errorf("delete blob: %w", err)
	}
	if err := s.c.RemoveObject(ctx, s.bucket, name, minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return fmt.Errorf("delete blob %q: %w", key, err)
	}
	return nil
}

func starting(err error) bool {
	resp := minio.ToErrorResponse(err)
	return resp.Code == "XMinioServerNotInitialized" || resp.StatusCode == http.StatusServiceUnavailable
}

func notFound(err error) bool {
	resp := minio.ToErrorResponse(err)
	return resp.StatusCode == http.StatusNotFound || resp.Code == "NoSuchKey"
}
