package taskrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/looopy-go/looopy/loop"
)

// UsageLimit bounds a principal's usage; zero fields are unbounded.
type UsageLimit struct {
	Tokens    int64 `json:"tokens,omitempty"`
	ToolCalls int64 `json:"toolCalls,omitempty"`
}

// PrincipalUsage is what a principal has used.
type PrincipalUsage struct {
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	TotalTokens      int64 `json:"totalTokens"`
	ToolCalls        int64 `json:"toolCalls"`
	Turns            int64 `json:"turns"`
	// ReservedTokens are held by the principal's model calls running now
	// (its turns' and their sub-agents', loop.TurnUsage.PendingTokens, and
	// those of agent plugins called over MCP, Usage.Hold): counted against
	// its token limit, never saved; each call's real usage replaces its
	// reservation when it ends. On shared counters they are the holds of
	// every host that have not lapsed.
	ReservedTokens int64 `json:"reservedTokens,omitempty"`
}

// UsageKV is the part of the store the usage counters persist in.
type UsageKV interface {
	KVGet(ctx context.Context, namespace, key string) ([]byte, error)
	KVSet(ctx context.Context, namespace, key string, value []byte) error
}

// UsageKVQueue is a UsageKV that can queue a write to ride with its next
// batch of writes (store.Badger.KVSetQueued): KVSetQueued returns at once,
// and wait (called once) when the write is durable. Writes queued one
// after the other are applied in that order, and one queued before
// another write is submitted is durable no later than that write.
type UsageKVQueue interface {
	KVSetQueued(namespace, key string, value []byte) (wait func() error)
}

// UsageCounters keep counters in a store several hosts share: an
// addition is atomic and returns the totals, so that every host sees what
// all of them counted. A counter never added to reads as zero.
type UsageCounters interface {
	AddCounters(ctx context.Context, namespace, key string, deltas map[string]int64) (map[string]int64, error)
	// ReserveCounter adds n to counter name unless that would take it
	// past limit, in one step on the store; it returns the counters after
	// it and whether n was added.
	ReserveCounter(ctx context.Context, namespace, key, name string, n, limit int64) (map[string]int64, bool, error)
	// ReserveHeld holds n under id (replacing what id held) while
	// counter name plus everything held is below limit, in one step on the
	// store; a hold not settled within ttl lapses (its host died). It
	// returns the counter and the total held by others, and whether n is
	// held.
	ReserveHeld(ctx context.Context, namespace, key, id, name string, n, limit int64, ttl time.Duration) (cur, held int64, ok bool, err error)
	// AddCountersSettling is AddCounters that also drops the holds of
	// ids, in the same step.
	AddCountersSettling(ctx context.Context, namespace, key string, ids []string, deltas map[string]int64) (map[string]int64, error)
	Counters(ctx context.Context, namespace, key string) (map[string]int64, error)
	// CountersHeld is Counters with the total of the holds on them that
	// have not lapsed, read in one step.
	CountersHeld(ctx context.Context, namespace, key string) (map[string]int64, int64, error)
}

// The counter names of a principal's usage in UsageCounters.
const (
	cntPrompt     = "promptTokens"
	cntCompletion = "completionTokens"
	cntTotal      = "totalTokens"
	cntToolCalls  = "toolCalls"
	cntTurns      = "turns"
)

func usageOf(m map[string]int64) PrincipalUsage {
	return PrincipalUsage{PromptTokens: m[cntPrompt], CompletionTokens: m[cntCompletion], TotalTokens: m[cntTotal],
		ToolCalls: m[cntToolCalls], Turns: m[cntTurns]}
}

// usageNamespace is the KV namespace of the per-principal counters.
const usageNamespace = "host/usage"

// Usage counts tokens and tool calls per principal, checks the
// limits (it is the loop's Budget), and saves each principal's totals at
// the end of every turn.
type Usage struct {
	kv UsageKV // nil: counters live as long as the process
	// shared, when set, keeps the counters instead of kv and memory:
	// every host adds to the same totals (NewSharedUsage).
	shared UsageCounters
	limits map[string]UsageLimit
	log    *slog.Logger

	tokens    metric.Int64Counter
	toolCalls metric.Int64Counter

	mu   sync.Mutex
	by   map[string]*PrincipalUsage
	last map[string]loop.TurnUsage // by task id: what the turn reported last
	// held: by task id, by call (loop.TurnUsage.Call), the tokens
	// reserved for each model call running now.
	held map[string]map[string]int64
	// ReserveTTL is how long a token reservation on shared counters
	// lasts unsettled (a host that died holding it); default 10 minutes.
	ReserveTTL time.Duration
	seq        uint64                 // totals snapshots taken (u.mu)
	savers     map[string]*usageSaver // by principal (u.mu)
}

