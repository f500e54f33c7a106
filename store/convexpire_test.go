package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// conversation stores a conversation last active at last, with n messages
// and, when state is not "", a task in that state.
func conversation(t *testing.T, b *Badger, id string, last time.Time, n int, state loop.TaskStatus) {
	t.Helper()
	ctx := context.Background()
	if err := b.SaveAgent(ctx, loop.AgentMetadata{ContextID: id, CreatedAt: last.Add(-time.Minute), LastActivity: last}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]loop.Message, n)
	for i := range msgs {
		msgs[i] = loop.Message{Role: loop.RoleUser, Content: id + "-" + strconv.Itoa(i+1)}
	}
	if n > 0 {
		if err := b.Append(ctx, id, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	if state != "" {
		rec := loop.TaskRecord{ID: "task-" + id, ContextID: id, Status: state, CreatedAt: last, UpdatedAt: last}
		if err := b.SaveTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
}

// wantConversation checks that id is whole (its agent record and its n
// messages) or, with n < 0, gone for readers and without a key left.
func wantConversation(t *testing.T, b *Badger, id string, n int) {
	t.Helper()
	ctx := context.Background()
	_, aerr := b.LoadAgent(ctx, id)
	msgs, err := b.Recent(ctx, id, 0)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if n < 0 {
		if !errors.Is(aerr, loop.ErrNotFound) || len(msgs) != 0 {
			t.Fatalf("%s: agent %v, %d messages: want it gone", id, aerr, len(msgs))
		}
		for _, p := range []string{pfxMsg + id + "/", pfxMsgHead + id, pfxAgent + id, pfxConvSweep + id} {
			if k := rawKeys(t, b, p); k != 0 {
				t.Fatalf("%s: %d keys %s* left", id, k, p)
			}
		}
		return
	}
	if aerr != nil || len(msgs) != n {
		t.Fatalf("%s: agent %v, %d messages: want it whole with %d", id, aerr, len(msgs), n)
	}
	for i, m := range msgs {
		if want := id + "-" + strconv.Itoa(i+1); m.Content != want {
			t.Fatalf("%s: message %d is %q, want %q", id, i+1, m.Content, want)
		}
	}
}

func TestExpireConversationsDeletesIdleOnly(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	conversation(t, b, "idle", old, 3, "")
	conversation(t, b, "finished", old, 2, loop.TaskCompleted)
	conversation(t, b, "paused", old, 2, loop.TaskWaitingInput)
	conversation(t, b, "auth", old, 2, loop.TaskWaitingAuth)
	conversation(t, b, "working", old, 2, loop.TaskWorking)
	conversation(t, b, "recent", now, 2, "")
	sweepChunk = 2 // the idle histories take several writes
	t.Cleanup(func() { sweepChunk = 1024 })
	gone, err := b.ExpireConversations(context.Background(), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(gone)
	if !slices.Equal(gone, []string{"finished", "idle"}) {
		t.Fatalf("deleted %v, want [finished idle]", gone)
	}
	wantConversation(t, b, "idle", -1)
	wantConversation(t, b, "finished", -1)
	for _, id := range []string{"paused", "auth", "working", "recent"} {
		wantConversation(t, b, id, 2)
	}
	if k := rawKeys(t, b, pfxConvSweep); k != 0 {
		t.Fatalf("%d index entries left", k)
	}
	// Nothing idle is left: a second sweep deletes nothing.
	if gone, err := b.ExpireConversations(context.Background(), now.Add(-time.Hour)); err != nil || len(gone) != 0 {
		t.Fatalf("second sweep: %v, %v", gone, err)
	}
}

// A message for a conversation whose messages are being deleted starts it
// again after the old seqs: none of the old ones comes back, the new one
// survives the rest of the sweep.
func TestExpiredConversationStartedAgain(t *testing.T) {
	b := openSweepless(t, t.TempDir(), nil)
	ctx := context.Background()
	conversation(t, b, "c", time.Now().Add(-2*time.Hour), 5, "")
	sweepChunk = 2
	t.Cleanup(func() { sweepChunk = 1024; convWrote = nil })
	convWrote = func() {
		// Between the first step and the deletion of the messages.
		if err := b.Append(ctx, "c", loop.Message{Role: loop.RoleUser, Content: "again"}); err != nil {
			t.Error(err)
		}
	}
	if _, err := b.ExpireConversations(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.Recent(ctx, "c", 0)
	if err != nil || len(msgs) != 1 || msgs[0].Content != "again" {
		t.Fatalf("history after the sweep: %v, %v; want [again]", msgs, err)
	}
	if k := rawKeys(t, b, pfxMsg+"c/"); k != 1 {
		t.Fatalf("%d message keys, want 1", k)
	}
	if k := rawKeys(t, b, pfxConvSweep); k != 0 {
		t.Fatalf("%d index entries left", k)
	}
}

const convCrashEnv = "LOOOPY_STORE_CONV_CRASH"

// A kill -9 in the middle of the deletion of a conversation's messages
// leaves it gone for readers; the next sweep (after a restart) deletes the
// rest, and a message that came meanwhile stays.
func TestExpireConversationsKilledMidway(t *testing.T) {
	if dir := os.Getenv(convCrashEnv); dir != "" {
		expireConversationsAndDie(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestExpireConversationsKilledMidway$", "-test.count=1")
	cmd.Env = append(os.Environ(), convCrashEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was to die of SIGKILL mid-sweep: %v\n%s", err, out)
	}
	b := openSweepless(t, dir, nil)
	ctx := context.Background()
	left := rawKeys(t, b, pfxMsg+"long/")
	if left == 0 || left >= 1000 {
		t.Fatalf("%d of 1000 messages left after the kill: the kill did not fall mid-sweep", left)
	}
	if _, err := b.LoadAgent(ctx, "long"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("agent of the half-deleted conversation: %v, want not found", err)
	}
	if n, err := b.Count(ctx, "long"); err != nil || n != 0 {
		t.Fatalf("half-deleted conversation holds %d messages (%v), want 0", n, err)
	}
	if k := rawKeys(t, b, pfxConvSweep); k != 1 {
		t.Fatalf("%d index entries after the kill, want 1", k)
	}
	if err := b.Append(ctx, "long", loop.Message{Role: loop.RoleUser, Content: "again"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ExpireConversations(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.Recent(ctx, "long", 0)
	if err != nil || len(msgs) != 1 || msgs[0].Content != "again" {
		t.Fatalf("history after the sweep resumed: %v, %v; want [again]", msgs, err)
	}
	if k := rawKeys(t, b, pfxMsg+"long/"); k != 1 {
		t.Fatalf("%d message keys after the sweep resumed, want 1", k)
	}
	if k := rawKeys(t, b, pfxConvSweep); k != 0 {
		t.Fatalf("%d index entries after the sweep, want 0", k)
	}
	wantConversation(t, b, "kept", 2)
}

// expireConversationsAndDie is the child of
// TestExpireConversationsKilledMidway: an idle conversation of 1000
// messages, its deletion in writes of 100 keys, SIGKILL after the second.
func expireConversationsAndDie(dir string) {
	b, err := Open(Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	old := time.Now().Add(-2 * time.Hour)
	if err := b.SaveAgent(ctx, loop.AgentMetadata{ContextID: "long", CreatedAt: old, LastActivity: old}); err != nil {
		panic(err)
	}
	msgs := make([]loop.Message, 1000)
	for i := range msgs {
		msgs[i] = loop.Message{Role: loop.RoleUser, Content: "long-" + strconv.Itoa(i+1)}
	}
	if err := b.Append(ctx, "long", msgs...); err != nil {
		panic(err)
	}
	if err := b.SaveAgent(ctx, loop.AgentMetadata{ContextID: "kept", CreatedAt: time.Now(), LastActivity: time.Now()}); err != nil {
		panic(err)
	}
	if err := b.Append(ctx, "kept", loop.Message{Role: loop.RoleUser, Content: "kept-1"}, loop.Message{Role: loop.RoleUser, Content: "kept-2"}); err != nil {
		panic(err)
	}
	sweepChunk = 100
	writes := 0
	sweepWrote = func() {
		if writes++; writes == 2 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	_, _ = b.ExpireConversations(ctx, time.Now().Add(-time.Hour))
	panic("the sweep finished without being killed")
}

// The in-memory store expires idle conversations as Badger does.
func TestMemoryExpireConversations(t *testing.T) {
	m := NewMemory(MemoryOptions{SweepInterval: -1})
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	save := func(id string, last time.Time, state loop.TaskStatus) {
		if err := m.SaveAgent(ctx, loop.AgentMetadata{ContextID: id, CreatedAt: last, LastActivity: last}); err != nil {
			t.Fatal(err)
		}
		if err := m.Append(ctx, id, loop.Message{Role: loop.RoleUser, Content: id}); err != nil {
			t.Fatal(err)
		}
		if state != "" {
			if err := m.SaveTask(ctx, loop.TaskRecord{ID: "task-" + id, ContextID: id, Status: state, CreatedAt: last, UpdatedAt: last}); err != nil {
				t.Fatal(err)
			}
		}
	}
	save("idle", old, loop.TaskCompleted)
	save("paused", old, loop.TaskWaitingInput)
	save("recent", now, "")
	gone, err := m.ExpireConversations(ctx, now.Add(-time.Hour))
	if err != nil || !slices.Equal(gone, []string{"idle"}) {
		t.Fatalf("deleted %v (%v), want [idle]", gone, err)
	}
	if _, err := m.LoadAgent(ctx, "idle"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("agent of the deleted conversation: %v", err)
	}
	if n, _ := m.Count(ctx, "idle"); n != 0 {
		t.Fatalf("deleted conversation holds %d messages", n)
	}
	for _, id := range []string{"paused", "recent"} {
		if _, err := m.LoadAgent(ctx, id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if n, _ := m.Count(ctx, id); n != 1 {
			t.Fatalf("%s holds %d messages, want 1", id, n)
		}
	}
}
