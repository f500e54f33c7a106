//go:build long

package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestLongApprovalKills kills the real binary (SIGKILL) around approvals:
// while tasks wait, once an approval is stored and before its call runs
// (crash point task-saved), as the approved call writes its ledger line,
// and as the turn that ran it is about to be saved with its final events
// (crash point turn-ending: the call's result is journaled, the turn not
// saved).
// After each restart: a task nobody approved never ran its tool; each
// approved call ran at most once (exactly once unless the kill cut it off
// mid-run, which the journal then reports as interrupted); every task ends
// completed once approved; an approval given again is refused.
func TestLongApprovalKills(t *testing.T) {
	root := t.TempDir()
	bin := hostBinary(t)
	const waiting = 3 // tasks paused before the first approval
	for _, tc := range []struct{ name, crashpoint string }{
		{"while-waiting", ""},
		{"approval-stored", fmt.Sprintf("task-saved:%d", waiting+1)},
		{"as-the-call-writes", ""},
		{"turn-ending", fmt.Sprintf("turn-ending:%d", waiting+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			approvalKill(t, bin, filepath.Join(root, tc.name), tc.name, tc.crashpoint, waiting)
		})
	}
}

func approvalKill(t *testing.T, bin, root, name, crashpoint string, waiting int) {
	plugins := filepath.Join(root, "plugins")
	ledgerData := filepath.Join(root, "ledger-data")
	grantedPlugin(t, plugins, "scripted-model", map[string]any{"script": json.RawMessage(quickScript)}, nil)
	grantedPlugin(t, plugins, "ledger", map[string]any{"dir": ledgerData}, []string{ledgerData})
	if err := os.MkdirAll(ledgerData, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"dataDir":     filepath.Join(root, "data"),
		"pluginDir":   plugins,
		"plugins":     map[string]any{"only": []string{"scripted-model", "ledger"}, "cacheDir": wasmCache, "pathRoots": []string{root}},
		"admin":       map[string]any{"token": crashAdmin},
		"limits":      map[string]any{"heartbeat": "1s", "shutdownGrace": "1s", "turnTimeout": "5m"},
		"interaction": map[string]any{"approval": map[string]any{"tools": []string{"ledger_append"}}},
		"logFormat":   "json",
	}
	config, logf := longHostFiles(t, root, cfg)
	ledgerFile := filepath.Join(ledgerData, "ledger.log")
	ledger := func() map[string]int {
		b, _ := os.ReadFile(ledgerFile)
		out := map[string]int{}
		for _, ln := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if _, entry, ok := strings.Cut(ln, "\t"); ok {
				out[entry]++
			}
		}
		return out
	}
	ctx := context.Background()
	var env []string
	if crashpoint != "" {
		env = append(env, "LOOOPY_CRASHPOINT="+crashpoint)
	}
	p := startProc(t, bin, config, logf, env...)
	c := client10(t, p.base, "")

	type paused struct {
		tag     string
		id      a2a.TaskID
		inputID string
	}
	var tasks []paused
	for i := range waiting {
		tag := fmt.Sprintf("%s-%d", name, i)
		task := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("quick " + tag)})
		r := pausedForApproval(t, task)
		tasks = append(tasks, paused{tag, task.ID, r["inputId"].(string)})
	}
	if n := len(ledger()); n != 0 {
		t.Fatalf("%d calls ran before any approval", n)
	}
	approve := func(c interface {
		SendMessage(context.Context, *a2a.SendMessageRequest) (a2a.SendMessageResult, error)
	}, pt paused) error {
		_, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: answerMsg(pt.id,
			map[string]any{"inputId": pt.inputID, "decision": "approve"})})
		return err
	}

	// The kill, with the first task's approval in flight (or none).
	first := tasks[0]
	switch name {
	case "while-waiting":
		p.kill()
	case "as-the-call-writes":
		go func() { _ = approve(c, first) }()
		awaitLedgerLine(ledgerFile)
		p.kill()
	default: // the host kills itself at its crash point
		exited := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(exited) }()
		_ = approve(c, first)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			p.kill()
			t.Fatalf("the host never reached %s", crashpoint)
		}
	}

	p = startProc(t, bin, config, logf)
	defer p.kill()
	c = client10(t, p.base, "")
	// Nobody approved the others: they still wait, their tool never ran.
	for _, pt := range tasks[1:] {
		got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: pt.id})
		if err != nil {
			t.Fatal(err)
		}
		pausedForApproval(t, got)
		if n := ledger()[pt.tag]; n != 0 {
			t.Fatalf("task %s ran its call %d times unapproved", pt.tag, n)
		}
	}
	// The first: still waiting (killed before its approval), or going on
	// from its stored approval.
	if name == "while-waiting" {
		if err := approve(c, first); err != nil {
			t.Fatalf("approval after the restart: %v", err)
		}
	} else if err := approve(c, first); err == nil {
		t.Errorf("a second approval of %s was accepted after the restart", first.tag)
	}
	for _, pt := range tasks[1:] {
		if err := approve(c, pt); err != nil {
			t.Fatalf("approve %s: %v", pt.tag, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, pt := range tasks {
		for {
			got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: pt.id})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.State == a2a.TaskStateCompleted {
				break
			}
			if got.Status.State.Terminal() || time.Now().After(deadline) {
				t.Fatalf("task %s is %s (%s), want completed", pt.tag, got.Status.State, statusText(got))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	lines := ledger()
	for _, pt := range tasks {
		n := lines[pt.tag]
		switch {
		case n > 1:
			t.Errorf("task %s: its approved call ran %d times", pt.tag, n)
		case n == 0 && !(pt == first && name == "as-the-call-writes"):
			t.Errorf("task %s: its approved call never ran", pt.tag)
		}
	}
	t.Logf("%s: ledger %v", name, lines)
}