// usageSaver writes a principal's totals to kv, the newest snapshot each
// time, one write at a time; every field is guarded by Usage.mu.
type usageSaver struct {
	latest  PrincipalUsage
	seq     uint64        // of latest
	saved   uint64        // the newest seq written (or given up on)
	running bool          // a goroutine is writing
	wake    chan struct{} // closed (and replaced) after each write
}

// NewUsage returns the usage counters of every principal, kept in kv
// (nil: in memory) and bounded by limits (the key "*" applies to every
// principal without its own entry). A nil meter records no metrics.
func NewUsage(kv UsageKV, limits map[string]UsageLimit, meter metric.Meter, log *slog.Logger) (*Usage, error) {
	if meter == nil {
		meter = noop.NewMeterProvider().Meter("looopy")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u := &Usage{kv: kv, limits: limits, log: log, by: map[string]*PrincipalUsage{}, last: map[string]loop.TurnUsage{},
		held: map[string]map[string]int64{}, savers: map[string]*usageSaver{}}
	var err1, err2 error
	u.tokens, err1 = meter.Int64Counter("looopy.principal.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used by each principal's turns."))
	u.toolCalls, err2 = meter.Int64Counter("looopy.principal.tool_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Tool calls run by each principal's turns."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("usage metrics: %w", err)
	}
	return u, nil
}

func principalOf(t *loop.Turn) string {
	if t.Auth != nil && t.Auth.Principal != "" {
		return t.Auth.Principal
	}
	return defaultPrincipal
}

// defaultPrincipal is the principal of a turn without one: the host's
// principal when auth is off.
const defaultPrincipal = "local"

// NewSharedUsage returns usage counters kept in c, a store several hosts
// share: each report of a turn is added to the principal's totals there
// (one round trip) and the limits are checked against the totals of the
// whole service, not of one host.
func NewSharedUsage(c UsageCounters, limits map[string]UsageLimit, meter metric.Meter, log *slog.Logger) (*Usage, error) {
	if c == nil {
		return nil, fmt.Errorf("shared usage: %w: no counters", loop.ErrInvalid)
	}
	u, err := NewUsage(nil, limits, meter, log)
	if err != nil {
		return nil, err
	}
	u.shared = c
	return u, nil
}

// get returns the counters of p, loaded from the store on first use.
// u.mu is held.
func (u *Usage) get(ctx context.Context, p string) *PrincipalUsage {
	if pu, ok := u.by[p]; ok {
		return pu
	}
	pu := &PrincipalUsage{}
	if u.kv != nil {
		b, err := u.kv.KVGet(ctx, usageNamespace, p)
		switch {
		case err == nil:
			if err := json.Unmarshal(b, pu); err != nil {
				u.log.LogAttrs(ctx, slog.LevelWarn, "usage record unreadable; counting from zero",
					slog.String("principal", p), slog.String("error", err.Error()))
				*pu = PrincipalUsage{}
			}
		case !errors.Is(err, loop.ErrNotFound):
			u.log.LogAttrs(ctx, slog.LevelWarn, "usage record not loaded", slog.String("principal", p),
				slog.String("error", err.Error()))
		}
	}
	u.by[p] = pu
	return pu
}

