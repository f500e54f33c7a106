package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/looopy-go/looopy/loop"
)

// Default limits, the same as the Badger store's.
const (
	DefaultMaxIDSize      = 1024
	DefaultMaxKVKeySize   = 1024
	DefaultMaxKVValueSize = 1 << 20
	DefaultPrefix         = "looopy:"
)

// Options configures a Store. Addr is required.
type Options struct {
	// Addr is host:port of the Redis server.
	Addr string
	// Password (AUTH), "" for none. Username for Redis 6 ACL users.
	Username string
	Password string
	// DB is the database number (default 0).
	DB int
	// Prefix starts every key (default "looopy:"). Services sharing one
	// Redis must use different prefixes.
	Prefix string
	// PoolSize bounds the connections (default go-redis's: 10 per CPU).
	PoolSize int
	// DialTimeout bounds connecting (default 5s).
	DialTimeout time.Duration
	// MaxIDSize, MaxKVKeySize and MaxKVValueSize bound what callers may
	// store (defaults as in the Badger store).
	MaxIDSize      int
	MaxKVKeySize   int
	MaxKVValueSize int
	// SweepInterval is how often index entries of expired tasks are
	// removed (default 1m; negative: never, for tests).
	SweepInterval time.Duration
	// Logger receives problems that fail no call. Nil discards.
	Logger *slog.Logger
	// OnRoundTrip, when set, is called once per command or pipeline sent
	// to Redis (benchmarks count round trips with it).
	OnRoundTrip func()
}

// Store is the Redis backend. It implements loop.MessageStore,
// loop.AgentStore, loop.TaskStore, loop.CheckpointStore, loop.Journal,
// loop.DurableLister, loop.LeaseStore, loop.TurnCommitter and the
// key-value space; Events returns its loop.EventLog. It is safe for
// concurrent use by any number of goroutines and processes.
type Store struct {
	rdb    *redis.Client
	p      string
	limits Options
	log    *slog.Logger
	events *Events

	// convIdxBuilt: this Store has indexed every agent record it found
	// (conversations.go).
	convIdxBuilt atomic.Bool

	stopSweep context.CancelFunc
	swept     chan struct{}
	closeOnce sync.Once
}

var (
	_ loop.MessageStore    = (*Store)(nil)
	_ loop.AgentStore      = (*Store)(nil)
	_ loop.TaskStore       = (*Store)(nil)
	_ loop.CheckpointStore = (*Store)(nil)
	_ loop.Journal         = (*Store)(nil)
	_ loop.DurableLister   = (*Store)(nil)
	_ loop.LeaseStore      = (*Store)(nil)
	_ loop.TurnCommitter   = (*Store)(nil)
)

