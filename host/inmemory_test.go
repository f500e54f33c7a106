package host_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// An in-memory host keeps its conversations, tasks and event streams in
// the map store: it serves a turn, remembers the conversation, streams a
// task whose record then holds what was streamed, and writes no database
// to its data folder.
func TestInMemoryHostServes(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.InMemory = true
	h := startHost(t, cfg)
	c := client10(t, h.URL(), "")
	ctx := context.Background()

	first := send(t, c, ctx, &a2a.SendMessageRequest{Message: userMsg("apples")})
	if first.Status.State != a2a.TaskStateCompleted || artifactText(first) != "You said: apples" {
		t.Fatalf("first turn: %s %q", first.Status.State, artifactText(first))
	}
	m := userMsg("pears")
	m.ContextID = first.ContextID
	second := send(t, c, ctx, &a2a.SendMessageRequest{Message: m})
	if got := artifactText(second); got != "You said: apples | pears" {
		t.Fatalf("second answer %q does not remember the first turn", got)
	}
	got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: first.ID})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.Status.State != a2a.TaskStateCompleted || artifactText(got) != "You said: apples" || len(got.History) != 2 {
		t.Fatalf("stored task: %s %q, %d messages", got.Status.State, artifactText(got), len(got.History))
	}

	var chunks []string
	var taskID a2a.TaskID
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("help")}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if au, ok := ev.(*a2a.TaskArtifactUpdateEvent); ok && !au.LastChunk {
			chunks = append(chunks, au.Artifact.Parts[0].Text())
			taskID = au.TaskID
		}
	}
	if len(chunks) < 3 {
		t.Fatalf("%d delta chunks, want several", len(chunks))
	}
	streamed, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: taskID})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got := artifactText(streamed); got != strings.Join(chunks, "") {
		t.Fatalf("stored text %q, streamed %q", got, strings.Join(chunks, ""))
	}
	err = filepath.WalkDir(cfg.DataDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".vlog") || strings.HasSuffix(p, ".sst") || filepath.Base(p) == "MANIFEST") {
			t.Errorf("in-memory host wrote %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
