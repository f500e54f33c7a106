// Command xecho is a test plugin built with Extism's Go PDK (the Extism ABI):
// its tool echoes a text, and logs through the host's looopy.log function.
package main

import (
	"encoding/json"

	"github.com/extism/go-pdk"
)

//go:wasmimport looopy log
func hostLog(level uint64, msg uint64)

//go:wasmexport describe
func describe() int32 {
	pdk.OutputString(`{"kind":"tool","tools":[{"name":"xecho","description":"Echoes its text.",` +
		`"parameters":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}]}`)
	return 0
}

type request struct {
	Call struct {
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"call"`
}

//go:wasmexport call_tool
func callTool() int32 {
	var req request
	if err := json.Unmarshal(pdk.Input(), &req); err != nil {
		pdk.SetError(err)
		return 1
	}
	var args struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(req.Call.Arguments, &args); err != nil {
		pdk.SetError(err)
		return 1
	}
	if args.Text == "fail" {
		pdk.SetErrorString(`{"code":"refused","message":"asked to fail"}`)
		return 1
	}
	if args.Text == "log" {
		mem := pdk.AllocateString("logged by xecho")
		hostLog(1, mem.Offset())
		mem.Free()
	}
	out, _ := json.Marshal(map[string]any{"content": args.Text})
	pdk.Output(out)
	return 0
}

func main() {}
