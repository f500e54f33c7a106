package plugins

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"
)

// ErrBudget: a plugin wrote more through a host channel (log, events,
// key-value, artifacts, HTTP) than its budget allows; the write was
// refused.
var ErrBudget = errors.New("plugin over its budget")

// Budgets bound what a plugin may write through the host, per call and per
// plugin. A zero field means its default; a negative one, no limit.
type Budgets struct {
	// LogBytesPerCall: log lines (the log function, stdout, stderr) of one
	// call; past it lines are dropped and one warning says so (64 KiB).
	LogBytesPerCall int64
	// LogBytesPerMinute: log lines of one plugin, all calls together, in
	// a minute (1 MiB).
	LogBytesPerMinute int64
	// EventsPerCall: progress and events one call may emit (1000).
	EventsPerCall int
	// EventBytesPerCall: bytes of progress, events and model deltas one
	// call may emit (4 MiB). Every event is kept in the durable log, so
	// this bounds what a call adds to the disk.
	EventBytesPerCall int64
	// KVWritesPerCall and KVBytesPerCall bound one call's kv_set (1000
	// writes, 4 MiB).
	KVWritesPerCall int
	KVBytesPerCall  int64
	// KVQuotaKeys and KVQuotaBytes bound a plugin's whole key-value space
	// (10000 keys, 64 MiB of values).
	KVQuotaKeys  int64
	KVQuotaBytes int64
	// ArtifactWritesPerCall and ArtifactBytesPerCall bound one call's
	// artifact_write (1000 writes, 64 MiB).
	ArtifactWritesPerCall int
	ArtifactBytesPerCall  int64
	// HTTPRequestsPerCall and HTTPBytesPerCall bound one call's outbound
	// HTTP: requests made and response bytes read (64, 32 MiB); each
	// response is capped by the egress broker as well.
	HTTPRequestsPerCall int
	HTTPBytesPerCall    int64
	// MaxTools is how many tools one plugin may offer (128), MaxToolsTotal
	// how many all plugins together (1024): every turn shows the model
	// every tool.
	MaxTools      int
	MaxToolsTotal int
	// MaxSchemaBytes bounds one tool's definition: its description and
	// argument schema (64 KiB).
	MaxSchemaBytes int64
	// OpenFilesPerInstance bounds the files and folders one instance holds
	// open through its granted folders, each a descriptor of the host's
	// (64); OpenFilesTotal, those of every instance of every plugin (1024,
	// and at most half the process's descriptor limit).
	// An open past either fails in the guest (EMFILE, ENFILE); an
	// instance's files close with it.
	OpenFilesPerInstance int
	OpenFilesTotal       int
}

// Defaults of Budgets.
const (
	DefaultLogBytesPerCall       = 64 << 10
	DefaultLogBytesPerMinute     = 1 << 20
	DefaultEventsPerCall         = 1000
	DefaultEventBytesPerCall     = 4 << 20
	DefaultKVWritesPerCall       = 1000
	DefaultKVBytesPerCall        = 4 << 20
	DefaultKVQuotaKeys           = 10000
	DefaultKVQuotaBytes          = 64 << 20
	DefaultArtifactWritesPerCall = 1000
	DefaultArtifactBytesPerCall  = 64 << 20
	DefaultHTTPRequestsPerCall   = 64
	DefaultHTTPBytesPerCall      = 32 << 20
	DefaultMaxTools              = 128
	DefaultMaxToolsTotal         = 1024
	DefaultMaxSchemaBytes        = 64 << 10
	DefaultOpenFilesPerInstance  = 64
	DefaultOpenFilesTotal        = 1024
)

// budget returns v, its default when zero, or no limit (the largest value
// of its type) when negative.
func budget[T int | int64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return T(math.MaxInt64 >> (64 - 8*int(unsafe.Sizeof(v)))) // every int is 64 or 32 bits
	}
	return v
}

