// Command model is a test model plugin. It answers by the last user message:
// "stream N" streams N deltas, "sleep" streams one delta a second until
// cancelled, "transcript" answers with every message it was given, "flaky"
// fails with a transient error, "broken" with a permanent one; anything
// else is echoed back.
package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/looopy-go/looopy/pdk"
)

func init() {
	pdk.Model(func(ctx context.Context, req *pdk.ModelRequest, delta func(pdk.Delta) error) (*pdk.ModelResponse, error) {
		last := ""
		for _, m := range req.Messages {
			if m.Role == pdk.RoleUser {
				last = m.Content
			}
		}
		var out strings.Builder
		switch {
		case strings.HasPrefix(last, "stream "):
			n, _ := strconv.Atoi(strings.TrimPrefix(last, "stream "))
			for i := range n {
				piece := fmt.Sprintf("t%d ", i)
				out.WriteString(piece)
				if err := delta(pdk.Delta{Content: piece}); err != nil {
					return nil, err
				}
			}
		case last == "sleep":
			for i := 0; ; i++ {
				if err := delta(pdk.Delta{Content: "."}); err != nil {
					return nil, err
				}
				time.Sleep(time.Second)
			}
		case last == "transcript":
			// every message the guest sees, with its tool calls and metadata
			for _, m := range req.Messages {
				fmt.Fprintf(&out, "%s:%s", m.Role, m.Content)
				for _, c := range m.ToolCalls {
					fmt.Fprintf(&out, "[%s %s]", c.Name, c.Arguments)
				}
				if len(m.Metadata) > 0 {
					fmt.Fprintf(&out, "%v", m.Metadata)
				}
				out.WriteString("|")
			}
		case last == "flaky":
			return nil, &pdk.Error{Code: "rate_limit", Message: "slow down", Transient: true}
		case last == "broken":
			return nil, &pdk.Error{Code: "invalid_request", Message: "cannot answer that"}
		default:
			out.WriteString("echo: " + last)
		}
		return &pdk.ModelResponse{
			Message:      pdk.Message{Role: pdk.RoleAssistant, Content: out.String()},
			FinishReason: pdk.FinishStop,
			Usage:        pdk.Usage{PromptTokens: len(req.Messages), CompletionTokens: 1, TotalTokens: len(req.Messages) + 1},
		}, nil
	})
}

func main() {}
