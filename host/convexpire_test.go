package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// sendIn sends text in the conversation contextID and returns the task.
func sendIn(t *testing.T, h *testHost, contextID, text string) *a2a.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := userMsg(text)
	m.ContextID = contextID
	return send(t, client10(t, h.URL(), ""), ctx, &a2a.SendMessageRequest{Message: m})
}

// wantKept checks, in the closed host's store, that the conversation is
// whole: its agent record and at least n messages; n < 0: that it is gone.
func wantKept(t *testing.T, st *store.Badger, contextID string, n int) {
	t.Helper()
	ctx := context.Background()
	_, aerr := st.LoadAgent(ctx, contextID)
	got, err := st.Count(ctx, contextID)
	if err != nil {
		t.Fatal(err)
	}
	if n < 0 {
		if !errors.Is(aerr, loop.ErrNotFound) || got != 0 {
			t.Fatalf("%s: agent %v and %d messages, want it gone", contextID, aerr, got)
		}
		return
	}
	if aerr != nil || got < n {
		t.Fatalf("%s: agent %v and %d messages, want it kept with %d or more", contextID, aerr, got, n)
	}
}

func openClosedHostStore(t *testing.T, h *testHost) *store.Badger {
	t.Helper()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Dir: h.dir, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// limits.conversationTTL: the host's cleanup deletes a conversation idle
// for longer, its history and agent record, and keeps one paused on a
// request (input-required) however long it waits; the count shows in
// looopy_conversations_expired_total.
func TestIdleConversationSweptPausedKept(t *testing.T) {
	t.Parallel()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_*"}}})
	cfg := ah.cfg
	cfg.Limits.TaskTTL = host.Duration(time.Second)
	cfg.Limits.ConversationTTL = host.Retention(time.Second)
	h := startHost(t, cfg)
	pausedForApproval(t, sendIn(t, h, "conv-paused", "ledger pay 5"))
	if task := sendIn(t, h, "conv-idle", "hello"); task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("idle conversation's task: %s", task.Status.State)
	}
	deadline := time.Now().Add(90 * time.Second)
	for scrape(t, h.URL()+"/metrics")["looopy_conversations_expired_total"] < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no conversation expired within 90s at limits.conversationTTL 1s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	st := openClosedHostStore(t, h)
	wantKept(t, st, "conv-idle", -1)
	wantKept(t, st, "conv-paused", 1)
}

// A conversation active again before its TTL ran out is kept, one idle
// since before is deleted, one paused is kept; a new message to the
// deleted one starts a conversation without its old history.
func TestConversationActiveAgainKept(t *testing.T) {
	t.Parallel()
	ah := newApprovalHost(t, host.InteractionConfig{Approval: host.ApprovalConfig{Tools: []string{"ledger_*"}}})
	cfg := ah.cfg
	cfg.Limits.TaskTTL = host.Duration(time.Hour)
	cfg.Limits.ConversationTTL = host.Retention(time.Hour) // the cleanup's own runs delete nothing here
	h := startHost(t, cfg)
	pausedForApproval(t, sendIn(t, h, "conv-paused", "ledger pay 5"))
	for _, id := range []string{"conv-idle", "conv-again"} {
		if task := sendIn(t, h, id, "hello"); task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("%s: %s", id, task.Status.State)
		}
	}
	mark := time.Now()
	if task := sendIn(t, h, "conv-again", "hello again"); task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("conv-again: %s", task.Status.State)
	}
	// An hour after mark: conv-idle and conv-paused were idle for longer
	// than the TTL, conv-again was not.
	n, err := host.ExpireConversationsAt(h.Server(), mark.Add(time.Hour))
	if err != nil || n != 1 {

		t.Fatalf("expired %d conversations (%v), want 1", n, err)
	}
	if v := scrape(t, h.URL()+"/metrics")["looopy_conversations_expired_total"]; v != 1 {
		t.Fatalf("looopy_conversations_expired_total = %v, want 1", v)
	}
	// The deleted conversation starts again, empty.
	if task := sendIn(t, h, "conv-idle", "hello"); task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("conv-idle again: %s", task.Status.State)
	}
	st := openClosedHostStore(t, h)
	wantKept(t, st, "conv-again", 4)
	wantKept(t, st, "conv-paused", 1)
	if got, err := st.Count(context.Background(), "conv-idle"); err != nil || got != 2 {
		t.Fatalf("conv-idle started again holds %d messages (%v), want the new turn's 2", got, err)
	}
}

// limits.conversationTTL: 30 days by default, never below limits.taskTTL,
// "never" keeps conversations for ever; a TTL set below the task TTL is
// refused.
func TestConversationTTLConfig(t *testing.T) {
	ttl := func(body string) time.Duration {
		t.Helper()
		c, err := host.ParseConfig([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return time.Duration(host.ConfigWithDefaults(c).Limits.ConversationTTL)
	}
	if got := ttl(`{}`); got != 30*24*time.Hour {
		t.Errorf("default %v, want 720h", got)
	}
	if got := ttl(`{"limits":{"taskTTL":"1000h"}}`); got != 1000*time.Hour {
		t.Errorf("default with taskTTL 1000h: %v, want 1000h", got)
	}
	if got := ttl(`{"limits":{"conversationTTL":"1h"}}`); got != 7*24*time.Hour {
		t.Errorf("1h with the default taskTTL: %v, want the task TTL, 168h", got)
	}
	if got := ttl(`{"limits":{"conversationTTL":"never"}}`); got >= 0 {
		t.Errorf("never: %v, want negative", got)
	}
	for body, want := range map[string]string{
		`{"limits":{"conversationTTL":"1h","taskTTL":"2h"}}`: "shorter than limits.taskTTL",
		`{"limits":{"conversationTTL":"soon"}}`:              "never",
		`{"limits":{"conversationTTL":30}}`:                  "unit",
	} {
		if _, err := host.ParseConfig([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", body, err, want)
		}
	}
}

// "never": the cleanup deletes no conversation, however old.
func TestConversationTTLNeverKeeps(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Limits.ConversationTTL = host.Retention(-1)
	h := startHost(t, cfg)
	if task := sendIn(t, h, "conv-kept", "hello"); task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("conv-kept: %s", task.Status.State)
	}
	if n, err := host.ExpireConversationsAt(h.Server(), time.Now().Add(100*365*24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("expired %d (%v), want none", n, err)
	}
	wantKept(t, openClosedHostStore(t, h), "conv-kept", 2)
}
