package artifacts_test

import (
	"context"
	"testing"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

func TestAgentListsItsContextsArtifacts(t *testing.T) {
	ctx := context.Background()
	arts := artifacts.NewMemory(nil, artifacts.Config{})
	mine, err := arts.Create(ctx, artifacts.Spec{Kind: artifacts.KindFile, TaskID: "t1", ContextID: "ctx-1", Name: "report.md", MimeType: "text/markdown"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := arts.AppendChunk(ctx, mine.ID, []byte("# Report\n"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := arts.Create(ctx, artifacts.Spec{Kind: artifacts.KindFile, TaskID: "t9", ContextID: "ctx-other", Name: "theirs"}); err != nil {
		t.Fatal(err)
	}
	st := store.NewMemory(store.MemoryOptions{})
	defer st.Close()
	l, err := loop.New(loop.Config{Model: nopModel{}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := loop.NewAgent(loop.AgentConfig{ContextID: "ctx-1", Loop: l, Messages: st, Agents: st, Artifacts: arts})
	if err != nil {
		t.Fatal(err)
	}
	list, err := a.Artifacts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != mine.ID || list[0].Name != "report.md" || list[0].Kind != "file" ||
		list[0].Status != "complete" || list[0].Size != int64(len("# Report\n")) || list[0].TaskID != "t1" {
		t.Fatalf("artifacts of ctx-1: %+v", list)
	}
}

type nopModel struct{}

func (nopModel) Generate(context.Context, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) {
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "ok"}}, nil
}
