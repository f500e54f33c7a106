package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/looopy-go/looopy/pdk"
)

// schema accepts any arguments object: echo returns whatever it is given.
const schema = `{"type":"object","description":"any JSON object; it comes back unchanged"}`

// Args keeps the arguments object exactly as it arrived.
type Args struct {
	raw json.RawMessage
}

// UnmarshalJSON keeps a copy of the object.
func (a *Args) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("echo arguments must be a JSON object, not %s", b)
	}
	a.raw = append(json.RawMessage(nil), b...)
	return nil
}

// Echo returns the arguments as the result's text and its data.
func Echo(a Args) pdk.ToolResult {
	if len(a.raw) == 0 {
		a.raw = json.RawMessage(`{}`)
	}
	return pdk.ToolResult{Content: string(a.raw), Data: a.raw}
}