// withDefaults returns b with every zero field set to its default and
// every negative one to no limit.
func (b Budgets) withDefaults() Budgets {
	b.LogBytesPerCall = budget(b.LogBytesPerCall, DefaultLogBytesPerCall)
	b.LogBytesPerMinute = budget(b.LogBytesPerMinute, DefaultLogBytesPerMinute)
	b.EventsPerCall = budget(b.EventsPerCall, DefaultEventsPerCall)
	b.EventBytesPerCall = budget(b.EventBytesPerCall, DefaultEventBytesPerCall)
	b.KVWritesPerCall = budget(b.KVWritesPerCall, DefaultKVWritesPerCall)
	b.KVBytesPerCall = budget(b.KVBytesPerCall, DefaultKVBytesPerCall)
	b.KVQuotaKeys = budget(b.KVQuotaKeys, DefaultKVQuotaKeys)
	b.KVQuotaBytes = budget(b.KVQuotaBytes, DefaultKVQuotaBytes)
	b.ArtifactWritesPerCall = budget(b.ArtifactWritesPerCall, DefaultArtifactWritesPerCall)
	b.ArtifactBytesPerCall = budget(b.ArtifactBytesPerCall, DefaultArtifactBytesPerCall)
	b.HTTPRequestsPerCall = budget(b.HTTPRequestsPerCall, DefaultHTTPRequestsPerCall)
	b.HTTPBytesPerCall = budget(b.HTTPBytesPerCall, DefaultHTTPBytesPerCall)
	b.MaxTools = budget(b.MaxTools, DefaultMaxTools)
	b.MaxToolsTotal = budget(b.MaxToolsTotal, DefaultMaxToolsTotal)
	b.MaxSchemaBytes = budget(b.MaxSchemaBytes, DefaultMaxSchemaBytes)
	b.OpenFilesPerInstance = budget(b.OpenFilesPerInstance, DefaultOpenFilesPerInstance)
	b.OpenFilesTotal = budget(b.OpenFilesTotal, DefaultOpenFilesTotal)
	return b
}

// spent is what one call has written so far, by channel. It lives in the
// call's state and is reset with it.
type spent struct {
	logBytes     int64
	logDropped   bool
	events       int
	eventBytes   int64
	kvWrites     int
	kvBytes      int64
	artWrites    int
	artBytes     int64
	httpRequests int
	httpBytes    int64
}

func overBudget(what string, limit any) error {
	return fmt.Errorf("%w: %s (limit %v); raise it in the host's plugin budgets", ErrBudget, what, limit)
}

// spendEvent takes n bytes of an event (progress, event, delta) from the
// call's budget.
func (s *callState) spendEvent(n int, counted bool) error {
	b := &s.p.budgets
	if counted && s.spent.events+1 > b.EventsPerCall {
		return overBudget("too many events in one call", b.EventsPerCall)
	}
	if s.spent.eventBytes+int64(n) > b.EventBytesPerCall {
		return overBudget("event bytes in one call", b.EventBytesPerCall)
	}
	if counted {
		s.spent.events++
	}
	s.spent.eventBytes += int64(n)
	return nil
}

// spendLog takes n bytes of log from the call's and the plugin's budgets;
// false: drop the line (the first drop is announced once).
func (s *callState) spendLog(ctx context.Context, n int) bool {
	b := &s.p.budgets
	ok := s.spent.logBytes+int64(n) <= b.LogBytesPerCall && s.p.logRate.take(int64(n), b.LogBytesPerMinute)
	if ok {
		s.spent.logBytes += int64(n)
		return true
	}
	if !s.spent.logDropped {
		s.spent.logDropped = true
		s.p.log.WarnContext(ctx, "plugin log over its budget; dropping the rest of this call's lines",
			"perCall", b.LogBytesPerCall, "perMinute", b.LogBytesPerMinute)
	}
	return false
}

// rateWindow counts bytes in the current minute.
type rateWindow struct {
	mu    sync.Mutex
	start time.Time
	used  int64
}

func (w *rateWindow) take(n, perMinute int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.start) >= time.Minute {
		w.start, w.used = now, 0
	}
	if w.used+n > perMinute {
		return false
	}
	w.used += n
	return true
}

