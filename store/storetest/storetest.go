// Package storetest is the conformance suite of loop's store interfaces:
// every implementation (store.Memory, store.Badger on disk and in memory,
// and any later one) runs Run from its own tests and must pass all of it.
//
// storetest imports loop and the standard library only.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// KV is the per-namespace key-value space (store.KV).
type KV interface {
	KVGet(ctx context.Context, namespace, key string) ([]byte, error)
	KVSet(ctx context.Context, namespace, key string, value []byte) error
	KVDelete(ctx context.Context, namespace, key string) error
}

// Stores is one implementation under test, for Run. Every field is
// required except Reopen.
type Stores struct {
	Messages loop.MessageStore
	Agents   loop.AgentStore
	Tasks    loop.TaskStore
	Events   loop.EventLog
	KV       KV
	// Reopen closes the stores and opens them again on the same data, as
	// a restart of the process would. Nil for stores that keep nothing.
	Reopen func(t *testing.T) Stores
	// Damage overwrites the stored record of task id with bytes that do
	// not decode, as a damaged disk would leave it. Nil for stores that
	// keep records as Go values (nothing is decoded, so nothing can be
	// damaged): the broken-record test says so and is skipped for them.
	Damage func(t *testing.T, id string)
	// Sweep runs the store's deletion of expired event streams now, for
	// stores that delete them in a sweep of their own (nil: none).
	Sweep func(t *testing.T)
}

type namedTest struct {
	name string
	fn   func(t *testing.T, s Stores)
}

// run runs each test on fresh stores from open.
func run(t *testing.T, open func(t *testing.T) Stores, tests []namedTest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

// RunMessages runs the suite of loop.MessageStore. open returns a fresh,
// empty store for one test (and registers its cleanup with t.Cleanup).
func RunMessages(t *testing.T, open func(t *testing.T) loop.MessageStore) {
	run(t, func(t *testing.T) Stores { return Stores{Messages: open(t)} }, []namedTest{
		{"AppendRecentCount", testAppendRecent},
		{"RoundTrip", testMessageRoundTrip},
		{"Copies", testMessageCopies},
		{"Replace", testReplace},
		{"Delete", testDelete},
		{"Isolation", testMessageIsolation},
		{"BadInput", testMessageBadInput},
		{"ConcurrentAppend", testConcurrentAppend},
		{"ConcurrentReplace", testConcurrentReplace},
	})
}

// RunAgents runs the suite of loop.AgentStore.
func RunAgents(t *testing.T, open func(t *testing.T) loop.AgentStore) {
	run(t, func(t *testing.T) Stores { return Stores{Agents: open(t)} }, []namedTest{
		{"SaveLoadDelete", testAgents},
	})
}

// RunTasks runs the suite of loop.TaskStore, versioned writes included.
func RunTasks(t *testing.T, open func(t *testing.T) loop.TaskStore) {
	run(t, func(t *testing.T) Stores { return Stores{Tasks: open(t)} }, []namedTest{
		{"RoundTrip", testTaskRoundTrip},
		{"Overwrite", testTaskOverwrite},
		{"Filters", testTaskFilters},
		{"Pagination", testTaskPagination},
		{"TTL", testTaskTTL},
		{"BadInput", testTaskBadInput},
		{"Versions", testTaskVersions},
		{"VersionRace", testTaskVersionRace},
		{"Owner", testTaskOwner},
	})
}

// RunEvents runs the suite of loop.EventLog, waiting reads included.
func RunEvents(t *testing.T, open func(t *testing.T) loop.EventLog) {
	run(t, func(t *testing.T) Stores { return Stores{Events: open(t)} }, []namedTest{
		{"AppendRead", testEvents},
		{"Expire", testEventExpire},
		{"Concurrent", testEventsConcurrent},
		{"Wait", testEventWait},
		{"WaitCanceled", testEventWaitCanceled},
		{"WaitManyReaders", testEventWaitMany},
	})
}

// RunKV runs the suite of the key-value space.
func RunKV(t *testing.T, open func(t *testing.T) KV) {
	run(t, func(t *testing.T) Stores { return Stores{KV: open(t)} }, []namedTest{
		{"GetSetDelete", testKV},
	})
}

// Run runs every suite of Stores (each on fresh stores from open), and the
// tests that span several stores: a canceled context and a restart.
func Run(t *testing.T, open func(t *testing.T) Stores) {
	t.Run("Messages", func(t *testing.T) {
		RunMessages(t, func(t *testing.T) loop.MessageStore { return open(t).Messages })
	})
	t.Run("Agents", func(t *testing.T) {
		RunAgents(t, func(t *testing.T) loop.AgentStore { return open(t).Agents })
	})
	t.Run("Tasks", func(t *testing.T) {
		RunTasks(t, func(t *testing.T) loop.TaskStore { return open(t).Tasks })
	})
	t.Run("Events", func(t *testing.T) {
		RunEvents(t, func(t *testing.T) loop.EventLog { return open(t).Events })
	})
	t.Run("KV", func(t *testing.T) {
		RunKV(t, func(t *testing.T) KV { return open(t).KV })
	})
	run(t, func(t *testing.T) Stores {
		s := open(t)
		if s.Messages == nil || s.Agents == nil || s.Tasks == nil || s.Events == nil || s.KV == nil {
			t.Fatal("storetest: open returned Stores with a nil field")
		}
		return s
	}, []namedTest{
		{"Canceled", testCanceled},
		{"Reopen", testReopen},
		{"BrokenTask", testBrokenTask},
	})
}

func msg(role loop.Role, content string) loop.Message {
	return loop.Message{Role: role, Content: content}
}

func contents(ms []loop.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Content
	}
	return out
}

func mustAppend(t *testing.T, s loop.MessageStore, id string, ms ...loop.Message) {
	t.Helper()
	if err := s.Append(context.Background(), id, ms...); err != nil {
		t.Fatalf("Append(%q): %v", id, err)
	}
}

func wantContents(t *testing.T, s loop.MessageStore, id string, limit int, want ...string) {
	t.Helper()
	got, err := s.Recent(context.Background(), id, limit)
	if err != nil {
		t.Fatalf("Recent(%q, %d): %v", id, limit, err)
	}
	if got == nil {
		t.Fatalf("Recent(%q, %d) = nil slice, want an empty one", id, limit)
	}
	if g := contents(got); !slices.Equal(g, want) {
		t.Fatalf("Recent(%q, %d) = %q, want %q", id, limit, g, want)
	}
}

