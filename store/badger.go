package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/loop"
)

// Options configures a Badger store. A zero field means its default.
type Options struct {
	// Dir is the database directory; required unless InMemory.
	Dir string
	// InMemory keeps everything in memory (nothing survives Close).
	InMemory bool
	// Logger receives Badger's messages (nil: discard). Badger's info
	// messages are logged at debug level.
	Logger *slog.Logger
	// GCInterval is how often the value log is garbage collected (default
	// 5 minutes; negative: never). Not used in memory.
	GCInterval time.Duration
	// GCDiscardRatio is the share of stale data that makes a value log file
	// worth rewriting (default 0.5).
	GCDiscardRatio float64
	// MaxBatch bounds how many writes are grouped into one synced commit
	// (default 1024).
	MaxBatch int
	Limits   Limits
	// CloseTimeout bounds how long Close waits for Badger to finish
	// (default 1 minute; negative: no bound). See Close.
	CloseTimeout time.Duration
	// Memory is the memory Badger may use for its memtables, table
	// builders and caches, in bytes (badgermem.go; 0: Badger's own
	// defaults, sized for a large machine). The host derives it from its
	// memory (store.memoryBytes).
	Memory int64
	// MinFreeBytes is the free space the data folder's filesystem keeps:
	// below it new work is refused (Admit), below half of it every write
	// (ErrNoSpace), so that Badger, which writes its files through memory
	// maps and dies of SIGBUS on a full disk, always has room for what it
	// writes on its own (space.go). 0: 32 memtables (512 MiB with the
	// host's default memory); the least Open accepts is 8 memtables; -1:
	// no check. With the check on, Open also refuses (ErrNoSpace) a
	// filesystem with less free space than opening writes (the tables of
	// the write-ahead log it flushes), which Badger would die of.
	MinFreeBytes int64
	// MaxBytes caps the data folder's size: at it new work is refused
	// (Admit). 0: no cap.
	MaxBytes int64
	// SweepInterval is how often the records of expired event streams are
	// deleted (default 30 seconds; negative: never, they are still gone for
	// readers once expired). The store also sweeps when it opens.
	SweepInterval time.Duration
	// Tune, when set, adjusts Badger's options before Open (after Memory). SyncWrites is
	// forced on afterwards: acknowledged writes are durable.
	Tune func(badger.Options) badger.Options
}

// Badger is the durable store, on Badger. It implements loop.MessageStore,
// loop.AgentStore, loop.TaskStore and KV; its event log is Events().
//
// Every write is durable (synced) when its method returns. Writes from many
// goroutines are grouped: one goroutine owned by the store applies all
// pending writes in one transaction and syncs once (group commit), so
// concurrent writers share the cost of a sync. Reads run concurrently on
// snapshots. All methods are safe for concurrent use.
type Badger struct {
	db       *badger.DB
	limits   Limits
	log      *slog.Logger
	maxBatch int
	dir      string        // the data folder ("" in memory)
	closeBy  time.Duration // Options.CloseTimeout
	maxSize  int64
	// valueThreshold is Badger's: values from it on go to the value log.
	valueThreshold int64
	maxCount       int64
	events         *BadgerEvents
	minFree        int64                           // Options.MinFreeBytes (0: no check)
	statFree       func(dir string) (int64, error) // freeSpace; tests replace it
	maxBytes       int64                           // Options.MaxBytes
	free           atomic.Int64                    // the free space last measured
	used           atomic.Int64                    // the data folder's size last measured
	usedSeq        atomic.Int64                    // the number of that measure (1, 2, ... in the order they began)
	measures       atomic.Int64                    // measures begun
	measuring      sync.Mutex                      // one measure of the folder at a time
	refused        atomic.Int64                    // batches of writes refused for want of space
	commits        atomic.Int64                    // transactions committed by the commit goroutine
	mutations      atomic.Int64                    // keys set or deleted by those transactions
	written        atomic.Int64                    // their estimated size (estimate)
	reads          atomic.Int64                    // read snapshots taken by view
	convIdxBuilt   atomic.Bool                     // the conversation index holds every agent record
	gcRatio        float64                         // Options.GCDiscardRatio
	reclaimedAt    uint64                          // Badger's version after the last reclaim (the sweeper's)

	mu     sync.RWMutex // held for reading while submitting, for writing by Close
	closed bool
	ops    chan *writeOp
	quit   chan struct{}
	wg     sync.WaitGroup

	// Writes that ride with the next batch (writeLater): laterMu guards
	// later; laterKick (one slot) tells the commit goroutine that the
	// queue is no longer empty; laterDelay is how long they wait for a
	// batch to ride with before they are committed alone. rides is false
	// for a store that does not sync: they are ordinary writes there.
	rides      bool
	laterMu    sync.Mutex
	later      []*writeOp
	laterKick  chan struct{}
	laterDelay time.Duration // laterMu

	// New tasks' writes held back for the commit of their turn's end
	// (DeferTaskLeased), by the lease they store: heldMu guards held.
	heldMu sync.Mutex
	held   map[heldKey]*writeOp
}