// KVUsager tells how much a key-value namespace holds (Config.KVUsage);
// with it a plugin's quota counts what earlier runs of the host stored.
type KVUsager interface {
	KVUsage(ctx context.Context, ns string) (keys, bytes int64, err error)
}

// QuotaKV is a key-value store that checks a namespace's quota with each
// write, in one atomic step (Config.KVQuota): a store several hosts share,
// so that a plugin's quota holds for the service rather than per host.
type QuotaKV interface {
	// KVSetWithin writes unless the namespace would then hold more than
	// maxKeys keys or maxBytes bytes of values; over is "keys" or "bytes"
	// when it refused.
	KVSetWithin(ctx context.Context, ns, key string, v []byte, maxKeys, maxBytes int64) (over string, err error)
}

// kvQuota tracks a plugin's key-value space across its versions and
// calls: keys and value bytes, checked before each write.
type kvQuota struct {
	mu          sync.Mutex
	known       bool
	keys, bytes int64
}

// kvQuotas holds the quota trackers by plugin name.
type kvQuotas struct {
	mu sync.Mutex
	m  map[string]*kvQuota
}

func (q *kvQuotas) of(name string) *kvQuota {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = map[string]*kvQuota{}
	}
	t := q.m[name]
	if t == nil {
		t = &kvQuota{}
		q.m[name] = t
	}
	return t
}

// kvSet writes a key within the call's and the plugin's budgets.
func (s *callState) kvSet(ctx context.Context, key string, val []byte) error {
	p, b := s.p, &s.p.budgets
	if s.spent.kvWrites+1 > b.KVWritesPerCall {
		return overBudget("too many key-value writes in one call", b.KVWritesPerCall)
	}
	if s.spent.kvBytes+int64(len(val)) > b.KVBytesPerCall {
		return overBudget("key-value bytes written in one call", b.KVBytesPerCall)
	}
	if p.quotaKV != nil {
		over, err := p.quotaKV.KVSetWithin(ctx, p.Name(), key, val, b.KVQuotaKeys, b.KVQuotaBytes)
		switch {
		case err != nil:
			return err
		case over == "keys":
			return overBudget("the plugin's key-value space holds too many keys", b.KVQuotaKeys)
		case over != "":
			return overBudget("the plugin's key-value space is full", b.KVQuotaBytes)
		}
		s.spent.kvWrites++
		s.spent.kvBytes += int64(len(val))
		return nil
	}
	q := p.kvQuota
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.known {
		if u := p.kvUsage; u != nil {
			keys, bytes, err := u.KVUsage(ctx, p.Name())
			if err != nil {
				return fmt.Errorf("quota: %w", err)
			}
			q.keys, q.bytes = keys, bytes
		}
		q.known = true
	}
	var oldLen int64 = -1
	if old, err := p.kv.KVGet(ctx, p.Name(), key); err == nil {
		oldLen = int64(len(old))
	}
	keys, bytes := q.keys, q.bytes+int64(len(val))
	if oldLen < 0 {
		keys++
	} else {
		bytes -= oldLen
	}
	if keys > b.KVQuotaKeys {
		return overBudget("the plugin's key-value space holds too many keys", b.KVQuotaKeys)
	}
	if bytes > b.KVQuotaBytes {
		return overBudget("the plugin's key-value space is full", b.KVQuotaBytes)
	}
	if err := p.kv.KVSet(ctx, p.Name(), key, val); err != nil {
		return err
	}
	q.keys, q.bytes = keys, bytes
	s.spent.kvWrites++
	s.spent.kvBytes += int64(len(val))
	return nil
}

// kvDelete deletes a key and gives its bytes back to the quota.
func (s *callState) kvDelete(ctx context.Context, key string) error {
	p := s.p
	q := p.kvQuota
	q.mu.Lock()
	defer q.mu.Unlock()
	old, gerr := p.kv.KVGet(ctx, p.Name(), key)
	if err := p.kv.KVDelete(ctx, p.Name(), key); err != nil {
		return err
	}
	if gerr == nil && q.known {
		q.keys = max(q.keys-1, 0)
		q.bytes = max(q.bytes-int64(len(old)), 0)
	}
	return nil
}