func wantCount(t *testing.T, s loop.MessageStore, id string, want int) {
	t.Helper()
	n, err := s.Count(context.Background(), id)
	if err != nil {
		t.Fatalf("Count(%q): %v", id, err)
	}
	if n != want {
		t.Fatalf("Count(%q) = %d, want %d", id, n, want)
	}
}

func testAppendRecent(t *testing.T, s Stores) {
	m := s.Messages
	wantContents(t, m, "c1", 0)
	wantCount(t, m, "c1", 0)
	mustAppend(t, m, "c1", msg(loop.RoleUser, "1"))
	mustAppend(t, m, "c1", msg(loop.RoleAssistant, "2"))
	mustAppend(t, m, "c1", msg(loop.RoleUser, "3"), msg(loop.RoleAssistant, "4"), msg(loop.RoleUser, "5"))
	if err := m.Append(context.Background(), "c1"); err != nil {
		t.Fatalf("Append with no messages: %v", err)
	}
	wantCount(t, m, "c1", 5)
	wantContents(t, m, "c1", 0, "1", "2", "3", "4", "5")
	wantContents(t, m, "c1", -1, "1", "2", "3", "4", "5")
	wantContents(t, m, "c1", 2, "4", "5")
	wantContents(t, m, "c1", 1, "5")
	wantContents(t, m, "c1", 5, "1", "2", "3", "4", "5")
	wantContents(t, m, "c1", 50, "1", "2", "3", "4", "5")
}

func testMessageRoundTrip(t *testing.T, s Stores) {
	in := []loop.Message{
		{Role: loop.RoleSystem, Content: "be brief", Pinned: true},
		{Role: loop.RoleUser, Content: "héllo\n\"quoted\" \x00 ✓", Metadata: map[string]any{"lang": "fr", "n": 2.5, "tags": []any{"a", "b"}, "nested": map[string]any{"k": true}}},
		{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{
			{ID: "call_1", Name: "search", Arguments: json.RawMessage(`{"q":"go","n":3}`)},
			{ID: "call_2", Name: "noargs"},
		}},
		{Role: loop.RoleTool, Name: "search", ToolCallID: "call_1", Content: `{"hits":[]}`},
	}
	mustAppend(t, s.Messages, "rt", in...)
	got, err := s.Messages.Recent(context.Background(), "rt", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("messages changed in the store:\n got %#v\nwant %#v", got, in)
	}
}

func testMessageCopies(t *testing.T, s Stores) {
	in := []loop.Message{{Role: loop.RoleAssistant, Content: "x",
		ToolCalls: []loop.ToolCall{{ID: "1", Name: "t", Arguments: json.RawMessage(`{"a":1}`)}},
		Metadata:  map[string]any{"k": "v"}}}
	mustAppend(t, s.Messages, "cp", in...)
	in[0].Content = "changed"
	in[0].ToolCalls[0].Arguments[2] = 'b'
	in[0].Metadata["k"] = "changed"
	got, err := s.Messages.Recent(context.Background(), "cp", 0)
	if err != nil {
		t.Fatal(err)
	}
	got[0].ToolCalls[0].Name = "changed"
	got[0].Metadata["k"] = "changed too"
	again, err := s.Messages.Recent(context.Background(), "cp", 0)
	if err != nil {
		t.Fatal(err)
	}
	m := again[0]
	if m.Content != "x" || string(m.ToolCalls[0].Arguments) != `{"a":1}` || m.ToolCalls[0].Name != "t" || m.Metadata["k"] != "v" {
		t.Fatalf("the stored message shares memory with the caller's: %#v", m)
	}
}

func testReplace(t *testing.T, s Stores) {
	m := s.Messages
	for i := range 10 {
		mustAppend(t, m, "r", msg(loop.RoleUser, fmt.Sprint(i)))
	}
	if err := m.Replace(context.Background(), "r", []loop.Message{msg(loop.RoleSystem, "summary"), msg(loop.RoleUser, "9")}); err != nil {
		t.Fatalf("Replace: %v", err)
	}
	wantCount(t, m, "r", 2)
	wantContents(t, m, "r", 0, "summary", "9")
	mustAppend(t, m, "r", msg(loop.RoleAssistant, "10"))
	wantContents(t, m, "r", 0, "summary", "9", "10")
	wantContents(t, m, "r", 2, "9", "10")
	if err := m.Replace(context.Background(), "r", nil); err != nil {
		t.Fatalf("Replace with nothing: %v", err)
	}
	wantCount(t, m, "r", 0)
	wantContents(t, m, "r", 0)
	mustAppend(t, m, "r", msg(loop.RoleUser, "again"))
	wantContents(t, m, "r", 0, "again")
	// Replace of a context that has no history creates it.
	if err := m.Replace(context.Background(), "fresh", []loop.Message{msg(loop.RoleUser, "a")}); err != nil {
		t.Fatal(err)
	}
	wantContents(t, m, "fresh", 0, "a")
	if err := m.Replace(context.Background(), "r", []loop.Message{{Content: "no role"}}); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("Replace with a message without role: err = %v, want ErrInvalid", err)
	}
	wantContents(t, m, "r", 0, "again")
}

