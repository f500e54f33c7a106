// Command agent is a test sub-agent plugin: it calls the first tool the host
// lends it with the prompt as {"text": prompt}, then asks the host's model to
// sum up, and answers with both.
package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/looopy-go/looopy/pdk"
)

func init() {
	pdk.Agent(&pdk.ToolDefinition{Name: "researcher", Description: "Researches a question."},
		func(ctx context.Context, req *pdk.AgentRequest) (*pdk.AgentResponse, error) {
			if len(req.Tools) == 0 {
				return nil, errors.New("no tools lent")
			}
			prompt := req.Messages[len(req.Messages)-1].Content
			args, _ := json.Marshal(map[string]string{"text": prompt})
			res, err := pdk.CallTool(ctx, pdk.ToolCall{Name: req.Tools[0].Name, Arguments: args})
			if err != nil {
				return nil, err
			}
			resp, err := pdk.CallModel(ctx, &pdk.ModelRequest{Messages: []pdk.Message{{Role: pdk.RoleUser, Content: "sum up: " + res.Content}}})
			if err != nil {
				return nil, err
			}
			return &pdk.AgentResponse{Content: "tool said " + res.Content + "; model said " + resp.Message.Content}, nil
		})
}

func main() {}
