package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// MemoryOptions configures a Memory store. A zero field means its default.
type MemoryOptions struct {
	// SweepInterval is how often expired tasks and event streams are
	// removed (default 1 minute; negative: never, they are still hidden
	// from reads once expired).
	SweepInterval time.Duration
	Limits        Limits
}

// Memory keeps everything in process memory: for embedding and tests. It
// implements loop.MessageStore, loop.AgentStore, loop.TaskStore and KV; its
// event log is Events(). It keeps copies of what it is given and hands out
// copies. All methods are safe for concurrent use.
type Memory struct {
	limits Limits

	histMu sync.RWMutex
	hist   map[string][]loop.Message

	agentMu sync.RWMutex
	agents  map[string]loop.AgentMetadata
	// convDeletes: the deletions of conversations to finish
	// (PendingConversationDeletes), under agentMu.
	convDeletes map[string]time.Time
	convIdx     *memConvIndex // the agents by last activity, under agentMu

	taskMu    sync.RWMutex
	tasks     map[string]loop.TaskRecord
	openTasks map[string]int // context id → its unfinished tasks, under taskMu

	kvMu sync.RWMutex
	kv   map[string]map[string][]byte

	durMu   sync.RWMutex
	ckpts   map[string]loop.Checkpoint
	journal map[string]map[string]loop.JournalEntry // task → call → entry

	commitMu sync.Mutex // one CommitTurn at a time

	leaseMu sync.Mutex
	leases  map[string]loop.Lease

	events *MemoryEvents

	closeOnce sync.Once
	stop      chan struct{}
	wg        sync.WaitGroup
}

var (
	_ loop.MessageStore = (*Memory)(nil)
	_ loop.AgentStore   = (*Memory)(nil)
	_ loop.TaskStore    = (*Memory)(nil)
	_ KV                = (*Memory)(nil)
)

// NewMemory returns an empty in-memory store. Close stops its sweeper.
func NewMemory(opts MemoryOptions) *Memory {
	m := &Memory{
		limits:    opts.Limits.withDefaults(),
		hist:      map[string][]loop.Message{},
		agents:    map[string]loop.AgentMetadata{},
		convIdx:   newMemConvIndex(),
		tasks:     map[string]loop.TaskRecord{},
		openTasks: map[string]int{},
		kv:        map[string]map[string][]byte{},
		ckpts:     map[string]loop.Checkpoint{},
		journal:   map[string]map[string]loop.JournalEntry{},
		leases:    map[string]loop.Lease{},
		stop:      make(chan struct{}),
	}
	m.events = &MemoryEvents{limits: m.limits, streams: map[string]*memStream{}}
	interval := opts.SweepInterval
	if interval == 0 {
		interval = time.Minute
	}
	if interval > 0 {
		m.wg.Add(1)
		go m.sweepLoop(interval)
	}
	return m
}

// Close stops the sweeper. The data stays readable: Memory has no resources
// other than its goroutine.
func (m *Memory) Close() error {
	m.closeOnce.Do(func() { close(m.stop) })
	m.wg.Wait()
	return nil
}

// Events returns the store's event log.
func (m *Memory) Events() *MemoryEvents { return m.events }

func (m *Memory) sweepLoop(every time.Duration) {
	defer m.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			m.Sweep(now)
		}
	}
}

// Sweep removes the tasks and event streams that have expired at now.
func (m *Memory) Sweep(now time.Time) {
	m.taskMu.Lock()
	for id, t := range m.tasks {
		if expired(t.ExpiresAt, now) {
			m.dropTaskLocked(id)
		}
	}
	m.taskMu.Unlock()
	m.events.sweep(now)
}