func testDelete(t *testing.T, s Stores) {
	m := s.Messages
	mustAppend(t, m, "d", msg(loop.RoleUser, "1"), msg(loop.RoleUser, "2"))
	mustAppend(t, m, "keep", msg(loop.RoleUser, "k"))
	if err := m.Delete(context.Background(), "d"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantCount(t, m, "d", 0)
	wantContents(t, m, "d", 0)
	wantContents(t, m, "keep", 0, "k")
	if err := m.Delete(context.Background(), "never-there"); err != nil {
		t.Fatalf("Delete of an unknown context: %v", err)
	}
	mustAppend(t, m, "d", msg(loop.RoleUser, "new"))
	wantContents(t, m, "d", 0, "new")
	wantCount(t, m, "d", 1)
}

func testMessageIsolation(t *testing.T, s Stores) {
	// Ids that are prefixes of each other or contain the key separator
	// must not see each other's messages.
	ids := []string{"a", "a/b", "a%2Fb", "a/", "ab", "a b", "ä", "a\x00"}
	for i, id := range ids {
		for j := 0; j <= i; j++ {
			mustAppend(t, s.Messages, id, msg(loop.RoleUser, fmt.Sprintf("%s#%d", id, j)))
		}
	}
	for i, id := range ids {
		var want []string
		for j := 0; j <= i; j++ {
			want = append(want, fmt.Sprintf("%s#%d", id, j))
		}
		wantContents(t, s.Messages, id, 0, want...)
		wantCount(t, s.Messages, id, i+1)
	}
	if err := s.Messages.Delete(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	wantContents(t, s.Messages, "a/b", 0, "a/b#0", "a/b#1")
}

func testMessageBadInput(t *testing.T, s Stores) {
	ctx := context.Background()
	m := s.Messages
	checks := []struct {
		name string
		err  error
	}{
		{"Append empty id", m.Append(ctx, "", msg(loop.RoleUser, "x"))},
		{"Append no role", m.Append(ctx, "bad", msg(loop.RoleUser, "ok"), loop.Message{Content: "x"})},
		{"Append huge id", m.Append(ctx, strings.Repeat("x", 1<<20), msg(loop.RoleUser, "x"))},
		{"Recent empty id", func() error { _, err := m.Recent(ctx, "", 1); return err }()},
		{"Count empty id", func() error { _, err := m.Count(ctx, ""); return err }()},
		{"Replace empty id", m.Replace(ctx, "", nil)},
		{"Delete empty id", m.Delete(ctx, "")},
	}
	for _, c := range checks {
		if !errors.Is(c.err, loop.ErrInvalid) {
			t.Errorf("%s: err = %v, want one matching loop.ErrInvalid", c.name, c.err)
		}
	}
	// A refused batch leaves nothing behind.
	wantCount(t, m, "bad", 0)
}

func testConcurrentAppend(t *testing.T, s Stores) {
	const writers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i += 2 {
				err := s.Messages.Append(context.Background(), "busy",
					msg(loop.RoleUser, fmt.Sprintf("%d/%d", g, i)), msg(loop.RoleAssistant, fmt.Sprintf("%d/%d", g, i+1)))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Append: %v", err)
	}
	wantCount(t, s.Messages, "busy", writers*each)
	all, err := s.Messages.Recent(context.Background(), "busy", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != writers*each {
		t.Fatalf("Recent returned %d messages, want %d", len(all), writers*each)
	}
	next := make([]int, writers)
	for k, m := range all {
		var g, i int
		if _, err := fmt.Sscanf(m.Content, "%d/%d", &g, &i); err != nil {
			t.Fatalf("message %d: unexpected content %q", k, m.Content)
		}
		if i != next[g] {
			t.Fatalf("message %d: writer %d's message %d, want its message %d (lost, duplicated or reordered)", k, g, i, next[g])
		}
		// A batch is contiguous: the second message follows the first.
		if i%2 == 1 && all[k-1].Content != fmt.Sprintf("%d/%d", g, i-1) {
			t.Fatalf("message %d: batch of writer %d split by %q", k, g, all[k-1].Content)
		}
		next[g]++
	}
	wantContents(t, s.Messages, "busy", 1, all[len(all)-1].Content)
}

// testConcurrentReplace runs appends, compactions (Replace) and reads of
// one context at once: every read sees a whole history (a summary followed
// by appended messages, in order), never an error or a half-done swap.
func testConcurrentReplace(t *testing.T, s Stores) {
	ctx := context.Background()
	const writers, each, replaces = 4, 30, 10
	mustAppend(t, s.Messages, "cr", msg(loop.RoleSystem, "summary-0"))
	var wg sync.WaitGroup
	errs := make(chan error, writers+2)
	stop := make(chan struct{})
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := s.Messages.Append(ctx, "cr", msg(loop.RoleUser, fmt.Sprintf("%d/%d", g, i))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := 1; r <= replaces; r++ {
			if err := s.Messages.Replace(ctx, "cr", []loop.Message{msg(loop.RoleSystem, fmt.Sprintf("summary-%d", r))}); err != nil {
				errs <- err
				return
			}
		}
	}()
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ms, err := s.Messages.Recent(ctx, "cr", 0)
			if err != nil {
				errs <- fmt.Errorf("reading recent messages during Replace: %w", err)
				return
			}
			if len(ms) == 0 || !strings.HasPrefix(ms[0].Content, "summary-") {
				errs <- fmt.Errorf("recent messages read during Replace saw a history not starting with a summary: %q", contents(ms))
				return
			}
			last := map[int]int{}
			for _, m := range ms[1:] {
				var g, i int
				if _, err := fmt.Sscanf(m.Content, "%d/%d", &g, &i); err != nil {
					errs <- fmt.Errorf("unexpected message %q after the summary", m.Content)
					return
				}
				if prev, ok := last[g]; ok && i <= prev {
					errs <- fmt.Errorf("writer %d's messages out of order: %d after %d", g, i, prev)
					return
				}
				last[g] = i
			}
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ms, err := s.Messages.Recent(ctx, "cr", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Content != fmt.Sprintf("summary-%d", replaces) {
		t.Fatalf("history starts with %q, want the last summary", ms[0].Content)
	}
	wantCount(t, s.Messages, "cr", len(ms))
}

func testAgents(t *testing.T, s Stores) {
	ctx := context.Background()
	a := s.Agents
	_, err := a.LoadAgent(ctx, "nobody")
	var nf *loop.NotFoundError
	if !errors.Is(err, loop.ErrNotFound) || !errors.As(err, &nf) || nf.ID != "nobody" {
		t.Fatalf("LoadAgent(unknown): err = %v, want a *loop.NotFoundError naming it", err)
	}
	md := loop.AgentMetadata{
		ContextID: "ctx-1", AgentID: "assistant", Owner: "alice", Status: loop.AgentReady, TurnCount: 3,
		CreatedAt:    time.Unix(1700000000, 123456789).UTC(),
		LastActivity: time.Unix(1700000100, 0).UTC(),
		Usage:        loop.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15},
		Error:        "",
		Metadata:     map[string]any{"title": "Trip", "score": 0.5},
	}
	if err := a.SaveAgent(ctx, md); err != nil {
		t.Fatalf("SaveAgent: %v", err)
	}
	got, err := a.LoadAgent(ctx, "ctx-1")
	if err != nil {
		t.Fatalf("LoadAgent: %v", err)
	}
	if !reflect.DeepEqual(got, md) {
		t.Fatalf("LoadAgent = %#v, want %#v", got, md)
	}
	md.Metadata["title"] = "changed after save"
	if got, _ := a.LoadAgent(ctx, "ctx-1"); got.Metadata["title"] != "Trip" {
		t.Fatalf("stored metadata shares memory with the caller's")
	}
	md2 := md
	md2.Metadata = nil
	md2.TurnCount, md2.Status, md2.Error = 4, loop.AgentFailed, "model: boom"
	if err := a.SaveAgent(ctx, md2); err != nil {
		t.Fatal(err)
	}
	if got, err := a.LoadAgent(ctx, "ctx-1"); err != nil || !reflect.DeepEqual(got, md2) {
		t.Fatalf("after overwrite LoadAgent = %#v, %v; want %#v", got, err, md2)
	}
	if err := a.DeleteAgent(ctx, "ctx-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LoadAgent(ctx, "ctx-1"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("LoadAgent after DeleteAgent: err = %v, want ErrNotFound", err)
	}
	if err := a.DeleteAgent(ctx, "ctx-1"); err != nil {
		t.Fatalf("DeleteAgent twice: %v", err)
	}
	if err := a.SaveAgent(ctx, loop.AgentMetadata{}); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("SaveAgent without context id: err = %v, want ErrInvalid", err)
	}
}

var t0 = time.Unix(1750000000, 0).UTC()

func task(id, ctxID string, created int, status loop.TaskStatus) loop.TaskRecord {
	return loop.TaskRecord{
		ID: id, ContextID: ctxID, Status: status,
		CreatedAt: t0.Add(time.Duration(created) * time.Second),
		UpdatedAt: t0.Add(time.Duration(created)*time.Second + 500*time.Millisecond),
	}
}

// mustSaveTask saves tr and returns it as stored (its version one higher).
func mustSaveTask(t *testing.T, s loop.TaskStore, tr loop.TaskRecord) loop.TaskRecord {
	t.Helper()
	if err := s.SaveTask(context.Background(), tr); err != nil {
		t.Fatalf("SaveTask(%q): %v", tr.ID, err)
	}
	tr.Version++
	return tr
}

func ids(ts []loop.TaskRecord) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func wantList(t *testing.T, s loop.TaskStore, f loop.TaskFilter, want ...string) {
	t.Helper()
	got, err := s.ListTasks(context.Background(), f)
	if err != nil {
		t.Fatalf("ListTasks(%+v): %v", f, err)
	}
	if g := ids(got); !slices.Equal(g, want) && !(len(g) == 0 && len(want) == 0) {
		t.Fatalf("ListTasks(%+v) = %q, want %q", f, g, want)
	}
}

func testTaskRoundTrip(t *testing.T, s Stores) {
	ctx := context.Background()
	_, err := s.Tasks.LoadTask(ctx, "nope")
	var nf *loop.NotFoundError
	if !errors.Is(err, loop.ErrNotFound) || !errors.As(err, &nf) || nf.ID != "nope" {
		t.Fatalf("LoadTask(unknown): err = %v, want a *loop.NotFoundError naming it", err)
	}
	tr := loop.TaskRecord{
		ID: "t1", ContextID: "c1", AgentID: "assistant", ParentTaskID: "t0", Owner: "alice",
		Status: loop.TaskWaitingInput, Message: "which city?", Reason: "client_tool", Content: "partial",
		Usage: loop.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, Iterations: 2,
		History: []loop.Message{
			{Role: loop.RoleUser, Content: "weather?"},
			{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: "c", Name: "ask", Arguments: json.RawMessage(`{"q":"city"}`)}}},
		},
		PendingCalls: []loop.ToolCall{{ID: "c", Name: "ask", Arguments: json.RawMessage(`{"q":"city"}`)}},
		CreatedAt:    t0, UpdatedAt: t0.Add(time.Second),
		ExpiresAt: time.Now().Add(time.Hour).UTC().Truncate(time.Second),
		Metadata:  map[string]any{"k": "v"},
	}
	tr = mustSaveTask(t, s.Tasks, tr)
	got, err := s.Tasks.LoadTask(ctx, "t1")
	if err != nil {
		t.Fatalf("LoadTask: %v", err)
	}
	if !reflect.DeepEqual(got, tr) {
		t.Fatalf("LoadTask = %#v\nwant %#v", got, tr)
	}
	tr.History[0].Content = "changed"
	if got, _ := s.Tasks.LoadTask(ctx, "t1"); got.History[0].Content != "weather?" {
		t.Fatal("stored task shares memory with the caller's")
	}
	if err := s.Tasks.DeleteTask(ctx, "t1"); err != nil {
		t.Fatalf("DeleteTask: %v", err)
	}
	if _, err := s.Tasks.LoadTask(ctx, "t1"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("LoadTask after delete: err = %v, want ErrNotFound", err)
	}
	wantList(t, s.Tasks, loop.TaskFilter{})
	wantList(t, s.Tasks, loop.TaskFilter{ContextID: "c1"})
	wantList(t, s.Tasks, loop.TaskFilter{Owner: "alice"})
	if err := s.Tasks.DeleteTask(ctx, "t1"); err != nil {
		t.Fatalf("DeleteTask of a deleted task: %v", err)
	}
}