// heldKey names a held task write by the lease it stores.
type heldKey struct {
	key   string
	token uint64
}

// defaultLaterDelay is how long a write made with writeLater waits for a
// batch to ride with. It bounds what such a write adds to its caller's
// wait on an idle store; on a busy one the next batch comes sooner.
const defaultLaterDelay = 2 * time.Millisecond

// DB is the Badger database, for stores that share it (the host keeps its
// artifacts in it, under keys outside this store's prefixes). Writes to it
// skip this store's group commit; Close closes it.
func (b *Badger) DB() *badger.DB { return b.db }

var (
	_ loop.MessageStore = (*Badger)(nil)
	_ loop.AgentStore   = (*Badger)(nil)
	_ loop.TaskStore    = (*Badger)(nil)
	_ KV                = (*Badger)(nil)
)

// ValueThreshold is the size from which Badger keeps a value in its value
// log rather than inline in its memtables and tables. Badger's default
// (1 MiB) puts every message, event and task record of a conversation with
// large messages into the memtables: each is held in memory until its
// memtable is flushed, and the flush builds tables of them in memory again
// (a conversation of 100 messages of 900 KiB held about 2 GB). Past this
// size a value costs the memtable only a pointer.
const ValueThreshold = 64 << 10

// Open opens (or creates) a Badger store.
func Open(opts Options) (*Badger, error) {
	if !opts.InMemory && opts.Dir == "" {
		return nil, fmt.Errorf("open store: %w: no directory (set Dir, or InMemory)", loop.ErrInvalid)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bo := badger.DefaultOptions(opts.Dir)
	if opts.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	}
	bo = bo.WithLogger(badgerLogger{log}).WithMetricsEnabled(false).WithValueThreshold(ValueThreshold)
	if opts.Memory > 0 {
		bo = sizeForMemory(bo, opts.Memory)
	}
	if !opts.InMemory && opts.MinFreeBytes >= 0 {
		minFree := opts.MinFreeBytes
		if minFree == 0 {
			minFree = defaultMinFree(bo.MemTableSize)
		}
		bo = bo.WithValueLogFileSize(vlogFileSize(minFree, bo.ValueLogFileSize))
	}
	if opts.Tune != nil {
		bo = opts.Tune(bo)
	}
	bo = bo.WithSyncWrites(!opts.InMemory)
	if !opts.InMemory && opts.MinFreeBytes >= 0 {
		if least := leastMinFree(bo.MemTableSize); opts.MinFreeBytes > 0 && opts.MinFreeBytes < least {
			return nil, fmt.Errorf("open store %q: %w: store.minFreeBytes %d MiB is below the least the store keeps for a memtable of %d MiB (%d MiB): raise it, lower store.memoryBytes (smaller memtables), or set -1 for no check (then a disk that fills kills the host: SIGBUS in Badger's memory maps)",
				opts.Dir, loop.ErrInvalid, opts.MinFreeBytes>>20, bo.MemTableSize>>20, least>>20)
		}
		if err := checkOpenSpace(opts.Dir, bo.MemTableSize, openStatFree); err != nil {
			return nil, fmt.Errorf("open store %q: %w", opts.Dir, err)
		}
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("open store %q: %w", opts.Dir, err)
	}
	b := &Badger{
		db:       db,
		limits:   opts.Limits.withDefaults(),
		log:      log,
		maxBatch: opts.MaxBatch,
		closeBy:  opts.CloseTimeout,
		// Leave Badger's own limits a wide margin: our size estimate is
		// rough, and a transaction that overflows must never happen.
		maxSize:        db.MaxBatchSize() / 2,
		valueThreshold: bo.ValueThreshold,
		maxCount:       db.MaxBatchCount() / 2,
		ops:            make(chan *writeOp, 4096),
		statFree:       freeSpace,
		quit:           make(chan struct{}),
		laterKick:      make(chan struct{}, 1),
	}
	if !opts.InMemory {
		b.rides, b.laterDelay = true, defaultLaterDelay
	}
	if b.maxBatch <= 0 {
		b.maxBatch = 1024
	}
	if !opts.InMemory {
		b.dir = opts.Dir
		b.maxBytes = max(opts.MaxBytes, 0)
		switch {
		case opts.MinFreeBytes > 0:
			b.minFree = opts.MinFreeBytes
		case opts.MinFreeBytes == 0:
			b.minFree = defaultMinFree(bo.MemTableSize)
		}
		b.measureUsedNow()
		b.wg.Add(1)
		go b.usedLoop()
	}
	if b.closeBy == 0 {
		b.closeBy = time.Minute
	}
	b.events = &BadgerEvents{b: b}
	b.wg.Add(1)
	go b.commitLoop()
	sweepEvery := opts.SweepInterval
	if sweepEvery == 0 {
		sweepEvery = defaultSweepInterval
	}
	if sweepEvery > 0 {
		b.wg.Add(1)
		go b.sweepLoop(sweepEvery)
	}
	gcEvery := opts.GCInterval
	if gcEvery == 0 {
		gcEvery = 5 * time.Minute
	}
	ratio := opts.GCDiscardRatio
	if ratio <= 0 || ratio >= 1 {
		ratio = 0.5
	}
	b.gcRatio = ratio
	if gcEvery > 0 && !opts.InMemory {
		b.wg.Add(1)
		go b.gcLoop(gcEvery, ratio)
	}
	return b, nil
}