// Usage returns what principal p has used.
func (u *Usage) Usage(ctx context.Context, p string) PrincipalUsage {
	if u.shared != nil {
		m, held, err := u.shared.CountersHeld(ctx, usageNamespace, p)
		if err != nil {
			u.log.LogAttrs(ctx, slog.LevelWarn, "usage not loaded", slog.String("principal", p),
				slog.String("error", err.Error()))
		}
		pu := usageOf(m)
		pu.ReservedTokens = held
		return pu
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return *u.get(ctx, p)
}

// Budget is loop.Config.Budget: it accounts what the turn used since its
// last report and refuses to go on once the principal reached a limit.
func (u *Usage) Budget(ctx context.Context, t *loop.Turn, used loop.TurnUsage) error {
	p := principalOf(t)
	if u.shared != nil {
		return u.sharedBudget(ctx, t, p, used)
	}
	u.mu.Lock()
	pu := u.get(ctx, p)
	prev := u.last[t.TaskID]
	dTok := int64(used.TotalTokens - prev.TotalTokens)
	dTools := int64(used.ToolCalls - prev.ToolCalls)
	pu.PromptTokens += int64(used.PromptTokens - prev.PromptTokens)
	pu.CompletionTokens += int64(used.CompletionTokens - prev.CompletionTokens)
	pu.TotalTokens += dTok
	pu.ToolCalls += dTools
	// The call it was reserved for has ended: what it used is in this
	// report (nothing, when it failed or was canceled); a final report
	// ends every call of the turn.
	pu.ReservedTokens -= u.settleLocked(t.TaskID, used.Call, used.Final)
	lim, limited := u.limitOf(p)
	var refused error
	if limited && !used.Final && used.PendingTokens > 0 {
		// The check and the reservation are one step (under u.mu).
		if refused = overLimit(p, lim, *pu); refused == nil && lim.Tokens > 0 {
			pu.ReservedTokens += int64(used.PendingTokens)
			u.holdLocked(t.TaskID, used.Call, int64(used.PendingTokens))
		}
	}
	if limited && !used.Final && used.PendingToolCalls > 0 {
		// The calls about to run are reserved in the same step as the
		// check (under u.mu): refused, they are not counted.
		if refused = overReserve(p, lim, *pu, int64(used.PendingToolCalls)); refused != nil {
			pu.ToolCalls -= int64(used.PendingToolCalls)
			dTools -= int64(used.PendingToolCalls)
			used.ToolCalls -= used.PendingToolCalls
		}
	}
	if used.Final {
		delete(u.last, t.TaskID)
		pu.Turns++
		if u.kv != nil {
			// The final report comes just before the turn's end is
			// committed: a store that queues writes (UsageKVQueue)
			// has this one ride with that commit. The runtime waits
			// (Saved) before it answers the turn.
			u.saveLocked(p, *pu)
		}
	} else {
		u.last[t.TaskID] = used
	}
	cur := *pu
	u.mu.Unlock()

	if dTok != 0 || dTools != 0 {
		attrs := metric.WithAttributes(attribute.String("principal", p))
		u.tokens.Add(ctx, dTok, attrs)
		u.toolCalls.Add(ctx, dTools, attrs)
	}
	if used.Final || !limited {
		return nil
	}
	if used.PendingToolCalls > 0 || used.PendingTokens > 0 {
		return refused
	}
	return overLimit(p, lim, cur)
}

// holdLocked records n tokens reserved for model call call of task.
// u.mu is held.
func (u *Usage) holdLocked(task, call string, n int64) {
	calls := u.held[task]
	if calls == nil {
		calls = map[string]int64{}
		u.held[task] = calls
	}
	calls[call] = n
}

// settleLocked drops the reservation of model call call of task (every
// call's when all) and returns the tokens it held. u.mu is held.
func (u *Usage) settleLocked(task, call string, all bool) int64 {
	calls := u.held[task]
	if calls == nil {
		return 0
	}
	var n int64
	if all {
		for _, h := range calls {
			n += h
		}
		delete(u.held, task)
		return n
	}
	n = calls[call]
	delete(calls, call)
	if len(calls) == 0 {
		delete(u.held, task)
	}
	return n
}

// heldIDs names the reservations on shared counters that settle with a
// report of call of task (every call's when all): the hold's id on the
// store is the task's id, then the call's name. u.mu is held.
func (u *Usage) heldIDsLocked(task, call string, all bool) []string {
	calls := u.held[task]
	var ids []string
	for c := range calls {
		if all || c == call {
			ids = append(ids, holdID(task, c))
		}
	}
	u.settleLocked(task, call, all)
	return ids
}

func holdID(task, call string) string {
	if call == "" {
		return task
	}
	return task + " " + call
}

// saveLocked has the totals snapshot of p written to kv in the background
// (the newest snapshot wins: an older one is never written after it).
// u.mu is held.
//
// With a store that queues writes to ride with its next batch
// (UsageKVQueue), the write of a saver that was idle is queued here, in
// the caller's step: the turn's final report comes before its end is
// committed, so the turn's totals ride with its commit and cost no sync
// of their own.
func (u *Usage) saveLocked(p string, snapshot PrincipalUsage) {
	s := u.savers[p]
	if s == nil {
		s = &usageSaver{wake: make(chan struct{})}
		u.savers[p] = s
	}
	u.seq++
	snapshot.ReservedTokens = 0 // held by calls of this process only
	s.latest, s.seq = snapshot, u.seq
	if s.running {
		return
	}
	s.running = true
	q, queues := u.kv.(UsageKVQueue)
	// write writes snap (seq) and waits until it is durable.
	write := func(snap PrincipalUsage) func() error {
		b, _ := json.Marshal(snap)
		if queues {
			return q.KVSetQueued(usageNamespace, p, b)
		}
		return func() error { return u.kv.KVSet(context.Background(), usageNamespace, p, b) }
	}
	wait, seq := write(s.latest), s.seq
	go func() {
		for {
			if err := wait(); err != nil {
				u.log.LogAttrs(context.Background(), slog.LevelWarn, "usage record not saved", slog.String("principal", p),
					slog.String("error", err.Error()))
			}
			u.mu.Lock()
			s.saved = seq
			close(s.wake)
			s.wake = make(chan struct{})
			if s.saved >= s.seq {
				s.running = false
				u.mu.Unlock()
				return
			}
			wait, seq = write(s.latest), s.seq
			u.mu.Unlock()
		}
	}()
}

// Saved waits until the totals of principal p counted so far are written
// (or ctx ends).
func (u *Usage) Saved(ctx context.Context, p string) {
	if u == nil {
		return
	}
	if p == "" {
		p = defaultPrincipal
	}
	u.mu.Lock()
	s := u.savers[p]
	if s == nil {
		u.mu.Unlock()
		return
	}
	want := s.seq
	for s.saved < want {
		w := s.wake
		u.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return
		}
		u.mu.Lock()
	}
	u.mu.Unlock()
}