func testTaskOverwrite(t *testing.T, s Stores) {
	tr := task("t", "c-old", 1, loop.TaskWorking)
	tr.Owner, tr.AgentID = "alice", "a1"
	tr = mustSaveTask(t, s.Tasks, tr)
	tr.Status = loop.TaskCompleted
	tr.ContextID, tr.Owner, tr.AgentID = "c-new", "bob", "a2"
	tr.CreatedAt = tr.CreatedAt.Add(time.Hour)
	mustSaveTask(t, s.Tasks, tr)
	got, err := s.Tasks.LoadTask(context.Background(), "t")
	if err != nil || got.Status != loop.TaskCompleted || got.ContextID != "c-new" {
		t.Fatalf("LoadTask after overwrite = %+v, %v", got, err)
	}
	wantList(t, s.Tasks, loop.TaskFilter{ContextID: "c-old"})
	wantList(t, s.Tasks, loop.TaskFilter{Owner: "alice"})
	wantList(t, s.Tasks, loop.TaskFilter{AgentID: "a1"})
	wantList(t, s.Tasks, loop.TaskFilter{ContextID: "c-new"}, "t")
	wantList(t, s.Tasks, loop.TaskFilter{Owner: "bob"}, "t")
	wantList(t, s.Tasks, loop.TaskFilter{AgentID: "a2"}, "t")
	wantList(t, s.Tasks, loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskWorking}})
	wantList(t, s.Tasks, loop.TaskFilter{}, "t")
}