// Close finishes the writes already submitted, stops the store's goroutines
// and closes the database. Later calls of any method return ErrClosed.
//
// Close gives up, with an error, when the data folder is gone or after
// Options.CloseTimeout. Badger retries a memtable flush that fails without
// end, so a removed folder or a failing disk would otherwise hang the
// process's shutdown. Giving up loses nothing acknowledged: every write was
// synced to Badger's write-ahead log before its method returned, and the
// next Open replays that log. Badger's goroutines are left behind; the
// process is about to end.
func (b *Badger) Close() error {
	// Held task writes go now, before the queue closes (each was to go
	// within its deadline anyway).
	b.flushAllHeld()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.quit)
	b.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		b.wg.Wait()
		done <- b.db.Close()
	}()
	var deadline <-chan time.Time
	if b.closeBy > 0 {
		t := time.NewTimer(b.closeBy)
		defer t.Stop()
		deadline = t.C
	}
	// The folder is looked at now and then: a removed one never lets
	// Badger finish, so there is no point in waiting out the deadline.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("close store: %w", err)
			}
			return nil
		case <-deadline:
			b.log.Error("store: close did not finish; the data written since the last flush is in the write-ahead log and is replayed on the next start", "dir", b.dir, "after", b.closeBy)
			return fmt.Errorf("close store %q: %w: not finished after %v", b.dir, ErrCloseStuck, b.closeBy)
		case <-tick.C:
			if b.dir == "" {
				continue
			}
			if _, err := os.Stat(b.dir); errors.Is(err, fs.ErrNotExist) {
				b.log.Error("store: the data folder is gone; closing without it", "dir", b.dir)
				return fmt.Errorf("close store %q: %w: the data folder is gone", b.dir, ErrCloseStuck)
			}
		}
	}
}

// ErrCloseStuck: Close gave up waiting for the database to close.
var ErrCloseStuck = errors.New("store did not close")

// Events returns the store's event log.
func (b *Badger) Events() *BadgerEvents { return b.events }