// limitOf returns the limit of principal p, if any.
func (u *Usage) limitOf(p string) (UsageLimit, bool) {
	lim, limited := u.limits[p]
	if !limited {
		lim, limited = u.limits["*"]
	}
	return lim, limited
}

// sharedBudget is Budget on shared counters: what the turn used since its
// last report is added to the service-wide totals, and the totals are
// checked.
func (u *Usage) sharedBudget(ctx context.Context, t *loop.Turn, p string, used loop.TurnUsage) error {
	lim, limited := u.limitOf(p)
	// The calls about to run are reserved apart, checked against the
	// limit on the server in the same step (UsageCounters.ReserveCounter).
	reserve := int64(0)
	if limited && !used.Final && used.PendingToolCalls > 0 && lim.ToolCalls > 0 {
		reserve = int64(used.PendingToolCalls)
	}
	u.mu.Lock()
	prev := u.last[t.TaskID]
	settling := u.heldIDsLocked(t.TaskID, used.Call, used.Final)
	if used.Final {
		delete(u.last, t.TaskID)
	} else {
		held := used
		held.ToolCalls -= int(reserve) // counted once the reservation is taken
		u.last[t.TaskID] = held
	}
	u.mu.Unlock()
	d := map[string]int64{
		cntPrompt:     int64(used.PromptTokens - prev.PromptTokens),
		cntCompletion: int64(used.CompletionTokens - prev.CompletionTokens),
		cntTotal:      int64(used.TotalTokens - prev.TotalTokens),
		cntToolCalls:  int64(used.ToolCalls-prev.ToolCalls) - reserve,
	}
	if used.Final {
		d[cntTurns] = 1
	}
	u.count(ctx, p, d[cntTotal], d[cntToolCalls])
	var totals map[string]int64
	var err error
	switch {
	case len(settling) > 0:
		// The call a reservation was held for has ended: its hold goes
		// in the step that counts what it used.
		totals, err = u.shared.AddCountersSettling(context.WithoutCancel(ctx), usageNamespace, p, settling, d)
	case used.Final || d[cntPrompt] != 0 || d[cntCompletion] != 0 || d[cntTotal] != 0 || d[cntToolCalls] != 0:
		totals, err = u.shared.AddCounters(context.WithoutCancel(ctx), usageNamespace, p, d)
	case limited && reserve == 0:
		totals, err = u.shared.Counters(ctx, usageNamespace, p)
	}
	if err != nil {
		u.log.LogAttrs(ctx, slog.LevelWarn, "usage not counted", slog.String("principal", p),
			slog.String("error", err.Error()))
		return nil
	}
	if used.Final || !limited {
		return nil
	}
	if used.PendingTokens > 0 && lim.Tokens > 0 {
		if totals != nil {
			// Tool calls at their limit refuse the call before it holds.
			if err := overLimit(p, UsageLimit{ToolCalls: lim.ToolCalls}, usageOf(totals)); err != nil {
				return err
			}
		}
		cur, held, ok, err := u.shared.ReserveHeld(context.WithoutCancel(ctx), usageNamespace, p, holdID(t.TaskID, used.Call),
			cntTotal, int64(used.PendingTokens), lim.Tokens, u.reserveTTL())
		if err != nil {
			u.log.LogAttrs(ctx, slog.LevelWarn, "usage not counted", slog.String("principal", p),
				slog.String("error", err.Error()))
			return nil
		}
		if !ok {
			return overLimit(p, UsageLimit{Tokens: lim.Tokens}, PrincipalUsage{TotalTokens: cur, ReservedTokens: held})
		}
		u.mu.Lock()
		u.holdLocked(t.TaskID, used.Call, int64(used.PendingTokens))
		u.mu.Unlock()
		return nil
	}
	if reserve > 0 {
		if totals != nil {
			// Tokens at their limit refuse the round before it is reserved.
			if err := overLimit(p, UsageLimit{Tokens: lim.Tokens}, usageOf(totals)); err != nil {
				return err
			}
		}
		var ok bool
		totals, ok, err = u.shared.ReserveCounter(context.WithoutCancel(ctx), usageNamespace, p, cntToolCalls, reserve, lim.ToolCalls)
		if err != nil {
			u.log.LogAttrs(ctx, slog.LevelWarn, "usage not counted", slog.String("principal", p),
				slog.String("error", err.Error()))
			return nil
		}
		cur := usageOf(totals)
		if !ok {
			cur.ToolCalls += reserve
			return overReserve(p, lim, cur, reserve)
		}
		u.mu.Lock()
		if last, held := u.last[t.TaskID]; held {
			last.ToolCalls += int(reserve)
			u.last[t.TaskID] = last
		}
		u.mu.Unlock()
		u.count(ctx, p, 0, reserve)
		return overLimit(p, UsageLimit{Tokens: lim.Tokens}, cur)
	}
	return overLimit(p, lim, usageOf(totals))
}