// Open connects to Redis and checks that it answers and is recent enough
// (7.0: stream ids with an explicit millisecond part and an automatic
// sequence).
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Addr == "" {
		return nil, fmt.Errorf("open redis store: %w: no address", loop.ErrInvalid)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.MaxIDSize <= 0 {
		o.MaxIDSize = DefaultMaxIDSize
	}
	if o.MaxKVKeySize <= 0 {
		o.MaxKVKeySize = DefaultMaxKVKeySize
	}
	if o.MaxKVValueSize <= 0 {
		o.MaxKVValueSize = DefaultMaxKVValueSize
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = time.Minute
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rdb := redis.NewClient(&redis.Options{
		Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB,
		PoolSize: o.PoolSize, DialTimeout: o.DialTimeout,
		// Cancelling a call's context abandons it at once.
		ContextTimeoutEnabled: true,
		// A blocked read is ours to bound (Wait); no client-side cap.
		ReadTimeout: 30 * time.Second,
		// Client-side tracking and identification are not needed; RESP2
		// keeps replies plain.
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	if o.OnRoundTrip != nil {
		rdb.AddHook(countHook{o.OnRoundTrip})
	}
	s := &Store{rdb: rdb, p: o.Prefix, limits: o, log: log}
	if err := s.check(ctx); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	s.events = newEvents(s)
	if o.SweepInterval > 0 {
		sctx, cancel := context.WithCancel(context.Background())
		s.stopSweep, s.swept = cancel, make(chan struct{})
		go s.sweepEvery(sctx, o.SweepInterval)
	}
	return s, nil
}

func (s *Store) check(ctx context.Context) error {
	info, err := s.rdb.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("open redis store at %s: %w", s.limits.Addr, err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
		if major < 7 {
			return fmt.Errorf("open redis store at %s: Redis %s is too old: 7.0 or later is needed", s.limits.Addr, v)
		}
	}
	return nil
}

// Durability reports the server's persistence settings: appendonly and
// appendfsync. The host logs a warning when they cannot keep the promise
// that nothing acknowledged is lost.
func (s *Store) Durability(ctx context.Context) (appendonly, appendfsync string, err error) {
	vals, err := s.rdb.ConfigGet(ctx, "append*").Result()
	if err != nil {
		return "", "", fmt.Errorf("redis CONFIG GET: %w", err)
	}
	return vals["appendonly"], vals["appendfsync"], nil
}

// Client is the underlying go-redis client (shared; do not close it).
func (s *Store) Client() *redis.Client { return s.rdb }

// Prefix is the key prefix of the store.
func (s *Store) Prefix() string { return s.p }

// Events returns the event log.
func (s *Store) Events() *Events { return s.events }

// Close stops the background work and closes the connections.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.stopSweep != nil {
			s.stopSweep()
			<-s.swept
		}
		s.events.close()
		err = s.rdb.Close()
	})
	return err
}

// countHook calls fn once per command or pipeline sent.
type countHook struct{ fn func() }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.fn(); return next(ctx, cmd) }
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.fn(); return next(ctx, cmds) }
}

// --- keys ---

func (s *Store) msgKey(ctxID string) string      { return s.p + "m:" + ctxID }
func (s *Store) agentKey(ctxID string) string    { return s.p + "a:" + ctxID }
func (s *Store) convIdxKey() string              { return s.p + "ca" }
func (s *Store) taskKey(id string) string        { return s.p + "t:" + id }
func (s *Store) identKey(id string) string       { return s.p + "tx:" + id }
func (s *Store) evtKey(stream string) string     { return s.p + "e:" + stream }
func (s *Store) evtLastKey(stream string) string { return s.p + "el:" + stream }
func (s *Store) ckptKey(id string) string        { return s.p + "cp:" + id }
func (s *Store) jrnlKey(id string) string        { return s.p + "j:" + id }
func (s *Store) jordKey(id string) string        { return s.p + "jo:" + id }
func (s *Store) durKey() string                  { return s.p + "dur" }
func (s *Store) leaseKey(k string) string        { return s.p + "l:" + k }
func (s *Store) leaseSet() string                { return s.p + "ls" }
func (s *Store) kvUsageKey(ns string) string {
	return s.p + "kvu:" + strconv.Itoa(len(ns)) + ":" + ns
}
func (s *Store) kvKey(ns, key string) string {
	return s.p + "kv:" + strconv.Itoa(len(ns)) + ":" + ns + ":" + key
}

// --- validation and errors ---

func (s *Store) checkID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s is empty", loop.ErrInvalid, what)
	}
	if len(id) > s.limits.MaxIDSize {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d", loop.ErrInvalid, what, len(id), s.limits.MaxIDSize)
	}
	return nil
}

func corrupt(key string, err error) error { return &loop.CorruptError{Key: key, Err: err} }

// wrap gives a Redis error its context and keeps context errors matchable.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, err)
}

// ctxErr returns ctx's error before any round trip, so that a cancelled
// call never reaches the server.
func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// isNil reports a missing key or value.
func isNil(err error) bool { return errors.Is(err, redis.Nil) }