func (b *Badger) gcLoop(every time.Duration, ratio float64) {
	defer b.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.quit:
			return
		case <-t.C:
		}
		n := 0
		for {
			err := b.db.RunValueLogGC(ratio)
			if err != nil {
				if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) && !errors.Is(err, badger.ErrBlockedWrites) {
					b.log.Warn("store: value log gc", "err", err)
				}
				break
			}
			n++
			select {
			case <-b.quit:
				return
			default:
			}
		}
		if n > 0 {
			b.log.Debug("store: value log gc rewrote files", "files", n)
		}
	}
}

// A writeOp is one logical write, applied by the commit goroutine.
//
// apply reads what it needs through txn (which sees the writes of earlier
// operations of the same batch) and returns the mutations to make; it must
// not write itself, and it may be called more than once (a batch that fills
// up is committed and the operation applied again in the next one).
//
// run, when set instead, is an operation too large for a shared
// transaction (history replacement, stream expiry): it runs alone, after the
// pending batch is committed, with its own transactions. It runs on the
// commit goroutine, so it must not submit writes itself (that would wait
// for itself).
//
// frees marks a write of the store's own cleanup that only removes data
// (and writes the small index and head records a crash-safe removal
// needs): below the floor where writes stop it still passes while the
// reserve for deletes lasts (deletesFit).
type writeOp struct {
	apply func(txn *badger.Txn) ([]mutation, error)
	run   func() error
	frees bool
	res   chan error
	// then is applied right after op, in the same batch, nothing between
	// them: a turn's commit behind the held write of its task
	// (DeferTaskLeased).
	then *writeOp
}

// write submits op and waits until it is durable. ctx is checked before
// submission only: once submitted, the write completes (a caller that gave
// up would not know whether it happened).
func (b *Badger) write(ctx context.Context, op *writeOp) error {
	if err := b.submit(ctx, op); err != nil {
		return err
	}
	return <-op.res
}