func (u *Usage) reserveTTL() time.Duration {
	if u.ReserveTTL > 0 {
		return u.ReserveTTL
	}
	return 10 * time.Minute
}

// count records tokens and tool calls of p in the metrics.
func (u *Usage) count(ctx context.Context, p string, tokens, toolCalls int64) {
	if tokens != 0 || toolCalls != 0 {
		attrs := metric.WithAttributes(attribute.String("principal", p))
		u.tokens.Add(ctx, tokens, attrs)
		u.toolCalls.Add(ctx, toolCalls, attrs)
	}
}

// unreserve takes back n tool calls counted for p outside a turn.
func (u *Usage) unreserve(ctx context.Context, p string, n int64) {
	if _, err := u.shared.AddCounters(context.WithoutCancel(ctx), usageNamespace, p, map[string]int64{cntToolCalls: -n}); err != nil {
		u.log.LogAttrs(ctx, slog.LevelWarn, "refused tool calls not taken back from the usage", slog.String("principal", p),
			slog.String("error", err.Error()))
	}
}

// overReserve returns the error of a principal whose usage cur, counting
// the n tool calls it reserves, passes lim (or whose tokens reached it);
// the error counts cur without them.
func overReserve(p string, lim UsageLimit, cur PrincipalUsage, n int64) error {
	if lim.ToolCalls > 0 && cur.ToolCalls > lim.ToolCalls {
		cur.ToolCalls -= n
		if cur.ToolCalls >= lim.ToolCalls {
			return fmt.Errorf("principal %q has made %d tool calls, its limit is %d", p, cur.ToolCalls, lim.ToolCalls)
		}
		return fmt.Errorf("principal %q has made %d tool calls, its limit is %d: %d more would pass it", p, cur.ToolCalls, lim.ToolCalls, n)
	}
	cur.ToolCalls -= n
	return overLimit(p, lim, cur)
}

