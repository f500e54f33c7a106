package pdk

import (
	"bytes"
	"encoding/json"
	"testing"
)

// For every request whose arguments are valid JSON, AppendToolCallRequest
// writes what json.Marshal writes, byte for byte.
func FuzzAppendToolCallRequest(f *testing.F) {
	for _, s := range [][5]string{
		{"c1", "echo", `{"text":"hello, world"}`, "ctx", "task"},
		{"", "", ``, "", ""},
		{"c\u2028", "n<>&", "{\n  \"a\" : [1, 2.5e3, true, null],\t\"b\":{}\r}", "", "t"},
		{"\xff", "é", `"<b>&amp;\u2028\u2029 \"q\" \\"`, "c", ""},
		{"x", "y", ` [ ] `, "", ""},
		{"x", "y", `   `, "", ""},
		{"x", "y", `{"a":"unclosed}`, "", ""},
		{"x", "y", `{"a":1}}`, "", ""},
		{"x", "y", "\"tab\tin\"", "", ""},
		{"x", "y", `{"s":"\u00e9\/\n"}`, "", ""},
		{"x", "y", "\"\xe2\x80\xa8\xe2\x80\"", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, id, name, args, contextID, taskID string) {
		req := ToolCallRequest{Call: ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}, ContextID: contextID, TaskID: taskID}
		want, err := json.Marshal(&req)
		got, ok := AppendToolCallRequest([]byte("prefix"), &req)
		if err != nil {
			if ok && json.Valid([]byte(args)) {
				t.Fatalf("%q: json.Marshal refuses it (%v), written as %s", args, err, got)
			}
			return
		}
		if !ok {
			t.Fatalf("%q: declined, json.Marshal writes %s", args, want)
		}
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("%q:\n got %s\nwant %s", args, got[len("prefix"):], want)
		}
	})
}