// submit queues op for the commit goroutine and returns; op.res answers
// it once it is durable (or refused). The queue is first in, first out:
// a write submitted after submit returns is applied after op, in its
// batch or a later one.
func (b *Badger) submit(ctx context.Context, op *writeOp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for o := op; o != nil; o = o.then {
		if o.res == nil {
			o.res = make(chan error, 1)
		}
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	b.ops <- op
	return nil
}

// refuse answers op, and the writes chained to it, with err.
func refuse(op *writeOp, err error) {
	for ; op != nil; op = op.then {
		op.res <- err
	}
}

// hold keeps op (a new task's write, storing the lease l) back until the
// commit of its turn's end comes (writeBehind) or flush submits it alone.
func (b *Badger) hold(l loop.Lease, op *writeOp) {
	op.res = make(chan error, 1)
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	if b.held == nil {
		b.held = make(map[heldKey]*writeOp)
	}
	b.held[heldKey{l.Key, l.Token}] = op
}

// takeHeld returns the write held for the lease l, no longer held, or nil.
func (b *Badger) takeHeld(l loop.Lease) *writeOp {
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	k := heldKey{l.Key, l.Token}
	op := b.held[k]
	delete(b.held, k)
	return op
}

// send submits op (and what is chained to it) whatever its caller's
// context does, answering it with the refusal when the store is closed.
func (b *Badger) send(op *writeOp) {
	if err := b.submit(context.Background(), op); err != nil {
		refuse(op, err)
	}
}

// flushHeld submits the write held for l alone, unless it was taken.
func (b *Badger) flushHeld(l loop.Lease) {
	if op := b.takeHeld(l); op != nil {
		b.send(op)
	}
}

// flushAllHeld submits every held write alone (Close).
func (b *Badger) flushAllHeld() {
	b.heldMu.Lock()
	ops := b.held
	b.held = nil
	b.heldMu.Unlock()
	for _, op := range ops {
		b.send(op)
	}
}

// writeBehind is write for a turn's commit fenced by l: when the write of
// l's new task is held (DeferTaskLeased), both go as one, the task's
// first, in one batch (one sync); each is answered on its own.
func (b *Badger) writeBehind(ctx context.Context, l *loop.Lease, op *writeOp) error {
	if l == nil {
		return b.write(ctx, op)
	}
	h := b.takeHeld(*l)
	if h == nil {
		return b.write(ctx, op)
	}
	if err := ctx.Err(); err != nil {
		b.send(h) // the task's write goes whatever becomes of this one
		return err
	}
	h.then = op
	b.send(h)
	return <-op.res
}

// writeLater is write for a write nobody waits on to answer a client:
// the retention of what is finished (a stream's expiry), a lease let go,
// a record of counters. It is queued to ride with the next batch, whoever
// submits it, so that it costs no sync of its own; with no batch coming,
// it is committed alone after laterDelay. It returns, like write, once the
// write is durable.
//
// The commit goroutine applies the queued writes first in a batch (they
// were submitted before whatever it took after them) and again at its
// end: a write queued before another is submitted (queueLater, then
// write) is in the same batch as that write or an earlier one.
func (b *Badger) writeLater(ctx context.Context, op *writeOp) error {
	if !b.rides {
		return b.write(ctx, op)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.queueLater(op); err != nil {
		return err
	}
	return <-op.res
}

// queueLater queues op to ride with the next batch (writeLater) and
// returns at once; op.res answers it.
func (b *Badger) queueLater(op *writeOp) error {
	op.res = make(chan error, 1)
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if !b.rides {
		b.ops <- op
		return nil
	}
	b.laterMu.Lock()
	b.later = append(b.later, op)
	first := len(b.later) == 1
	b.laterMu.Unlock()
	if first {
		select {
		case b.laterKick <- struct{}{}:
		default:
		}
	}
	return nil
}

// delayLater is laterDelay, read under laterMu (tests change it).
func (b *Badger) delayLater() time.Duration {
	b.laterMu.Lock()
	defer b.laterMu.Unlock()
	return b.laterDelay
}

// laterEmpty reports whether no write is queued to ride with the next
// batch.
func (b *Badger) laterEmpty() bool {
	b.laterMu.Lock()
	defer b.laterMu.Unlock()
	return len(b.later) == 0
}

// takeLater returns the queued writes, emptying the queue.
func (b *Badger) takeLater() []*writeOp {
	b.laterMu.Lock()
	defer b.laterMu.Unlock()
	ops := b.later
	b.later = nil
	return ops
}

// view runs fn on a read snapshot.
func (b *Badger) view(ctx context.Context, fn func(txn *badger.Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	b.reads.Add(1)
	return b.db.View(fn)
}

func (b *Badger) commitLoop() {
	defer b.wg.Done()
	// due fires laterDelay after the queue of writes riding with the
	// next batch stopped being empty: they are committed alone then.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var due <-chan time.Time
	for {
		select {
		case op := <-b.ops:
			b.batch(op)
			if due != nil {
				timer.Stop()
				due = nil
				if !b.laterEmpty() {
					// Queued since the batch took the others: they
					// wait for the next one from now.
					timer.Reset(b.delayLater())
					due = timer.C
				}
			}
		case <-b.laterKick:
			// A kick whose writes a batch already took arms nothing.
			if due == nil && !b.laterEmpty() {
				timer.Reset(b.delayLater())
				due = timer.C
			}
		case <-due:
			due = nil
			b.batch(nil)
		case <-b.quit:
			// Close holds no lock now and no submitter can add more:
			// finish what is queued.
			for {
				select {
				case op := <-b.ops:
					b.batch(op)
					continue
				default:
				}
				b.batch(nil)
				return
			}
		}
	}
}

// batch applies op and whatever else is queued, up to maxBatch operations,
// in one transaction, commits it (one sync) and answers every operation.
//
// Before it looks at the queue it yields its thread once: the writers that
// the previous commit answered are runnable at that moment, and the one
// that woke first would otherwise have its next write synced alone while
// the others' arrive a moment later, for the commit after (a task's two
// event streams, its events and its turn's commit, leapfrogging one sync
// each). This is scheduling, not waiting: with nothing else runnable it
// returns at once.
//
// Below the floor where writes stop, the writes of the store's cleanup
// that only remove data (writeOp.frees) still pass while the reserve for
// deletes lasts; every other write of the batch is refused.
func (b *Badger) batch(first *writeOp) {
	// first is nil when the writes riding with the next batch waited
	// laterDelay for one: they are the batch.
	later := b.takeLater()
	if first == nil && len(later) == 0 {
		return
	}
	full := b.checkSpace()
	freesOnly := full != nil && b.deletesFit() == nil
	if full != nil && !freesOnly {
		b.refused.Add(1)
		// Refuse the writes waiting now too: each would hit the same
		// wall, and the check is made once per batch.
		if first != nil {
			refuse(first, full)
		}
		for _, op := range later {
			op.res <- full
		}
		for n := 1; n < b.maxBatch; n++ {
			select {
			case op := <-b.ops:
				refuse(op, full)
				continue
			default:
			}
			break
		}
		return
	}
	c := committer{b: b, txn: b.db.NewTransaction(true)}
	refused := false
	take := func(op *writeOp) {
		for ; op != nil; op = op.then {
			if freesOnly && !op.frees {
				refused = true
				op.res <- full
				continue
			}
			c.add(op)
		}
	}
	// The writes riding with this batch were queued before it began: they
	// go first.
	for _, op := range later {
		take(op)
	}
	if first != nil {
		take(first)
	}
	runtime.Gosched()
	for n := 1; n < b.maxBatch; n++ {
		select {
		case op := <-b.ops:
			take(op)
			continue
		default:
		}
		break
	}
	// And those queued meanwhile: one queued before a write taken above
	// was submitted is in its batch.
	for _, op := range b.takeLater() {
		take(op)
	}
	if refused {
		b.refused.Add(1)
	}
	c.commit()
	c.txn.Discard()
}

type committer struct {
	b       *Badger
	txn     *badger.Txn
	pending []*writeOp
	size    int64
	count   int64
}

// mutation is one write of an operation: a set (with an expiry in Unix
// seconds, 0: never) or a delete.
type mutation struct {
	key, value []byte
	expiresAt  uint64
	del        bool
}

func set(key, value []byte) mutation { return mutation{key: key, value: value} }
func del(key []byte) mutation        { return mutation{key: key, del: true} }

// estimate is what ms weigh against Badger's bound on a transaction: as
// Badger counts them, a value from its value threshold on (kept in the
// value log) weighs a pointer, not its length; so a turn that saves a
// message of 900 KB is not refused for a memtable of 16 MiB.
func estimate(ms []mutation, threshold int64) (size, count int64) {
	for _, m := range ms {
		v := int64(len(m.value))
		if v >= threshold {
			v = 16
		}
		size += int64(len(m.key)) + v + 64
	}
	return size, int64(len(ms))
}

func (c *committer) add(op *writeOp) {
	if op.run != nil {
		c.commit()
		op.res <- op.run()
		// The transaction's snapshot predates what run wrote.
		c.txn.Discard()
		c.txn = c.b.db.NewTransaction(true)
		return
	}
	es, err := op.apply(c.txn)
	if err != nil {
		op.res <- err
		return
	}
	size, count := estimate(es, c.b.valueThreshold)
	if c.size+size > c.b.maxSize || c.count+count > c.b.maxCount {
		if len(c.pending) == 0 {
			op.res <- fmt.Errorf("%w: write of %d entries, %d bytes is too large for one transaction", loop.ErrInvalid, count, size)
			return
		}
		c.commit()
		if es, err = op.apply(c.txn); err != nil {
			op.res <- err
			return
		}
		size, count = estimate(es, c.b.valueThreshold)
		if size > c.b.maxSize || count > c.b.maxCount {
			op.res <- fmt.Errorf("%w: write of %d entries, %d bytes is too large for one transaction", loop.ErrInvalid, count, size)
			return
		}
	}
	for i, m := range es {
		var err error
		if m.del {
			err = c.txn.Delete(m.key)
		} else {
			err = c.txn.SetEntry(&badger.Entry{Key: m.key, Value: m.value, ExpiresAt: m.expiresAt})
		}
		if err != nil {
			// Not expected (the estimate leaves a wide margin); the
			// transaction holds part of op: rebuild it without op.
			op.res <- fmt.Errorf("write entry %d of %d: %w", i+1, len(es), err)
			c.rebuild()
			return
		}
	}
	c.size += size
	c.count += count
	c.pending = append(c.pending, op)
}

// rebuild replaces the transaction by one holding only the pending
// operations.
func (c *committer) rebuild() {
	c.txn.Discard()
	ops := c.pending
	c.pending, c.size, c.count = nil, 0, 0
	c.txn = c.b.db.NewTransaction(true)
	for _, op := range ops {
		c.add(op)
	}
}

// commit makes the pending operations durable, answers them and starts a
// new transaction.
func (c *committer) commit() {
	if len(c.pending) == 0 {
		return
	}
	err := c.txn.Commit()
	c.b.commits.Add(1)
	c.b.mutations.Add(c.count)
	c.b.written.Add(c.size)
	if err != nil {
		err = fmt.Errorf("commit: %w", err)
	}
	for _, op := range c.pending {
		op.res <- err
	}
	c.pending, c.size, c.count = c.pending[:0], 0, 0
	c.txn = c.b.db.NewTransaction(true)
}

// getValue returns a copy of the value of key, or nil, false when absent.
func getValue(txn *badger.Txn, key []byte) ([]byte, bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err := item.ValueCopy(nil)
	return v, err == nil, err
}

// readHead returns the head at key; ok is false when there is none.
func readHead(txn *badger.Txn, key []byte) (h head, ok bool, err error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return head{}, false, nil
	}
	if err != nil {
		return head{}, false, err
	}
	err = item.Value(func(v []byte) error {
		h, err = decodeHead(v)
		return err
	})
	if err != nil {
		return head{}, false, corrupt(key, err)
	}
	return h, true, nil
}

// purge deletes the keys under prefix (sequence keys: msg/ or evt/) whose
// seq is below bound (bound 0: all of them), in transactions of bounded
// size. It runs on the commit goroutine, as part of an exclusive operation.
func (b *Badger) purge(prefix []byte, bound uint64) error {
	const chunk = 10000
	var from []byte
	for {
		var keys [][]byte
		err := b.db.View(func(txn *badger.Txn) error {
			opts := badger.IteratorOptions{Prefix: prefix}
			it := txn.NewIterator(opts)
			defer it.Close()
			if from == nil {
				it.Rewind()
			} else {
				it.Seek(from)
			}
			for ; it.Valid() && len(keys) < chunk; it.Next() {
				k := it.Item().KeyCopy(nil)
				if bound > 0 {
					seq, err := parseSeqKey(k, string(prefix))
					if err == nil && seq >= bound {
						break
					}
				}
				keys = append(keys, k)
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		err = b.update(func(txn *badger.Txn) error {
			for _, k := range keys {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || len(keys) < chunk {
			return err
		}
		from = append(keys[len(keys)-1], 0)
	}
}

// badgerLogger sends Badger's messages to slog.
type badgerLogger struct{ l *slog.Logger }

func (l badgerLogger) Errorf(f string, a ...any) {
	l.l.Error("badger: " + trimNL(fmt.Sprintf(f, a...)))
}
func (l badgerLogger) Warningf(f string, a ...any) {
	l.l.Warn("badger: " + trimNL(fmt.Sprintf(f, a...)))
}
func (l badgerLogger) Infof(f string, a ...any) { l.l.Debug("badger: " + trimNL(fmt.Sprintf(f, a...))) }
func (l badgerLogger) Debugf(f string, a ...any) {
	l.l.Debug("badger: " + trimNL(fmt.Sprintf(f, a...)))
}

func trimNL(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}

// Commits returns how many transactions the store has committed since it
// opened: each is one synced write to disk (a group commit counts once).
func (b *Badger) Commits() int64 { return b.commits.Load() }

// Mutations returns how many keys the store's commits have set or deleted
// since it opened (the writes of history replacement, stream deletion and
// the like, which run in transactions of their own, are not counted).
func (b *Badger) Mutations() int64 { return b.mutations.Load() }

// WrittenBytes returns the estimated size of the keys and values the
// store's commits have written since it opened (as Mutations counts them;
// a value kept in Badger's value log counts as a pointer).
func (b *Badger) WrittenBytes() int64 { return b.written.Load() }

// Reads returns how many reads (snapshots: a load, a list, a stream read)
// the store has served since it opened.
func (b *Badger) Reads() int64 { return b.reads.Load() }