func testTaskFilters(t *testing.T, s Stores) {
	type spec struct {
		id, ctx, agent, owner string
		created               int
		status                loop.TaskStatus
	}
	specs := []spec{
		{"t1", "c1", "a1", "alice", 1, loop.TaskCompleted},
		{"t2", "c1", "a1", "alice", 2, loop.TaskFailed},
		{"t3", "c2", "a2", "bob", 3, loop.TaskWorking},
		{"t4", "c1", "a2", "bob", 4, loop.TaskWaitingInput},
		{"t5", "c2", "a1", "alice", 5, loop.TaskCompleted},
		{"t6", "c1", "", "", 5, loop.TaskCanceled}, // same CreatedAt as t5: ID breaks the tie
	}
	for _, sp := range specs {
		tr := task(sp.id, sp.ctx, sp.created, sp.status)
		tr.AgentID, tr.Owner = sp.agent, sp.owner
		mustSaveTask(t, s.Tasks, tr)
	}
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	cases := []struct {
		name string
		f    loop.TaskFilter
		want []string
	}{
		{"all newest first", loop.TaskFilter{}, []string{"t6", "t5", "t4", "t3", "t2", "t1"}},
		{"context", loop.TaskFilter{ContextID: "c1"}, []string{"t6", "t4", "t2", "t1"}},
		{"agent", loop.TaskFilter{AgentID: "a1"}, []string{"t5", "t2", "t1"}},
		{"owner", loop.TaskFilter{Owner: "bob"}, []string{"t4", "t3"}},
		{"context and owner", loop.TaskFilter{ContextID: "c1", Owner: "alice"}, []string{"t2", "t1"}},
		{"context and agent", loop.TaskFilter{ContextID: "c2", AgentID: "a1"}, []string{"t5"}},
		{"owner and agent", loop.TaskFilter{Owner: "alice", AgentID: "a1"}, []string{"t5", "t2", "t1"}},
		{"status", loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskCompleted}}, []string{"t5", "t1"}},
		{"statuses", loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskWorking, loop.TaskWaitingInput}}, []string{"t4", "t3"}},
		{"updated after", loop.TaskFilter{UpdatedAfter: at(3)}, []string{"t6", "t5", "t4", "t3"}},
		{"updated before", loop.TaskFilter{UpdatedBefore: at(3)}, []string{"t2", "t1"}},
		{"updated between", loop.TaskFilter{UpdatedAfter: at(2), UpdatedBefore: at(4)}, []string{"t3", "t2"}},
		{"limit", loop.TaskFilter{Limit: 2}, []string{"t6", "t5"}},
		{"context, limit", loop.TaskFilter{ContextID: "c1", Limit: 3}, []string{"t6", "t4", "t2"}},
		{"no match", loop.TaskFilter{ContextID: "c3"}, nil},
		{"no match status", loop.TaskFilter{ContextID: "c2", Statuses: []loop.TaskStatus{loop.TaskFailed}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantList(t, s.Tasks, c.f, c.want...) })
	}
}

func testTaskPagination(t *testing.T, s Stores) {
	const n = 23
	var want []string
	for i := range n {
		// Several tasks share a CreatedAt: the order within is by ID.
		tr := task(fmt.Sprintf("task-%02d", i), "pc", i/3, loop.TaskCompleted)
		if i%2 == 0 {
			tr.Owner = "even"
		}
		mustSaveTask(t, s.Tasks, tr)
		want = append([]string{tr.ID}, want...)
	}
	mustSaveTask(t, s.Tasks, task("other", "elsewhere", 100, loop.TaskCompleted))
	for _, f := range []loop.TaskFilter{{ContextID: "pc"}, {Owner: "even"}} {
		full, err := s.Tasks.ListTasks(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{1, 4, 7, n} {
			var got []string
			page := f
			page.Limit = size
			for range n + 1 {
				ts, err := s.Tasks.ListTasks(context.Background(), page)
				if err != nil {
					t.Fatalf("page after %q: %v", page.After, err)
				}
				if len(ts) > size {
					t.Fatalf("page of %d tasks, limit %d", len(ts), size)
				}
				got = append(got, ids(ts)...)
				if len(ts) < size {
					break
				}
				page.After = ts[len(ts)-1].ID
			}
			if !slices.Equal(got, ids(full)) {
				t.Fatalf("filter %+v, pages of %d: %q, want %q", f, size, got, ids(full))
			}
		}
		if f.ContextID != "" && !slices.Equal(ids(full), want) {
			t.Fatalf("ListTasks = %q, want %q", ids(full), want)
		}
	}
	_, err := s.Tasks.ListTasks(context.Background(), loop.TaskFilter{After: "no-such-task"})
	if !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("ListTasks with an unknown page token: err = %v, want ErrInvalid", err)
	}
}

// eventually polls cond until it holds or 15 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after 15 s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testTaskTTL(t *testing.T, s Stores) {
	ctx := context.Background()
	past := task("past", "ttl", 1, loop.TaskCompleted)
	past.ExpiresAt = time.Now().Add(-time.Second)
	mustSaveTask(t, s.Tasks, past)
	if _, err := s.Tasks.LoadTask(ctx, "past"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("LoadTask of an expired task: err = %v, want ErrNotFound", err)
	}
	soon := task("soon", "ttl", 2, loop.TaskCompleted)
	soon.Owner = "alice"
	soon.ExpiresAt = time.Now().Add(1500 * time.Millisecond)
	mustSaveTask(t, s.Tasks, soon)
	mustSaveTask(t, s.Tasks, task("forever", "ttl", 3, loop.TaskCompleted))
	_, err := s.Tasks.LoadTask(ctx, "soon")
	if time.Now().Before(soon.ExpiresAt) && err != nil {
		t.Fatalf("LoadTask before expiry: %v", err)
	}
	eventually(t, "task past its ExpiresAt is gone", func() bool {
		_, err := s.Tasks.LoadTask(ctx, "soon")
		if err != nil && !errors.Is(err, loop.ErrNotFound) {
			t.Fatalf("LoadTask: %v", err)
		}
		return err != nil
	})
	wantList(t, s.Tasks, loop.TaskFilter{ContextID: "ttl"}, "forever")
	wantList(t, s.Tasks, loop.TaskFilter{Owner: "alice"})
	wantList(t, s.Tasks, loop.TaskFilter{}, "forever")
	// A saved task whose expiry is removed lives on.
	keep := task("keep", "ttl", 4, loop.TaskWorking)
	keep.ExpiresAt = time.Now().Add(time.Second)
	keep = mustSaveTask(t, s.Tasks, keep)
	keep.ExpiresAt = time.Time{}
	mustSaveTask(t, s.Tasks, keep)
	time.Sleep(2100 * time.Millisecond)
	if _, err := s.Tasks.LoadTask(ctx, "keep"); err != nil {
		t.Fatalf("task saved again without expiry: %v", err)
	}
	wantList(t, s.Tasks, loop.TaskFilter{ContextID: "ttl"}, "keep", "forever")
}

