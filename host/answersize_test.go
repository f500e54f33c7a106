package host_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestAnswerBytesBounded: answers that carry stored tasks stay within
// limits.maxAnswerBytes. ListTasks ends a page at the cap (more tasks than
// are read from the store at a time, each listed once over the pages, the
// total on each); a task that alone passes the cap is answered by GetTask
// and ListTasks with its oldest messages left out and counted in
// historyTrimmed.
func TestAnswerBytesBounded(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	const limit = 70_000
	cfg.Limits.MaxAnswerBytes = limit
	h := startHost(t, cfg)
	c := client10(t, h.URL(), "")
	ctx := context.Background()
	const n = 20
	ids := map[a2a.TaskID]bool{}
	for range n {
		ids[send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg(strings.Repeat("m", 4000))}).ID] = true
	}
	huge := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg(strings.Repeat("h", 30_000))})
	ids[huge.ID] = true

	if tr, ok := huge.Metadata["historyTrimmed"]; !ok || len(huge.History) != 1 {
		t.Fatalf("SendMessage's task of %d bytes: %d messages, historyTrimmed %v; want the last one and 1", jsonSize(t, huge), len(huge.History), tr)
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: huge.ID})
	if err != nil {
		t.Fatal(err)
	}
	if s := jsonSize(t, got); s > limit || got.Metadata["historyTrimmed"] != float64(1) || len(got.History) != 1 {
		t.Fatalf("GetTask: %d bytes, %d messages, historyTrimmed %v; want <= %d, 1, 1", s, len(got.History), got.Metadata["historyTrimmed"], limit)
	}
	seen, pages, token := map[a2a.TaskID]bool{}, 0, ""
	for {
		hl := 10
		page, err := c.ListTasks(ctx, &a2a.ListTasksRequest{PageSize: 100, HistoryLength: &hl, PageToken: token, IncludeArtifacts: true})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if page.TotalSize != n+1 || len(page.Tasks) == 0 {
			t.Fatalf("page %d: total %d, %d tasks", pages, page.TotalSize, len(page.Tasks))
		}
		if s := jsonSize(t, page); s > limit+1000 {
			t.Fatalf("page %d: %d bytes, over %d", pages, s, limit)
		}
		for _, tk := range page.Tasks {
			if seen[tk.ID] {
				t.Fatalf("task %s listed twice", tk.ID)
			}
			seen[tk.ID] = true
			trimmed := tk.Metadata["historyTrimmed"] != nil
			if (tk.ID == huge.ID) != trimmed || len(tk.History) == 0 {
				t.Fatalf("task %s (huge: %v): %d messages, historyTrimmed %v", tk.ID, tk.ID == huge.ID, len(tk.History), tk.Metadata["historyTrimmed"])
			}
		}
		if token = page.NextPageToken; token == "" {
			break
		}
		if pages > n+1 {
			t.Fatal("more pages than tasks")
		}
	}
	if len(seen) != len(ids) || pages < 3 {
		t.Fatalf("%d pages listed %d tasks, want %d on 3 or more", pages, len(seen), len(ids))
	}
}

func jsonSize(t *testing.T, v any) int {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// TestAdminTasksPagesAcrossStoreReads: /admin/tasks reads the store a few
// records at a time (each may hold megabytes of history); its pages still
// hold limit tasks, each once, with "next" while more may follow.
func TestAdminTasksPagesAcrossStoreReads(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Admin.Token = "root-token"
	h := startHost(t, cfg)
	c := client10(t, h.URL(), "")
	const n = 21
	for range n {
		send(t, c, context.Background(), &a2a.SendMessageRequest{Message: userMsg("hello")})
	}
	seen, after, pages := map[string]bool{}, "", 0
	for {
		var l struct {
			adminTaskList
			Next string `json:"next"`
		}
		if st := adminCall(t, "GET", h.URL()+"/admin/tasks?limit=10&after="+after, "root-token", &l); st != 200 {
			t.Fatalf("list: %d %s", st, l.Error)
		}
		pages++
		if want := min(10, n-len(seen)); len(l.Tasks) != want {
			t.Fatalf("page %d: %d tasks, want %d", pages, len(l.Tasks), want)
		}
		for _, tk := range l.Tasks {
			if seen[tk.ID] {
				t.Fatalf("task %s listed twice", tk.ID)
			}
			seen[tk.ID] = true
		}
		if l.Next == "" {
			break
		}
		if pages > n {
			t.Fatal("more pages than tasks")
		}
		after = l.Next
	}
	if len(seen) != n || pages != 3 {
		t.Fatalf("%d pages listed %d tasks, want %d on 3", pages, len(seen), n)
	}
}
