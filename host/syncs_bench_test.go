package host_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// toolThenAnswer asks for one tool call, then answers.
type toolThenAnswer struct{}

func (toolThenAnswer) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	if req.Messages[len(req.Messages)-1].Role == loop.RoleTool {
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "done"}, FinishReason: loop.FinishStop}, nil
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		ToolCalls: []loop.ToolCall{{ID: "c1", Name: "noop", Arguments: []byte(`{}`)}}}, FinishReason: loop.FinishToolCalls}, nil
}

// streamedText streams 40 pieces of text 2 ms apart, as a model
// generating, then answers them.
type streamedText struct{}

func (streamedText) Generate(ctx context.Context, _ *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
	var text strings.Builder
	for i := range 40 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		piece := fmt.Sprintf(" w%d", i)
		onDelta(loop.Delta{Content: piece})
		text.WriteString(piece)
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: text.String()}, FinishReason: loop.FinishStop}, nil
}

type noopTools struct{}

func (noopTools) Tools(context.Context) ([]loop.ToolDefinition, error) {
	return []loop.ToolDefinition{{Name: "noop", Description: "does nothing"}}, nil
}
func (noopTools) Call(_ context.Context, c loop.ToolCall, _ *loop.ToolEnv) (loop.ToolResult, error) {
	return loop.ToolResult{ToolCallID: c.ID, Content: "ok"}, nil
}

// BenchmarkSyncsPerTask counts the synced writes (Badger commits) of one
// task with one tool call, from the request to the release of its lease,
// for a blocking SendMessage, a streamed one and one with
// returnImmediately. Tasks run one at a time, so no group commit merges
// two tasks' writes; syncs/task is the figure, syncs-to-answer/task the
// commits made before the SendMessage answer reached the client (the
// blocking answer's path; with returnImmediately, the acknowledgement's),
// reads-to-answer/task the store's reads in that time. "streamed-text" is
// a streamed task whose model streams 40 pieces of text 2 ms apart and
// calls no tool: each piece is an event of the task's stream and of its
// context's; it also reports the commits made before the client's first
// text (syncs-to-first-text/task) and between its last text and the final
// status (syncs-after-last-text/task: the synced writes the end of a turn
// waits for).
func BenchmarkSyncsPerTask(b *testing.B) {
	for _, leases := range []bool{true, false} {
		for _, mode := range []string{"SendMessage", "streaming", "returnImmediately", "streamed-text"} {
			b.Run(fmt.Sprintf("%s/leases=%v", mode, leases), func(b *testing.B) {
				st, err := store.Open(store.Options{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				var model loop.Model = toolThenAnswer{}
				if mode == "streamed-text" {
					model = streamedText{}
				}
				opts := host.Options{Model: model, Toolsets: []loop.Toolset{noopTools{}},
					Stores: host.Stores{Messages: st, Agents: st, Tasks: st, Events: st.Events(), Commit: st,
						Checkpoints: st, Journal: st, Durable: st, KV: st}}
				if leases {
					opts.Stores.Leases, opts.Stores.TaskLeases = st, st
				}
				srv, err := host.NewServer(host.Config{}, opts)
				if err != nil {
					b.Fatal(err)
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				go func() { _ = srv.Serve(ln) }()
				defer func() { _ = srv.Shutdown(context.Background()) }()
				url := "http://" + ln.Addr().String()
				c := benchClient(b, url)
				ctx := context.Background()
				// settled waits until the task's lease is gone: its last write.
				settled := func(id string) {
					if !leases {
						time.Sleep(20 * time.Millisecond) // the stream's expiry, its last write
						return
					}
					for deadline := time.Now().Add(30 * time.Second); ; {
						leases, err := st.ListLeases(ctx)
						if err != nil {
							b.Fatal(err)
						}
						held := false
						for _, l := range leases {
							held = held || l.Key == id
						}
						if !held {
							return
						}
						if time.Now().After(deadline) {
							b.Fatalf("task %s never settled", id)
						}
						time.Sleep(time.Millisecond)
					}
				}
				var commits, toAnswer, reads, toText, afterText int64
				keysBefore, bytesBefore := st.Mutations(), st.WrittenBytes()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					before, readsBefore := st.Commits(), st.Reads()
					msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("go"))
					var id string
					switch mode {
					case "SendMessage", "returnImmediately":
						cfg := &a2a.SendMessageConfig{ReturnImmediately: mode == "returnImmediately"}
						r, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg, Config: cfg})
						if err != nil {
							b.Fatal(err)
						}
						toAnswer += st.Commits() - before
						reads += st.Reads() - readsBefore
						id = string(r.(*a2a.Task).ID)
					case "streaming", "streamed-text":
						var first, last int64 = -1, -1 // commits when the first and the last text arrived
						for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: msg}) {
							if err != nil {
								b.Fatal(err)
							}
							switch e := ev.(type) {
							case *a2a.Task:
								id = string(e.ID)
							case *a2a.TaskArtifactUpdateEvent:
								for _, p := range e.Artifact.Parts {
									if p.Text() != "" {
										last = st.Commits()
										if first < 0 {
											first = last
										}
									}
								}
							case *a2a.TaskStatusUpdateEvent:
								if e.Status.State.Terminal() && last >= 0 {
									toText += first - before
									afterText += st.Commits() - last
								}
							}
						}
					}
					for {
						t, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(id)})
						if err != nil {
							b.Fatal(err)
						}
						if t.Status.State.Terminal() {
							break
						}
						time.Sleep(time.Millisecond)
					}
					settled(id)
					commits += st.Commits() - before
				}
				b.ReportMetric(float64(commits)/float64(b.N), "syncs/task")
				// What the group commits wrote (keys, and their size as the
				// store estimates it), the expiries' included.
				b.ReportMetric(float64(st.Mutations()-keysBefore)/float64(b.N), "keys-written/task")
				b.ReportMetric(float64(st.WrittenBytes()-bytesBefore)/float64(b.N), "bytes-written/task")
				if mode == "streamed-text" {
					// The synced writes the client's first text waited
					// for (from the request on), and those between the
					// last text and the final status (the turn's end).
					b.ReportMetric(float64(toText)/float64(b.N), "syncs-to-first-text/task")
					b.ReportMetric(float64(afterText)/float64(b.N), "syncs-after-last-text/task")
				}
				if mode != "streaming" && mode != "streamed-text" {
					b.ReportMetric(float64(toAnswer)/float64(b.N), "syncs-to-answer/task")
					// Store reads before the answer (the task's lease and
					// GetTask polling come after it).
					b.ReportMetric(float64(reads)/float64(b.N), "reads-to-answer/task")
				}
			})
		}
	}
}