func testTaskBadInput(t *testing.T, s Stores) {
	ctx := context.Background()
	checks := []struct {
		name string
		err  error
	}{
		{"Save no id", s.Tasks.SaveTask(ctx, loop.TaskRecord{ContextID: "c"})},
		{"Save no context", s.Tasks.SaveTask(ctx, loop.TaskRecord{ID: "x"})},
		{"Save huge id", s.Tasks.SaveTask(ctx, loop.TaskRecord{ID: strings.Repeat("x", 1<<20), ContextID: "c"})},
		{"Load empty id", func() error { _, err := s.Tasks.LoadTask(ctx, ""); return err }()},
		{"Delete empty id", s.Tasks.DeleteTask(ctx, "")},
	}
	for _, c := range checks {
		if !errors.Is(c.err, loop.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", c.name, c.err)
		}
	}
}

func mustEvents(t *testing.T, l loop.EventLog, stream string, data ...string) uint64 {
	t.Helper()
	bs := make([][]byte, len(data))
	for i, d := range data {
		bs[i] = []byte(d)
	}
	first, err := l.Append(context.Background(), stream, bs...)
	if err != nil {
		t.Fatalf("Append(%q): %v", stream, err)
	}
	return first
}

func wantRead(t *testing.T, l loop.EventLog, stream string, after uint64, limit int, want ...string) {
	t.Helper()
	recs, err := l.Read(context.Background(), stream, after, limit)
	if err != nil {
		t.Fatalf("Read(%q, %d, %d): %v", stream, after, limit, err)
	}
	var got []string
	for i, r := range recs {
		if r.Seq != after+uint64(i)+1 {
			t.Fatalf("Read(%q, %d, %d): record %d has seq %d, want %d", stream, after, limit, i, r.Seq, after+uint64(i)+1)
		}
		got = append(got, string(r.Data))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Read(%q, %d, %d) = %q, want %q", stream, after, limit, got, want)
	}
}

func wantLast(t *testing.T, l loop.EventLog, stream string, want uint64) {
	t.Helper()
	got, err := l.Last(context.Background(), stream)
	if err != nil || got != want {
		t.Fatalf("Last(%q) = %d, %v; want %d", stream, got, err, want)
	}
}

func testEvents(t *testing.T, s Stores) {
	l := s.Events
	wantLast(t, l, "s1", 0)
	wantRead(t, l, "s1", 0, 0)
	if f := mustEvents(t, l, "s1", "a"); f != 1 {
		t.Fatalf("first Append returned seq %d, want 1", f)
	}
	if f := mustEvents(t, l, "s1", "b", "c", "d"); f != 2 {
		t.Fatalf("second Append returned seq %d, want 2", f)
	}
	if f := mustEvents(t, l, "s1/x", "other"); f != 1 {
		t.Fatalf("Append to another stream returned seq %d, want 1", f)
	}
	wantLast(t, l, "s1", 4)
	wantRead(t, l, "s1", 0, 0, "a", "b", "c", "d")
	wantRead(t, l, "s1", 0, 2, "a", "b")
	wantRead(t, l, "s1", 2, 1, "c")
	wantRead(t, l, "s1", 2, 10, "c", "d")
	wantRead(t, l, "s1", 4, 10)
	wantRead(t, l, "s1", 100, 10)
	wantRead(t, l, "s1/x", 0, 0, "other")
	bin := []byte{0, 1, 2, 0xff, '\n'}
	first, err := l.Append(context.Background(), "s1", bin, []byte{})
	if err != nil || first != 5 {
		t.Fatalf("Append = %d, %v; want 5", first, err)
	}
	bin[0] = 9
	recs, err := l.Read(context.Background(), "s1", 4, 0)
	if err != nil || len(recs) != 2 || string(recs[0].Data) != "\x00\x01\x02\xff\n" || len(recs[1].Data) != 0 {
		t.Fatalf("Read of binary records = %+v, %v", recs, err)
	}
	if _, err := l.Append(context.Background(), "s1"); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("Append of no records: err = %v, want ErrInvalid", err)
	}
	if _, err := l.Append(context.Background(), "", []byte("x")); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("Append to an unnamed stream: err = %v, want ErrInvalid", err)
	}
	wantLast(t, l, "s1", 6)
}

// wantReadSeqs is wantRead for records that start at seq first (a read from
// below an expired stream's floor).
func wantReadSeqs(t *testing.T, l loop.EventLog, stream string, after uint64, first uint64, want ...string) {
	t.Helper()
	recs, err := l.Read(context.Background(), stream, after, 0)
	if err != nil {
		t.Fatalf("Read(%q, %d): %v", stream, after, err)
	}
	var got []string
	for i, r := range recs {
		if r.Seq != first+uint64(i) {
			t.Fatalf("Read(%q, %d): record %d has seq %d, want %d", stream, after, i, r.Seq, first+uint64(i))
		}
		got = append(got, string(r.Data))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Read(%q, %d) = %q, want %q", stream, after, got, want)
	}
}

