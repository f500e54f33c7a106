package host

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/loop/jsonlimit"
)

func TestDecodeRPCRequest(t *testing.T) {
	cases := []struct {
		body   string
		want   error
		method string
		id     string
	}{
		{`{"jsonrpc":"2.0","id":"a","method":"GetTask","params":{"id":"x"}}`, nil, "GetTask", `"a"`},
		{`{"jsonrpc":"2.0","id":7,"method":"ListTasks"}`, nil, "ListTasks", `7`},
		{`{"jsonrpc":"2.0","method":"ListTasks","params":null}`, nil, "ListTasks", `null`},
		{``, a2a.ErrInvalidRequest, "", `null`},
		{`{`, a2a.ErrParseError, "", `null`},
		{`"str"`, a2a.ErrInvalidRequest, "", `null`},
		{`[{"jsonrpc":"2.0"}]`, a2a.ErrInvalidRequest, "", `null`},
		{`{"jsonrpc":"2.0","id":true,"method":"X"}`, a2a.ErrInvalidRequest, "", `null`},
		{`{"jsonrpc":2,"id":1,"method":"X"}`, a2a.ErrInvalidRequest, "", `1`},
		{`{"jsonrpc":"2.0","id":1,"method":""}`, a2a.ErrInvalidRequest, "", `1`},
		{`{"jsonrpc":"2.0","id":1,"method":5}`, a2a.ErrInvalidRequest, "", `1`},
		{`{"jsonrpc":"2.0","id":1,"method":"X","params":"p"}`, a2a.ErrInvalidParams, "X", `1`},
	}
	for _, tc := range cases {
		req, err := decodeRPCRequest([]byte(tc.body))
		if !errors.Is(err, tc.want) && !(err == nil && tc.want == nil) {
			t.Errorf("%q: error %v, want %v", tc.body, err, tc.want)
		}
		if string(req.ID) != tc.id {
			t.Errorf("%q: id %s, want %s", tc.body, req.ID, tc.id)
		}
		if tc.want == nil && req.Method != tc.method {
			t.Errorf("%q: method %q, want %q", tc.body, req.Method, tc.method)
		}
	}
}

func TestErrorTable(t *testing.T) {
	for _, row := range errorTable {
		if got := lookupError(row.err); got.code != row.code {
			t.Errorf("%v: code %d, want %d (an earlier row shadows it)", row.err, got.code, row.code)
		}
	}
	if RPCCode(errors.New("boom")) != -32603 || HTTPStatus(errors.New("boom")) != 500 {
		t.Error("an unknown error is not internal")
	}
	if e := toRPCError10(errors.New("secret path /var/x")); e.Message != "internal error" {
		t.Errorf("internal error text leaks: %q", e.Message)
	}
}

// FuzzDecodeRPC feeds any body through the JSON-RPC decoding and the
// params of every method of both versions: it must never panic.
func FuzzDecodeRPC(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t","historyLength":3}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":2,"status":"TASK_STATE_WORKING"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[{"data":{"a":[1,2]}},{"raw":"AAE="},{"url":"x"}]}}}`,
		`[]`, `{`, `null`, `{"id":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRPCRequest(body)
		if err != nil {
			if toRPCError10(err).Code == -32603 {
				t.Fatalf("decode error %v maps to internal", err)
			}
			return
		}
		var send a2a.SendMessageRequest
		if decodeParams(req, &send) == nil && send.Message != nil {
			_, _ = toLoopMessage(send.Message)
		}
		_ = decodeParams(req, &a2a.GetTaskRequest{})
		_ = decodeParams(req, &a2a.ListTasksRequest{})
		_ = decodeParams(req, &a2a.CancelTaskRequest{})
		if p, err := sendParams03(req); err == nil {
			_, _ = toLoopMessage(p.Message)
		}
		_ = decodeParams(req, &a2a03.TaskQueryParams{})
	})
}

// A request nested past jsonlimit.MaxDepth is refused before anything of it
// is stored (a record holding it a few levels deeper must still decode).
func TestDecodeRPCRequestRefusesDeepNesting(t *testing.T) {
	deep := func(n int) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[{"data":` +
			strings.Repeat("[", n) + strings.Repeat("]", n) + `}]}}}`)
	}
	if _, err := decodeRPCRequest(deep(500)); err != nil {
		t.Fatalf("500 deep refused: %v", err)
	}
	_, err := decodeRPCRequest(deep(jsonlimit.MaxDepth))
	if !errors.Is(err, a2a.ErrInvalidRequest) || !strings.Contains(err.Error(), "nests deeper than 512") {
		t.Fatalf("%d deep: %v", jsonlimit.MaxDepth, err)
	}
}

// A client's schema (an interaction's input schema) is bounded as a
// plugin's is: compile cost grows faster than linearly with nesting.
func TestCompileJSONSchemaRefusesDeepNesting(t *testing.T) {
	n := jsonlimit.SchemaMaxDepth + 1
	_, err := compileJSONSchema(json.RawMessage(strings.Repeat(`{"not":`, n) + `{}` + strings.Repeat(`}`, n)))
	if err == nil || !strings.Contains(err.Error(), "nests deeper than 64") {
		t.Fatalf("%d deep: %v", n, err)
	}
	if _, err := compileJSONSchema(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)); err != nil {
		t.Fatal(err)
	}
}
