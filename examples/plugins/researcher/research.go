package main

import (
	"fmt"

	"github.com/looopy-go/looopy/pdk"
)

// SystemPrompt is what the researcher tells the model it is.
const SystemPrompt = "You are a researcher working for another agent. Use the tools you are given " +
	"(fetch pages, read files, calculate) to find facts, then answer in a few sentences, citing what you used."

// TaskPrefix frames the task the parent hands over as the researcher's
// question to the model.
const TaskPrefix = "Research this and answer briefly: "

// DefaultMaxRounds bounds the model calls of one run.
const DefaultMaxRounds = 5

// Env is what a run needs from the host: its model and its tools.
type Env struct {
	Model    func(req *pdk.ModelRequest) (*pdk.ModelResponse, error)
	Tool     func(call pdk.ToolCall) (*pdk.ToolResult, error)
	Progress func(message string) // may be nil
}

// Research runs the sub-agent: it asks the model, runs the tool calls the
// model asks for (one at a time, in order) and asks again with their results,
// until the model answers without tool calls or maxRounds model calls were
// made. A tool that fails becomes an error result the model reads; a model
// that fails ends the run with its error.
func Research(req *pdk.AgentRequest, env Env, maxRounds int) (*pdk.AgentResponse, error) {
	if maxRounds <= 0 {
		maxRounds = DefaultMaxRounds
	}
	last := -1
	for i, m := range req.Messages {
		if m.Role == pdk.RoleUser {
			last = i
		}
	}
	if last < 0 {
		return nil, &pdk.Error{Code: pdk.CodeBadInput, Message: "the researcher got no task (no user message)"}
	}
	msgs := []pdk.Message{{Role: pdk.RoleSystem, Content: SystemPrompt}}
	for i, m := range req.Messages {
		if i == last {
			m.Content = TaskPrefix + m.Content
		}
		msgs = append(msgs, m)
	}
	out := &pdk.AgentResponse{}
	for round := 1; round <= maxRounds; round++ {
		progress(env, fmt.Sprintf("round %d: asking the model", round))
		resp, err := env.Model(&pdk.ModelRequest{Messages: msgs, Tools: req.Tools})
		if err != nil {
			return nil, fmt.Errorf("round %d: model: %w", round, err)
		}
		out.Usage = out.Usage.Add(resp.Usage)
		reply := resp.Message
		reply.Role = pdk.RoleAssistant
		msgs = append(msgs, reply)
		out.Messages = append(out.Messages, reply)
		if len(reply.ToolCalls) == 0 {
			out.Content = reply.Content
			return out, nil
		}
		for _, call := range reply.ToolCalls {
			progress(env, fmt.Sprintf("round %d: running %s", round, call.Name))
			tm := pdk.Message{Role: pdk.RoleTool, ToolCallID: call.ID, Name: call.Name}
			res, err := env.Tool(call)
			switch {
			case err != nil:
				tm.Content = fmt.Sprintf("tool %s failed: %v", call.Name, err)
			case res == nil:
				tm.Content = fmt.Sprintf("tool %s returned nothing", call.Name)
			default:
				tm.Content = res.Content
			}
			msgs = append(msgs, tm)
			out.Messages = append(out.Messages, tm)
		}
	}
	return nil, &pdk.Error{Code: "max_iterations", Message: fmt.Sprintf("no answer after %d model calls", maxRounds)}
}

func progress(env Env, msg string) {
	if env.Progress != nil {
		env.Progress(msg)
	}
}