// testEventExpire: Expire removes a stream's records, never its last seq.
// A stream's seqs never go back for the life of its name, so an id a
// client holds (a live follower's cursor, a Last-Event-ID) never names
// another event: the next append after an expiry continues after the last
// seq the stream ever had.
func testEventExpire(t *testing.T, s Stores) {
	ctx := context.Background()
	l := s.Events
	sweep := func() {
		if s.Sweep != nil {
			s.Sweep(t)
		}
	}
	mustEvents(t, l, "gone", "a", "b")
	mustEvents(t, l, "stays", "x")
	if err := l.Expire(ctx, "gone", 0); err != nil {
		t.Fatalf("Expire(0): %v", err)
	}
	wantRead(t, l, "gone", 0, 0)
	wantLast(t, l, "gone", 2)
	sweep()
	wantRead(t, l, "gone", 0, 0)
	wantLast(t, l, "gone", 2)
	// A reader waiting after the last id it saw is woken by the next
	// append, which continues after it.
	waited := make(chan uint64, 1)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		n, err := l.Wait(wctx, "gone", 2)
		if err != nil {
			n = 0
		}
		waited <- n
	}()
	if f := mustEvents(t, l, "gone", "new"); f != 3 {
		t.Fatalf("Append after the stream expired: seq %d, want 3 (after its last seq 2)", f)
	}
	if n := <-waited; n != 3 {
		t.Fatalf("Wait after 2 across the expiry returned %d, want 3", n)
	}
	wantReadSeqs(t, l, "gone", 0, 3, "new")
	wantReadSeqs(t, l, "gone", 1, 3, "new") // from below the floor: what is kept
	wantRead(t, l, "gone", 2, 0, "new")
	sweep()
	wantRead(t, l, "gone", 2, 0, "new")
	wantLast(t, l, "gone", 3)
	if err := l.Expire(ctx, "never-written", time.Second); err != nil {
		t.Fatalf("Expire of an unknown stream: %v", err)
	}
	wantLast(t, l, "never-written", 0)
	if f := mustEvents(t, l, "never-written", "first"); f != 1 {
		t.Fatalf("Append to a stream never written: seq %d, want 1", f)
	}
	if err := l.Expire(ctx, "stays", -time.Second); !errors.Is(err, loop.ErrInvalid) {
		t.Fatalf("Expire with a negative ttl: err = %v, want ErrInvalid", err)
	}

	// An append after Expire cancels the expiry: a stream written to
	// after its deadline was set (a new turn of a conversation) is never
	// deleted under its writer. "ctl" gets its deadline after "ttl" did, so
	// once it is gone, "ttl" is past the deadline it was given.
	mustEvents(t, l, "ttl", "1", "2", "3")
	mustEvents(t, l, "ctl", "c")
	if err := l.Expire(ctx, "ttl", time.Second); err != nil {
		t.Fatalf("Expire(1s): %v", err)
	}
	if err := l.Expire(ctx, "ctl", time.Second); err != nil {
		t.Fatalf("Expire(1s): %v", err)
	}
	mustEvents(t, l, "ttl", "4") // appended after Expire: the stream stays
	gone := func(stream string) func() bool {
		return func() bool {
			recs, err := l.Read(ctx, stream, 0, 0)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			return len(recs) == 0
		}
	}
	eventually(t, "stream past its ttl is gone", gone("ctl"))
	wantLast(t, l, "ctl", 1)
	sweep()
	wantLast(t, l, "ttl", 4)
	wantRead(t, l, "ttl", 0, 0, "1", "2", "3", "4")
	if f := mustEvents(t, l, "ttl", "5"); f != 5 {
		t.Fatalf("Append to a stream whose expiry an append canceled: seq %d, want 5", f)
	}
	// Its writer sets the expiry again: then its records go, its last
	// seq stays.
	if err := l.Expire(ctx, "ttl", time.Second); err != nil {
		t.Fatalf("Expire(1s): %v", err)
	}
	eventually(t, "stream past its ttl is gone", gone("ttl"))
	wantLast(t, l, "ttl", 5)
	wantRead(t, l, "stays", 0, 0, "x")
	// Appended to after its deadline and before any sweep: the old
	// records stay gone, the new ones follow on.
	if f := mustEvents(t, l, "ttl", "again"); f != 6 {
		t.Fatalf("Append after expiry: seq %d, want 6", f)
	}
	wantReadSeqs(t, l, "ttl", 0, 6, "again")
	sweep()
	wantReadSeqs(t, l, "ttl", 0, 6, "again")
	wantLast(t, l, "ttl", 6)
	if f := mustEvents(t, l, "ttl", "more"); f != 7 {
		t.Fatalf("Append after the sweep: seq %d, want 7", f)
	}
	wantReadSeqs(t, l, "ttl", 0, 6, "again", "more")

	// A stream that takes over from another name (a conversation started
	// again under another id) is seeded with the ids its clients hold.
	sd, ok := l.(loop.StreamSeeder)
	if !ok {
		t.Fatalf("the event log %T is no loop.StreamSeeder", l)
	}
	if err := sd.SeedStream(ctx, "seeded", 7); err != nil {
		t.Fatalf("SeedStream: %v", err)
	}
	wantLast(t, l, "seeded", 7)
	wantRead(t, l, "seeded", 0, 0)
	if f := mustEvents(t, l, "seeded", "s"); f != 8 {
		t.Fatalf("Append to a stream seeded with 7: seq %d, want 8", f)
	}
	if err := sd.SeedStream(ctx, "seeded", 20); err != nil { // it has records: nothing
		t.Fatalf("SeedStream: %v", err)
	}
	wantLast(t, l, "seeded", 8)
	if err := sd.SeedStream(ctx, "seeded", 3); err != nil {
		t.Fatalf("SeedStream: %v", err)
	}
	wantLast(t, l, "seeded", 8)
	if err := l.Expire(ctx, "seeded", 0); err != nil {
		t.Fatal(err)
	}
	if err := sd.SeedStream(ctx, "seeded", 20); err != nil { // no records left
		t.Fatalf("SeedStream: %v", err)
	}
	wantLast(t, l, "seeded", 20)
	sweep()
	wantLast(t, l, "seeded", 20)
	if f := mustEvents(t, l, "seeded", "t"); f != 21 {
		t.Fatalf("Append to an expired stream seeded with 20: seq %d, want 21", f)
	}
	wantReadSeqs(t, l, "seeded", 0, 21, "t")
}

