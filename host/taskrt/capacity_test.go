package taskrt

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// The host runs at most MaxRunning turns at once, all principals together:
// past it a new turn of anyone is refused with ErrHostBusy before anything
// of it is stored, and admitted again once a turn ends.
func TestHostWideBound(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, func(c *Config) { c.MaxRunning = 3; c.MaxRunningPerPrincipal = 2 })
	ctx := context.Background()
	for i, p := range []string{"alice", "alice", "bob"} {
		if _, err := h.rt.Start(ctx, StartRequest{Auth: &loop.AuthContext{Principal: p}, Message: user(fmt.Sprint(i))}); err != nil {
			t.Fatalf("turn %d of %s: %v", i, p, err)
		}
	}
	_, err := h.rt.Start(ctx, StartRequest{Auth: &loop.AuthContext{Principal: "carol"}, ContextID: "carol-1", Message: user("c")})
	if !errors.Is(err, ErrHostBusy) {
		t.Fatalf("a fourth turn with the host at its bound of 3: err = %v, want ErrHostBusy", err)
	}
	if left, err := h.db.ListTasks(ctx, loop.TaskFilter{Owner: "carol"}); err != nil || len(left) != 0 {
		t.Fatalf("the refused turn left a task behind: %+v (%v)", left, err)
	}
	// alice at her own bound gets her own refusal, the host's not yet
	// mattering for the answer's reason.
	if _, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("x")}); !errors.Is(err, ErrHostBusy) && !errors.Is(err, ErrQuota) {
		t.Fatalf("alice's third turn: err = %v, want a refusal", err)
	}
	close(m.gate)
	waitFor(t, "the turns end", func() bool { n, _ := h.rt.Stats(); return n == 0 })
	st, err := h.rt.Start(ctx, StartRequest{Auth: &loop.AuthContext{Principal: "carol"}, ContextID: "carol-1", Message: user("c")})
	if err != nil {
		t.Fatalf("carol refused once the host's turns ended: %v", err)
	}
	_ = h.rt.Wait(ctx, st.Run)
}

// Tasks a crash left working were acknowledged: they are resumed at the
// next start however many there are, past MaxRunning and
// MaxRunningPerPrincipal, and they count: a new turn meanwhile is refused.
func TestRecoverResumesPastTheBounds(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, func(c *Config) { c.MaxRunning = 1; c.MaxRunningPerPrincipal = 1 })
	ctx := context.Background()
	now := time.Now().UTC()
	const n = 4
	for i := range n {
		rec := loop.TaskRecord{ID: fmt.Sprintf("t%d", i), ContextID: fmt.Sprintf("c%d", i), Owner: "alice",
			Status: loop.TaskWorking, History: []loop.Message{user("go")}, TurnInput: 1, CreatedAt: now, UpdatedAt: now}
		if err := h.db.SaveTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.rt.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if running, _ := h.rt.Stats(); running != n {
		t.Fatalf("%d of the %d tasks left working are running after recovery", running, n)
	}
	if _, err := h.rt.Start(ctx, StartRequest{Auth: &loop.AuthContext{Principal: "bob"}, Message: user("b")}); !errors.Is(err, ErrHostBusy) {
		t.Fatalf("a new turn while %d resumed tasks run with a bound of 1: err = %v, want ErrHostBusy", n, err)
	}
	close(m.gate)
	for i := range n {
		id := fmt.Sprintf("t%d", i)
		for deadline := time.Now().Add(guard); ; time.Sleep(time.Millisecond) {
			rec, _ := h.db.LoadTask(ctx, id)
			if rec.Status == loop.TaskCompleted {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("resumed task %s never completed: %s", id, rec.Status)
			}
		}
	}
}

// A continuation refused by a turn bound after its answers were accepted
// (OnAnswered kept the credential they carried) leaves nothing of them in
// memory: the credential goes at once, not when the task ends, and the
// task still waits for it. Admitted later, the same answer is kept.
func TestRefusedContinuationDropsItsCredential(t *testing.T) {
	t.Parallel()
	m := &scriptModel{gate: make(chan struct{})}
	h := newHarness(t, t.TempDir(), m, func(c *Config) { c.MaxRunningPerPrincipal = 1 })
	ctx := context.Background()
	now := time.Now().UTC()
	call := loop.ToolCall{ID: "c1", Name: "profile_read", Arguments: []byte(`{}`)}
	paused := loop.TaskRecord{ID: "paused", ContextID: "ctx-paused", Owner: "alice", Status: loop.TaskWaitingAuth,
		History: []loop.Message{user("profile")}, CreatedAt: now, UpdatedAt: now,
		Requests: []loop.InputRequest{{InputID: "auth:c1", InputType: loop.InputAuth, RequireUser: true, Call: &call,
			Auth: &loop.AuthNeed{Provider: "example-oauth", Holder: "tool:profile_read"}}}}
	if err := h.db.SaveTask(ctx, paused); err != nil {
		t.Fatal(err)
	}
	// alice's one turn runs (the model waits): her bound is reached.
	busy, err := h.rt.Start(ctx, StartRequest{Auth: alice(), Message: user("hold")})
	if err != nil {
		t.Fatal(err)
	}
	creds := loop.NewCredentials()
	keep := func(rec loop.TaskRecord) func() {
		creds.Put(rec.ID, "tool:profile_read", "example-oauth", "secret-token", time.Hour)
		return func() { creds.Drop(rec.ID, "tool:profile_read", "example-oauth") }
	}
	answer := StartRequest{Auth: alice(), TaskID: "paused", Answers: []loop.InputAnswer{{InputID: "auth:c1"}}, OnAnswered: keep}
	if _, err := h.rt.Start(ctx, answer); !errors.Is(err, ErrQuota) {
		t.Fatalf("the continuation past alice's bound: err = %v, want ErrQuota", err)
	}
	if n := creds.Len(); n != 0 {
		t.Fatalf("the refused continuation left %d credential(s) in memory", n)
	}
	if rec, err := h.db.LoadTask(ctx, "paused"); err != nil || rec.Status != loop.TaskWaitingAuth {
		t.Fatalf("after the refusal the task is %s (%v), want still waiting for its credential", rec.Status, err)
	}
	close(m.gate)
	_ = h.rt.Wait(ctx, busy.Run)
	waitFor(t, "alice's turn ends", func() bool { n, _ := h.rt.Stats(); return n == 0 })
	st, err := h.rt.Start(ctx, answer)
	if err != nil {
		t.Fatalf("the continuation once alice's turn ended: %v", err)
	}
	if _, ok := creds.Get("paused", "tool:profile_read", "example-oauth"); !ok {
		t.Fatal("the admitted continuation's credential was not kept")
	}
	_ = h.rt.Wait(ctx, st.Run)
}
