//go:build wasip1

package pdk

import (
	"context"
	"encoding/json"
	"fmt"
)

// The dispatcher behind the wasm exports: only a guest build calls it.

func describe() ([]byte, error) {
	d := Describe{Name: registry.name, Version: registry.version}
	switch {
	case registry.generate != nil:
		d.Kind = KindModel
		d.Features = append(d.Features, FeatureToolsRef, FeatureHistoryRef)
	case registry.run != nil:
		d.Kind = KindAgent
		d.Agent = registry.agentTool
	default:
		d.Kind = KindTool
	}
	for _, n := range registry.order {
		d.Tools = append(d.Tools, registry.tools[n].def)
	}
	return json.Marshal(d)
}

func callTool(ctx context.Context, in []byte) ([]byte, error) {
	req, ok := parseToolCallRequest(in)
	if !ok {
		req = ToolCallRequest{}
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, &Error{Code: CodeBadInput, Message: "tool call request: " + err.Error()}
		}
	}
	t := registry.tools[req.Call.Name]
	if t == nil {
		return nil, &Error{Code: CodeUnknownTool, Message: fmt.Sprintf("no tool %q", req.Call.Name)}
	}
	ctx = context.WithValue(ctx, metaKey{}, CallMeta{ContextID: req.ContextID, TaskID: req.TaskID, ToolCallID: req.Call.ID})
	res, err := t.call(ctx, req.Call.Arguments)
	if err != nil {
		return nil, err
	}
	res.ToolCallID = req.Call.ID
	return appendToolResult(nil, &res), nil
}

func dispatch(op Op, in []byte) ([]byte, error) {
	ctx := context.Background()
	switch op {
	case OpDescribe:
		return describe()
	case OpToolCall:
		if len(registry.tools) > 0 {
			return callTool(ctx, in)
		}
	case OpGenerate:
		if registry.generate != nil {
			return registry.generate(ctx, in)
		}
	case OpRun:
		if registry.run != nil {
			var probe struct {
				ContextID string `json:"contextId"`
				TaskID    string `json:"taskId"`
			}
			_ = json.Unmarshal(in, &probe)
			ctx = context.WithValue(ctx, metaKey{}, CallMeta{ContextID: probe.ContextID, TaskID: probe.TaskID})
			return registry.run(ctx, in)
		}
	}
	return nil, &Error{Code: CodeUnsupported, Message: "this plugin does not answer " + op.String()}
}

func safeDispatch(op Op, in []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("panic: %v", r)}
		}
	}()
	return dispatch(op, in)
}