// overLimit returns the error of a principal whose usage cur reached lim.
func overLimit(p string, lim UsageLimit, cur PrincipalUsage) error {
	if lim.Tokens > 0 && cur.TotalTokens+cur.ReservedTokens >= lim.Tokens {
		if cur.ReservedTokens > 0 && cur.TotalTokens < lim.Tokens {
			return fmt.Errorf("principal %q has used %d tokens and its model calls running now hold %d more, its limit is %d",
				p, cur.TotalTokens, cur.ReservedTokens, lim.Tokens)
		}
		return fmt.Errorf("principal %q has used %d tokens, its limit is %d", p, cur.TotalTokens, lim.Tokens)
	}
	if lim.ToolCalls > 0 && cur.ToolCalls >= lim.ToolCalls {
		return fmt.Errorf("principal %q has made %d tool calls, its limit is %d", p, cur.ToolCalls, lim.ToolCalls)
	}
	return nil
}

// Hold reserves n tokens for a model call made for principal p outside a
// turn (an agent plugin called over MCP), under id, unique to the call:
// refused when p's tokens with what its calls running now hold reached
// its token limit (or its tool calls theirs); the check and the hold are
// one step (in memory under the lock, on shared counters by a script on
// the server), so calls made at once pass the limit together by at most
// one call's reservation. Settle ends the hold; on shared counters a hold
// its host never settled lapses after ReserveTTL.
func (u *Usage) Hold(ctx context.Context, p, id string, n int64) error {
	if u == nil {
		return nil
	}
	if p == "" {
		p = defaultPrincipal
	}
	lim, limited := u.limitOf(p)
	if !limited {
		return nil
	}
	if u.shared == nil {
		u.mu.Lock()
		defer u.mu.Unlock()
		pu := u.get(ctx, p)
		if err := overLimit(p, lim, *pu); err != nil {
			return err
		}
		if lim.Tokens > 0 && n > 0 {
			pu.ReservedTokens += n
			u.holdLocked(id, "", n)
		}
		return nil
	}
	if lim.ToolCalls > 0 {
		m, err := u.shared.Counters(ctx, usageNamespace, p)
		if err == nil {
			err = overLimit(p, UsageLimit{ToolCalls: lim.ToolCalls}, usageOf(m))
		}
		if err != nil {
			return err
		}
	}
	if lim.Tokens <= 0 || n <= 0 {
		return nil
	}
	cur, held, ok, err := u.shared.ReserveHeld(context.WithoutCancel(ctx), usageNamespace, p, id, cntTotal, n, lim.Tokens, u.reserveTTL())
	if err != nil {
		u.log.LogAttrs(ctx, slog.LevelWarn, "usage not counted", slog.String("principal", p),
			slog.String("error", err.Error()))
		return nil
	}
	if !ok {
		return overLimit(p, UsageLimit{Tokens: lim.Tokens}, PrincipalUsage{TotalTokens: cur, ReservedTokens: held})
	}
	u.mu.Lock()
	u.holdLocked(id, "", n)
	u.mu.Unlock()
	return nil
}

// Settle ends the hold id of principal p (Hold) and counts what its call
// used, in one step: nothing when the call failed.
func (u *Usage) Settle(ctx context.Context, p, id string, used loop.Usage) {
	if u == nil {
		return
	}
	if p == "" {
		p = defaultPrincipal
	}
	if u.shared == nil {
		// The hold goes and the usage comes in one step (under u.mu).
		u.mu.Lock()
		pu := u.get(ctx, p)
		pu.ReservedTokens -= u.settleLocked(id, "", true)
		pu.PromptTokens += int64(used.PromptTokens)
		pu.CompletionTokens += int64(used.CompletionTokens)
		pu.TotalTokens += int64(used.TotalTokens)
		if u.kv != nil && used != (loop.Usage{}) {
			u.saveLocked(p, *pu)
		}
		u.mu.Unlock()
		u.count(ctx, p, int64(used.TotalTokens), 0)
		return
	}
	u.mu.Lock()
	ids := u.heldIDsLocked(id, "", true)
	u.mu.Unlock()
	if len(ids) == 0 {
		u.Charge(ctx, p, used, 0)
		return
	}
	d := map[string]int64{cntPrompt: int64(used.PromptTokens), cntCompletion: int64(used.CompletionTokens),
		cntTotal: int64(used.TotalTokens)}
	if _, err := u.shared.AddCountersSettling(context.WithoutCancel(ctx), usageNamespace, p, ids, d); err != nil {
		u.log.LogAttrs(ctx, slog.LevelWarn, "usage not counted", slog.String("principal", p),
			slog.String("error", err.Error()))
	}
	u.count(ctx, p, d[cntTotal], 0)
}

