package host_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
)

// adminCall calls the admin API and decodes the JSON answer into out.
func adminCall(t *testing.T, method, url, token string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %q is not JSON: %v", method, url, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

type adminTaskList struct {
	Tasks []struct {
		ID        string `json:"id"`
		ContextID string `json:"contextId"`
		Owner     string `json:"owner"`
		Status    string `json:"status"`
		Running   bool   `json:"running"`
	} `json:"tasks"`
	Error string `json:"error"`
}

func (l adminTaskList) ids() map[string]string {
	out := map[string]string{}
	for _, t := range l.Tasks {
		out[t.ID] = t.Status
	}
	return out
}

// waitTerminal polls a task until it has ended.
func waitTerminal(t *testing.T, c *a2aclient.Client, id string) *a2a.Task {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		task, err := c.GetTask(context.Background(), &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
		if err != nil {
			t.Fatalf("get task %s: %v", id, err)
		}
		if task.Status.State.Terminal() {
			return task
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still %s after a minute", id, task.Status.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAdminTasks(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.Admin.Token = "root-token"
	h := startHost(t, cfg)
	base := h.URL() + "/admin/tasks"
	c := client10(t, h.URL(), "")
	ctx := context.Background()

	calc := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("calc 2+2")})
	failed := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("fail")})
	if calc.Status.State != a2a.TaskStateCompleted || failed.Status.State != a2a.TaskStateFailed {
		t.Fatalf("calc %s, fail %s: want completed and failed", calc.Status.State, failed.Status.State)
	}

	// The credential is required.
	if st := adminCall(t, "GET", base, "", nil); st != 401 {
		t.Fatalf("list without credential: %d, want 401", st)
	}
	if st := adminCall(t, "GET", base, "alice-token", nil); st != 401 {
		t.Fatalf("list with a wrong credential: %d, want 401", st)
	}

	// Lists by state, context and owner.
	var l adminTaskList
	if st := adminCall(t, "GET", base+"?state=failed", "root-token", &l); st != 200 {
		t.Fatalf("list failed: %d %s", st, l.Error)
	}
	if got := l.ids(); len(got) != 1 || got[string(failed.ID)] != "failed" {
		t.Fatalf("failed tasks %v, want only %s", got, failed.ID)
	}
	l = adminTaskList{}
	adminCall(t, "GET", base+"?state=completed,failed&owner=local", "root-token", &l)
	if got := l.ids(); len(got) != 2 {
		t.Fatalf("tasks of local %v, want both", got)
	}
	l = adminTaskList{}
	adminCall(t, "GET", base+"?owner=bob", "root-token", &l)
	if len(l.Tasks) != 0 {
		t.Fatalf("tasks of bob %v, want none", l.ids())
	}
	l = adminTaskList{}
	adminCall(t, "GET", base+"?contextId="+calc.ContextID, "root-token", &l)
	if got := l.ids(); len(got) != 1 || got[string(calc.ID)] != "completed" {
		t.Fatalf("tasks of the calc context %v, want only %s", got, calc.ID)
	}
	l = adminTaskList{}
	if st := adminCall(t, "GET", base+"?state=sleeping", "root-token", &l); st != 400 || l.Error == "" {
		t.Fatalf("unknown state: %d %q, want 400 naming it", st, l.Error)
	}

	// The journal of a task that called a tool, and the whole task.
	var j struct {
		Calls []struct {
			Tool   string `json:"tool"`
			State  string `json:"state"`
			Key    string `json:"key"`
			Result *struct {
				Content string `json:"content"`
			} `json:"result"`
		} `json:"calls"`
	}
	if st := adminCall(t, "GET", base+"/"+string(calc.ID)+"/journal", "root-token", &j); st != 200 {
		t.Fatalf("journal: %d", st)
	}
	if len(j.Calls) != 1 || j.Calls[0].Tool != "calc" || j.Calls[0].State != "completed" ||
		j.Calls[0].Result == nil || j.Calls[0].Result.Content != "4" {
		t.Fatalf("journal of calc %+v, want one completed calc call with result 4", j.Calls)
	}
	var whole struct {
		Task    struct{ Status string } `json:"task"`
		History []struct{ Role string } `json:"history"`
		Journal []json.RawMessage       `json:"journal"`
	}
	adminCall(t, "GET", base+"/"+string(calc.ID), "root-token", &whole)
	if whole.Task.Status != "completed" || len(whole.History) < 4 || len(whole.Journal) != 1 {
		t.Fatalf("task view %+v, want completed, its history (user, tool call, tool, answer) and journal", whole)
	}
	if st := adminCall(t, "GET", base+"/"+string(calc.ID)+"/checkpoint", "root-token", &map[string]any{}); st != 404 {
		t.Fatalf("checkpoint of a finished task: %d, want 404", st)
	}
	if st := adminCall(t, "GET", base+"/no-such-task", "root-token", &map[string]any{}); st != 404 {
		t.Fatalf("unknown task: %d, want 404", st)
	}
	if st := adminCall(t, "GET", base+"/no-such-task/journal", "root-token", &map[string]any{}); st != 404 {
		t.Fatalf("journal of an unknown task: %d, want 404", st)
	}

	// Retry: only a failed task; a new task in the same context with the
	// same input.
	var rt struct {
		TaskID    string `json:"taskId"`
		ContextID string `json:"contextId"`
		RetryOf   string `json:"retryOf"`
		Error     string `json:"error"`
	}
	if st := adminCall(t, "POST", base+"/"+string(calc.ID)+"/retry", "root-token", &rt); st != 400 || rt.Error == "" {
		t.Fatalf("retry of a completed task: %d %q, want 400 saying why", st, rt.Error)
	}
	rt.Error = ""
	if st := adminCall(t, "POST", base+"/"+string(failed.ID)+"/retry", "root-token", &rt); st != 202 {
		t.Fatalf("retry: %d %q", st, rt.Error)
	}
	if rt.TaskID == "" || rt.TaskID == string(failed.ID) || rt.ContextID != failed.ContextID || rt.RetryOf != string(failed.ID) {
		t.Fatalf("retry answered %+v, want a new task in context %s", rt, failed.ContextID)
	}
	again := waitTerminal(t, c, rt.TaskID)
	if again.ContextID != failed.ContextID || len(again.History) == 0 || partsText(again.History[0].Parts) != "fail" {
		t.Fatalf("retried task: context %s, history %v; want context %s opening with the input \"fail\"",
			again.ContextID, historyText(again), failed.ContextID)
	}
	if again.Status.State != a2a.TaskStateFailed {
		t.Fatalf("retried task %s, want failed again (the scripted model always fails this input)", again.Status.State)
	}
	if st := adminCall(t, "GET", base+"/"+string(failed.ID), "root-token", &whole); st != 200 || whole.Task.Status != "failed" {
		t.Fatalf("the retried task is %q (%d), want it still failed", whole.Task.Status, st)
	}

	// Cancel a running task of any owner; a finished task is not cancelable.
	slow := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("SLOW 30s"),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	for {
		l = adminTaskList{}
		adminCall(t, "GET", base+"?state=working", "root-token", &l)
		if l.ids()[string(slow.ID)] == "working" {
			if !l.Tasks[0].Running {
				t.Fatalf("working task listed as not running: %+v", l.Tasks)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var cn struct {
		Task struct {
			Status string `json:"status"`
		} `json:"task"`
		Error string `json:"error"`
	}
	if st := adminCall(t, "POST", base+"/"+string(slow.ID)+"/cancel", "root-token", &cn); st != 200 || cn.Task.Status != "canceled" {
		t.Fatalf("cancel: %d %+v, want the task canceled", st, cn)
	}
	if got := waitTerminal(t, c, string(slow.ID)); got.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("canceled task reads %s", got.Status.State)
	}
	cn.Error = ""
	if st := adminCall(t, "POST", base+"/"+string(calc.ID)+"/cancel", "root-token", &cn); st < 400 || cn.Error == "" {
		t.Fatalf("cancel of a completed task: %d %+v, want an error", st, cn)
	}
}

func partsText(ps a2a.ContentParts) string {
	var sb strings.Builder
	for _, p := range ps {
		sb.WriteString(p.Text())
	}
	return sb.String()
}

func historyText(t *a2a.Task) []string {
	var out []string
	for _, m := range t.History {
		out = append(out, string(m.Role)+": "+partsText(m.Parts))
	}
	return out
}