// Append implements loop.MessageStore.
func (m *Memory) Append(ctx context.Context, contextID string, msgs ...loop.Message) error {
	if err := m.limits.checkID("context id", contextID); err != nil {
		return fmt.Errorf("append messages: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("append messages: %w", err)
	}
	if len(msgs) == 0 {
		return nil
	}
	for i := range msgs {
		if msgs[i].Role == "" {
			return fmt.Errorf("append messages: %w: message %d has no role", loop.ErrInvalid, i)
		}
	}
	cp := cloneMessages(msgs)
	m.histMu.Lock()
	m.hist[contextID] = append(m.hist[contextID], cp...)
	m.histMu.Unlock()
	return nil
}

// Recent implements loop.MessageStore.
func (m *Memory) Recent(ctx context.Context, contextID string, limit int) ([]loop.Message, error) {
	if err := m.limits.checkID("context id", contextID); err != nil {
		return nil, fmt.Errorf("recent messages: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("recent messages: %w", err)
	}
	m.histMu.RLock()
	defer m.histMu.RUnlock()
	h := m.hist[contextID]
	if limit > 0 && len(h) > limit {
		h = h[len(h)-limit:]
	}
	if len(h) == 0 {
		return []loop.Message{}, nil
	}
	return cloneMessages(h), nil
}

// Count implements loop.MessageStore.
func (m *Memory) Count(ctx context.Context, contextID string) (int, error) {
	if err := m.limits.checkID("context id", contextID); err != nil {
		return 0, fmt.Errorf("count messages: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("count messages: %w", err)
	}
	m.histMu.RLock()
	defer m.histMu.RUnlock()
	return len(m.hist[contextID]), nil
}

// Replace implements loop.MessageStore.
func (m *Memory) Replace(ctx context.Context, contextID string, msgs []loop.Message) error {
	if err := m.limits.checkID("context id", contextID); err != nil {
		return fmt.Errorf("replace messages: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("replace messages: %w", err)
	}
	for i := range msgs {
		if msgs[i].Role == "" {
			return fmt.Errorf("replace messages: %w: message %d has no role", loop.ErrInvalid, i)
		}
	}
	cp := cloneMessages(msgs)
	m.histMu.Lock()
	defer m.histMu.Unlock()
	if len(cp) == 0 {
		delete(m.hist, contextID)
		return nil
	}
	m.hist[contextID] = cp
	return nil
}

// Delete implements loop.MessageStore.
func (m *Memory) Delete(ctx context.Context, contextID string) error {
	if err := m.limits.checkID("context id", contextID); err != nil {
		return fmt.Errorf("delete messages: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete messages: %w", err)
	}
	m.histMu.Lock()
	delete(m.hist, contextID)
	m.histMu.Unlock()
	return nil
}

// SaveAgent implements loop.AgentStore.
func (m *Memory) SaveAgent(ctx context.Context, a loop.AgentMetadata) error {
	if err := m.limits.checkID("context id", a.ContextID); err != nil {
		return fmt.Errorf("save agent: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("save agent: %w", err)
	}
	a = cloneAgent(a)
	m.agentMu.Lock()
	m.agents[a.ContextID] = a
	m.convIdx.put(a.ContextID, lastActive(a.CreatedAt, a.LastActivity))
	m.agentMu.Unlock()
	return nil
}

// LoadAgent implements loop.AgentStore.
func (m *Memory) LoadAgent(ctx context.Context, contextID string) (loop.AgentMetadata, error) {
	if err := m.limits.checkID("context id", contextID); err != nil {
		return loop.AgentMetadata{}, fmt.Errorf("load agent: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return loop.AgentMetadata{}, fmt.Errorf("load agent: %w", err)
	}
	m.agentMu.RLock()
	a, ok := m.agents[contextID]
	m.agentMu.RUnlock()
	if !ok {
		return loop.AgentMetadata{}, fmt.Errorf("load agent: %w", &loop.NotFoundError{What: "agent", ID: contextID})
	}
	return cloneAgent(a), nil
}

// DeleteAgent implements loop.AgentStore.
func (m *Memory) DeleteAgent(ctx context.Context, contextID string) error {
	if err := m.limits.checkID("context id", contextID); err != nil {
		return fmt.Errorf("delete agent: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete agent: %w", err)
	}
	m.agentMu.Lock()
	delete(m.agents, contextID)
	m.convIdx.remove(contextID)
	m.agentMu.Unlock()
	return nil
}

// SaveTask implements loop.TaskStore.
func (m *Memory) SaveTask(ctx context.Context, t loop.TaskRecord) error {
	if err := checkTask(m.limits, &t); err != nil {
		return fmt.Errorf("save task: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("save task: %w", err)
	}
	t = cloneTask(t)
	m.taskMu.Lock()
	defer m.taskMu.Unlock()
	if err := m.checkVersionLocked(&t); err != nil {
		return fmt.Errorf("save task: %w", err)
	}
	t.Version++
	m.dropTaskLocked(t.ID)
	m.tasks[t.ID] = t
	if !t.Status.Terminal() {
		m.openTasks[t.ContextID]++
	}
	return nil
}

// dropTaskLocked removes a task and its count in openTasks. taskMu is
// held.
func (m *Memory) dropTaskLocked(id string) {
	old, ok := m.tasks[id]
	if !ok {
		return
	}
	delete(m.tasks, id)
	if !old.Status.Terminal() {
		if m.openTasks[old.ContextID]--; m.openTasks[old.ContextID] <= 0 {
			delete(m.openTasks, old.ContextID)
		}
	}
}

// checkVersionLocked refuses a write of t over a record of another
// version. m.taskMu is held.
func (m *Memory) checkVersionLocked(t *loop.TaskRecord) error {
	var cur uint64
	if old, ok := m.tasks[t.ID]; ok && !expired(old.ExpiresAt, time.Now()) {
		cur = old.Version
	}
	return versionCheck(t.ID, cur, t.Version)
}

// versionCheck is the compare of a versioned task write.
func versionCheck(id string, stored, read uint64) error {
	if stored != read {
		return fmt.Errorf("task %q: stored version %d, written over version %d: %w", id, stored, read, loop.ErrConflict)
	}
	return nil
}

func checkTask(l Limits, t *loop.TaskRecord) error {
	if err := l.checkID("task id", t.ID); err != nil {
		return err
	}
	if err := l.checkID("context id", t.ContextID); err != nil {
		return err
	}
	if len(t.AgentID) > l.MaxIDSize || len(t.Owner) > l.MaxIDSize {
		return fmt.Errorf("%w: task %q: agent id or owner longer than %d bytes", loop.ErrInvalid, t.ID, l.MaxIDSize)
	}
	return nil
}

// LoadTask implements loop.TaskStore.
// TaskExists implements loop.TaskPresence.
func (m *Memory) TaskExists(ctx context.Context, id string) (bool, error) {
	if err := m.limits.checkID("task id", id); err != nil {
		return false, fmt.Errorf("task exists: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("task exists: %w", err)
	}
	m.taskMu.RLock()
	t, ok := m.tasks[id]
	m.taskMu.RUnlock()
	return ok && !expired(t.ExpiresAt, time.Now()), nil
}

func (m *Memory) LoadTask(ctx context.Context, id string) (loop.TaskRecord, error) {
	if err := m.limits.checkID("task id", id); err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	m.taskMu.RLock()
	t, ok := m.tasks[id]
	m.taskMu.RUnlock()
	if !ok || expired(t.ExpiresAt, time.Now()) {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", &loop.NotFoundError{What: "task", ID: id})
	}
	return cloneTask(t), nil
}

// LoadTaskOf implements loop.TaskStore.
func (m *Memory) LoadTaskOf(ctx context.Context, id, owner string) (loop.TaskRecord, error) {
	if err := m.limits.checkID("task id", id); err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", err)
	}
	m.taskMu.RLock()
	t, ok := m.tasks[id]
	m.taskMu.RUnlock()
	if !ok || t.Owner != owner || expired(t.ExpiresAt, time.Now()) {
		return loop.TaskRecord{}, fmt.Errorf("load task: %w", &loop.NotFoundError{What: "task", ID: id})
	}
	return cloneTask(t), nil
}

// ListTasks implements loop.TaskStore.
func (m *Memory) ListTasks(ctx context.Context, f loop.TaskFilter) ([]loop.TaskRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	now := time.Now()
	type entry struct {
		created uint64
		id      string // escaped: the order of the Badger index
		t       *loop.TaskRecord
	}
	m.taskMu.RLock()
	defer m.taskMu.RUnlock()
	var after *entry
	if f.After != "" {
		t, ok := m.tasks[f.After]
		if !ok || expired(t.ExpiresAt, now) {
			return nil, fmt.Errorf("list tasks: %w: page token: task %q not found", loop.ErrInvalid, f.After)
		}
		after = &entry{created: timeKey(t.CreatedAt), id: escape(t.ID)}
	}
	var hits []entry
	for id := range m.tasks {
		t := m.tasks[id]
		if expired(t.ExpiresAt, now) {
			continue
		}
		s := summarize(&t)
		if !s.match(&f) {
			continue
		}
		e := entry{created: timeKey(t.CreatedAt), id: escape(t.ID), t: &t}
		if after != nil && (e.created > after.created || e.created == after.created && e.id >= after.id) {
			continue
		}
		hits = append(hits, e)
	}
	slices.SortFunc(hits, func(a, b entry) int {
		if c := cmp.Compare(b.created, a.created); c != 0 {
			return c
		}
		return cmp.Compare(b.id, a.id)
	})
	if f.Limit > 0 && len(hits) > f.Limit {
		hits = hits[:f.Limit]
	}
	out := make([]loop.TaskRecord, len(hits))
	for i, e := range hits {
		out[i] = cloneTask(*e.t)
	}
	return out, nil
}

// DeleteTask implements loop.TaskStore. Deleting an unknown task is not an
// error.
func (m *Memory) DeleteTask(ctx context.Context, id string) error {
	if err := m.limits.checkID("task id", id); err != nil {
		return fmt.Errorf("delete task: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete task: %w", err)
	}
	m.taskMu.Lock()
	m.dropTaskLocked(id)
	m.taskMu.Unlock()
	return nil
}

// KVGet implements KV.
func (m *Memory) KVGet(ctx context.Context, namespace, key string) ([]byte, error) {
	if err := m.limits.checkKV(namespace, key, nil, false); err != nil {
		return nil, fmt.Errorf("kv get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("kv get: %w", err)
	}
	m.kvMu.RLock()
	v, ok := m.kv[namespace][key]
	m.kvMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("kv get: %w", &loop.NotFoundError{What: "kv key", ID: namespace + "/" + key})
	}
	return cloneBytes(v), nil
}

// KVSet implements KV.
func (m *Memory) KVSet(ctx context.Context, namespace, key string, value []byte) error {
	if err := m.limits.checkKV(namespace, key, value, true); err != nil {
		return fmt.Errorf("kv set: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kv set: %w", err)
	}
	v := append([]byte{}, value...)
	m.kvMu.Lock()
	ns := m.kv[namespace]
	if ns == nil {
		ns = map[string][]byte{}
		m.kv[namespace] = ns
	}
	ns[key] = v
	m.kvMu.Unlock()
	return nil
}

// KVDelete implements KV.
func (m *Memory) KVDelete(ctx context.Context, namespace, key string) error {
	if err := m.limits.checkKV(namespace, key, nil, false); err != nil {
		return fmt.Errorf("kv delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kv delete: %w", err)
	}
	m.kvMu.Lock()
	if ns := m.kv[namespace]; ns != nil {
		delete(ns, key)
		if len(ns) == 0 {
			delete(m.kv, namespace)
		}
	}
	m.kvMu.Unlock()
	return nil
}

// ExpireConversations deletes the conversations (agent record, history)
// whose last activity is before idleBefore and that have no unfinished
// task, and returns their ids. It looks at the conversations of the
// index by last activity older than idleBefore (memConvIndex), and at
// their counts of unfinished tasks. A task saved meanwhile waits for it (the
// task lock is held throughout), so a conversation whose turn began first
// is kept.
func (m *Memory) ExpireConversations(ctx context.Context, idleBefore time.Time) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("expire conversations: %w", err)
	}
	m.commitMu.Lock()
	defer m.commitMu.Unlock()
	m.agentMu.Lock()
	defer m.agentMu.Unlock()
	m.taskMu.RLock()
	defer m.taskMu.RUnlock()
	var idle []string
	for _, id := range m.convIdx.before(idleBefore) {
		if a := m.agents[id]; lastActive(a.CreatedAt, a.LastActivity).Before(idleBefore) {
			idle = append(idle, id)
		}
	}
	var gone []string
	for _, id := range idle {
		if m.openTasks[id] == 0 {
			gone = append(gone, id)
		}
	}
	m.histMu.Lock()
	for _, id := range gone {
		delete(m.agents, id)
		m.convIdx.remove(id)
		delete(m.hist, id)
	}
	m.histMu.Unlock()
	return gone, nil
}

// DeleteConversation deletes the conversation contextID (agent record,
// history) now unless it has an unfinished task (then false, nothing
// deleted), under the same locks as ExpireConversations. Without an agent
// record it returns a *loop.NotFoundError (its history is deleted all the
// same).
func (m *Memory) DeleteConversation(ctx context.Context, contextID string) (bool, error) {
	if err := m.limits.checkID("context id", contextID); err != nil {
		return false, fmt.Errorf("delete conversation: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("delete conversation: %w", err)
	}
	m.commitMu.Lock()
	defer m.commitMu.Unlock()
	m.agentMu.Lock()
	defer m.agentMu.Unlock()
	m.taskMu.RLock()
	defer m.taskMu.RUnlock()
	if m.openTasks[contextID] > 0 {
		return false, nil
	}
	_, found := m.agents[contextID]
	delete(m.agents, contextID)
	if m.convDeletes == nil {
		m.convDeletes = map[string]time.Time{}
	}
	m.convDeletes[contextID] = time.Now()
	m.convIdx.remove(contextID)
	m.histMu.Lock()
	delete(m.hist, contextID)
	m.histMu.Unlock()
	if !found {
		return false, &loop.NotFoundError{What: "conversation", ID: contextID}
	}
	return true, nil
}