func testEventsConcurrent(t *testing.T, s Stores) {
	const streams, writers, each = 4, 24, 30
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := fmt.Sprintf("stream-%d", w%streams)
			var prev uint64
			for i := 0; i < each; {
				batch := [][]byte{[]byte(fmt.Sprintf("%d/%d", w, i))}
				if i%5 == 0 && i+1 < each {
					batch = append(batch, []byte(fmt.Sprintf("%d/%d", w, i+1)))
				}
				first, err := s.Events.Append(context.Background(), stream, batch...)
				if err != nil {
					errs <- err
					return
				}
				if first <= prev {
					errs <- fmt.Errorf("writer %d: Append returned seq %d after %d", w, first, prev)
					return
				}
				prev = first + uint64(len(batch)) - 1
				i += len(batch)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	perStream := writers / streams * each
	for st := range streams {
		stream := fmt.Sprintf("stream-%d", st)
		wantLast(t, s.Events, stream, uint64(perStream))
		recs, err := s.Events.Read(context.Background(), stream, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != perStream {
			t.Fatalf("%s: %d records, want %d", stream, len(recs), perStream)
		}
		next := map[int]int{}
		for k, r := range recs {
			if r.Seq != uint64(k+1) {
				t.Fatalf("%s: record %d has seq %d (gap or duplicate)", stream, k, r.Seq)
			}
			var w, i int
			if _, err := fmt.Sscanf(string(r.Data), "%d/%d", &w, &i); err != nil || w%streams != st {
				t.Fatalf("%s: unexpected record %q", stream, r.Data)
			}
			if next[w] != i {
				t.Fatalf("%s: seq %d is writer %d's record %d, want its record %d", stream, r.Seq, w, i, next[w])
			}
			next[w]++
		}
	}
}

func testKV(t *testing.T, s Stores) {
	ctx := context.Background()
	kv := s.KV
	_, err := kv.KVGet(ctx, "p1", "missing")
	if !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("KVGet(missing): err = %v, want ErrNotFound", err)
	}
	set := func(ns, k, v string) {
		t.Helper()
		if err := kv.KVSet(ctx, ns, k, []byte(v)); err != nil {
			t.Fatalf("KVSet(%q, %q): %v", ns, k, err)
		}
	}
	get := func(ns, k, want string) {
		t.Helper()
		v, err := kv.KVGet(ctx, ns, k)
		if err != nil || string(v) != want {
			t.Fatalf("KVGet(%q, %q) = %q, %v; want %q", ns, k, v, err, want)
		}
	}
	set("p1", "k", "v1")
	set("p2", "k", "v2")
	set("p1", "dir/file", "nested")
	set("p1/k", "x", "tricky")
	set("p1", "empty", "")
	get("p1", "k", "v1")
	get("p2", "k", "v2")
	get("p1", "dir/file", "nested")
	get("p1/k", "x", "tricky")
	get("p1", "empty", "")
	if _, err := kv.KVGet(ctx, "p1", "k/x"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("KVGet(p1, k/x) crossed namespaces: err = %v", err)
	}
	set("p1", "k", "v1b")
	get("p1", "k", "v1b")
	buf := []byte("mutable")
	if err := kv.KVSet(ctx, "p1", "m", buf); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	got, _ := kv.KVGet(ctx, "p1", "m")
	got[1] = 'Y'
	get("p1", "m", "mutable")
	if err := kv.KVDelete(ctx, "p1", "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.KVGet(ctx, "p1", "k"); !errors.Is(err, loop.ErrNotFound) {
		t.Fatalf("KVGet after delete: err = %v, want ErrNotFound", err)
	}
	get("p2", "k", "v2")
	if err := kv.KVDelete(ctx, "p1", "k"); err != nil {
		t.Fatalf("KVDelete of an absent key: %v", err)
	}
	bad := []struct {
		name string
		err  error
	}{
		{"empty namespace", kv.KVSet(ctx, "", "k", nil)},
		{"empty key", kv.KVSet(ctx, "p", "", nil)},
		{"huge key", kv.KVSet(ctx, "p", strings.Repeat("k", 1<<20), nil)},
		{"huge value", kv.KVSet(ctx, "p", "k", make([]byte, 64<<20))},
		{"get empty key", func() error { _, err := kv.KVGet(ctx, "p", ""); return err }()},
		{"delete empty namespace", kv.KVDelete(ctx, "", "k")},
	}
	for _, b := range bad {
		if !errors.Is(b.err, loop.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", b.name, b.err)
		}
	}
}

func testCanceled(t *testing.T, s Stores) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs := map[string]error{
		"Append":     s.Messages.Append(ctx, "c", msg(loop.RoleUser, "x")),
		"Recent":     func() error { _, err := s.Messages.Recent(ctx, "c", 1); return err }(),
		"SaveAgent":  s.Agents.SaveAgent(ctx, loop.AgentMetadata{ContextID: "c"}),
		"LoadAgent":  func() error { _, err := s.Agents.LoadAgent(ctx, "c"); return err }(),
		"SaveTask":   s.Tasks.SaveTask(ctx, task("t", "c", 1, loop.TaskWorking)),
		"ListTasks":  func() error { _, err := s.Tasks.ListTasks(ctx, loop.TaskFilter{}); return err }(),
		"EventsApp":  func() error { _, err := s.Events.Append(ctx, "s", []byte("x")); return err }(),
		"EventsRead": func() error { _, err := s.Events.Read(ctx, "s", 0, 0); return err }(),
		"KVSet":      s.KV.KVSet(ctx, "p", "k", nil),
	}
	for name, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled context: err = %v, want context.Canceled", name, err)
		}
	}
	wantCount(t, s.Messages, "c", 0)
	wantLast(t, s.Events, "s", 0)
}

func testReopen(t *testing.T, s Stores) {
	if s.Reopen == nil {
		t.Skip("this implementation keeps nothing across a restart (Stores.Reopen is nil)")
	}
	ctx := context.Background()
	mustAppend(t, s.Messages, "c", msg(loop.RoleUser, "1"), msg(loop.RoleAssistant, "2"))
	if err := s.Agents.SaveAgent(ctx, loop.AgentMetadata{ContextID: "c", TurnCount: 1, Status: loop.AgentReady}); err != nil {
		t.Fatal(err)
	}
	tr := task("t", "c", 1, loop.TaskCompleted)
	tr.Owner = "alice"
	tr = mustSaveTask(t, s.Tasks, tr)
	mustEvents(t, s.Events, "c", "e1", "e2")
	if err := s.KV.KVSet(ctx, "plug", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}

	s = s.Reopen(t)

	wantContents(t, s.Messages, "c", 0, "1", "2")
	mustAppend(t, s.Messages, "c", msg(loop.RoleUser, "3"))
	wantContents(t, s.Messages, "c", 0, "1", "2", "3")
	wantCount(t, s.Messages, "c", 3)
	if md, err := s.Agents.LoadAgent(ctx, "c"); err != nil || md.TurnCount != 1 {
		t.Fatalf("LoadAgent after reopen = %+v, %v", md, err)
	}
	if got, err := s.Tasks.LoadTask(ctx, "t"); err != nil || !reflect.DeepEqual(got, tr) {
		t.Fatalf("LoadTask after reopen = %+v, %v", got, err)
	}
	wantList(t, s.Tasks, loop.TaskFilter{Owner: "alice"}, "t")
	wantLast(t, s.Events, "c", 2)
	if f := mustEvents(t, s.Events, "c", "e3"); f != 3 {
		t.Fatalf("Append after reopen returned seq %d, want 3", f)
	}
	wantRead(t, s.Events, "c", 0, 0, "e1", "e2", "e3")
	if v, err := s.KV.KVGet(ctx, "plug", "k"); err != nil || string(v) != "v" {
		t.Fatalf("KVGet after reopen = %q, %v", v, err)
	}

	// And once more, after writes made by the reopened store.
	s = s.Reopen(t)
	wantContents(t, s.Messages, "c", 2, "2", "3")
	wantLast(t, s.Events, "c", 3)
}
