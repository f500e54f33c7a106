package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// ErrClosed is returned by every method of a store after Close.
var ErrClosed = errors.New("store is closed")

// Default limits.
const (
	DefaultMaxIDSize      = 1024
	DefaultMaxKVKeySize   = 1024
	DefaultMaxKVValueSize = 1 << 20
)

// Limits bound what callers may store. A zero field means its default.
type Limits struct {
	// MaxIDSize bounds context ids, task ids, stream names and KV
	// namespaces, in bytes (default 1 KiB).
	MaxIDSize int
	// MaxKVKeySize bounds a key of the key-value space (default 1 KiB).
	MaxKVKeySize int
	// MaxKVValueSize bounds a value of the key-value space (default 1 MiB).
	MaxKVValueSize int
}

func (l Limits) withDefaults() Limits {
	if l.MaxIDSize <= 0 {
		l.MaxIDSize = DefaultMaxIDSize
	}
	if l.MaxKVKeySize <= 0 {
		l.MaxKVKeySize = DefaultMaxKVKeySize
	}
	if l.MaxKVValueSize <= 0 {
		l.MaxKVValueSize = DefaultMaxKVValueSize
	}
	return l
}

// KV is a key-value space split in namespaces; the plugin runtime gives each
// plugin its own namespace (its name). Values are opaque bytes.
type KV interface {
	// KVGet returns the value of key, or an error matching loop.ErrNotFound.
	KVGet(ctx context.Context, namespace, key string) ([]byte, error)
	// KVSet stores value under key, durably when it returns.
	KVSet(ctx context.Context, namespace, key string, value []byte) error
	// KVDelete removes key; removing an absent key is not an error.
	KVDelete(ctx context.Context, namespace, key string) error
}

// checkID refuses an empty or oversized identifier; what names it in the
// error ("context id", "task id", ...).
func (l Limits) checkID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s is empty", loop.ErrInvalid, what)
	}
	if len(id) > l.MaxIDSize {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", loop.ErrInvalid, what, len(id), l.MaxIDSize)
	}
	return nil
}

func (l Limits) checkKV(ns, key string, value []byte, set bool) error {
	if err := l.checkID("kv namespace", ns); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%w: kv key is empty", loop.ErrInvalid)
	}
	if len(key) > l.MaxKVKeySize {
		return fmt.Errorf("%w: kv key is %d bytes, the limit is %d", loop.ErrInvalid, len(key), l.MaxKVKeySize)
	}
	if set && len(value) > l.MaxKVValueSize {
		return fmt.Errorf("%w: kv value is %d bytes, the limit is %d", loop.ErrInvalid, len(value), l.MaxKVValueSize)
	}
	return nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: negative ttl %v", loop.ErrInvalid, ttl)
	}
	return nil
}

// expired reports whether a record with expiry at is gone at now.
func expired(at, now time.Time) bool { return !at.IsZero() && !now.Before(at) }