// Allow returns the error of principal p when it reached its limit (nil:
// it may go on). It is asked before work done for p outside a turn (an
// MCP tool call, a model call of an agent plugin called over MCP).
func (u *Usage) Allow(ctx context.Context, p string) error {
	if u == nil {
		return nil
	}
	if p == "" {
		p = defaultPrincipal
	}
	lim, limited := u.limitOf(p)
	if !limited {
		return nil
	}
	return overLimit(p, lim, u.Usage(ctx, p))
}

// Reserve counts n tool calls for principal p, made outside a turn (MCP),
// unless they would pass its limit (or its tokens reached theirs): then it
// counts nothing and returns the error. The check and the count are one
// step (in memory under the lock; on shared counters an atomic addition
// taken back when past the limit), so calls made at once cannot pass the
// limit together.
func (u *Usage) Reserve(ctx context.Context, p string, n int64) error {
	if u == nil {
		return nil
	}
	if p == "" {
		p = defaultPrincipal
	}
	lim, limited := u.limitOf(p)
	if u.shared != nil {
		bound := int64(math.MaxInt64)
		if limited && lim.ToolCalls > 0 {
			bound = lim.ToolCalls
		}
		totals, ok, err := u.shared.ReserveCounter(context.WithoutCancel(ctx), usageNamespace, p, cntToolCalls, n, bound)
		if err != nil {
			u.log.LogAttrs(ctx, slog.LevelWarn, "usage not counted", slog.String("principal", p),
				slog.String("error", err.Error()))
			return nil
		}
		if !ok {
			cur := usageOf(totals)
			cur.ToolCalls += n
			return overReserve(p, lim, cur, n)
		}
		if limited {
			// Tokens at their limit refuse the call too; it was counted.
			if err := overLimit(p, UsageLimit{Tokens: lim.Tokens}, usageOf(totals)); err != nil {
				u.unreserve(ctx, p, n)
				return err
			}
		}
	} else {
		u.mu.Lock()
		pu := u.get(ctx, p)
		pu.ToolCalls += n
		if limited {
			if err := overReserve(p, lim, *pu, n); err != nil {
				pu.ToolCalls -= n
				u.mu.Unlock()
				return err
			}
		}
		if u.kv != nil {
			u.saveLocked(p, *pu)
		}
		u.mu.Unlock()
	}
	u.toolCalls.Add(ctx, n, metric.WithAttributes(attribute.String("principal", p)))
	return nil
}

// Charge counts, for principal p, tokens and tool calls used outside a
// turn (MCP): into the same totals, metrics and saved record as a turn's.
// It never refuses: Allow does, before the work.
func (u *Usage) Charge(ctx context.Context, p string, used loop.Usage, toolCalls int64) {
	if u == nil || (used == loop.Usage{} && toolCalls == 0) {
		return
	}
	if p == "" {
		p = defaultPrincipal
	}
	if u.shared != nil {
		d := map[string]int64{cntPrompt: int64(used.PromptTokens), cntCompletion: int64(used.CompletionTokens),
			cntTotal: int64(used.TotalTokens), cntToolCalls: toolCalls}
		if _, err := u.shared.AddCounters(context.WithoutCancel(ctx), usageNamespace, p, d); err != nil {
			u.log.LogAttrs(ctx, slog.LevelWarn, "usage not counted", slog.String("principal", p),
				slog.String("error", err.Error()))
		}
	} else {
		u.mu.Lock()
		pu := u.get(ctx, p)
		pu.PromptTokens += int64(used.PromptTokens)
		pu.CompletionTokens += int64(used.CompletionTokens)
		pu.TotalTokens += int64(used.TotalTokens)
		pu.ToolCalls += toolCalls
		if u.kv != nil {
			u.saveLocked(p, *pu)
		}
		u.mu.Unlock()
	}
	attrs := metric.WithAttributes(attribute.String("principal", p))
	u.tokens.Add(ctx, int64(used.TotalTokens), attrs)
	u.toolCalls.Add(ctx, toolCalls, attrs)
}
