// Command xcred is a test plugin built with Extism's Go PDK (the Extism ABI)
// that asks the host for credentials through looopy.credential: its tool
// xprofile needs a token of example-oauth, xwhoami the caller's own. Each
// answers with the token's length and digest, never the token.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/extism/go-pdk"
)

//go:wasmimport looopy credential
func hostCredential(req uint64) uint64

//go:wasmexport describe
func describe() int32 {
	pdk.OutputString(`{"kind":"tool","tools":[` +
		`{"name":"xprofile","description":"Reads a profile with a token of example-oauth.","parameters":{"type":"object"}},` +
		`{"name":"xwhoami","description":"Says who the caller is.","parameters":{"type":"object"}},` +
		`{"name":"xraw","description":"Sends its request to the credential function as it is.","parameters":{"type":"object","properties":{"raw":{"type":"string"}},"required":["raw"]}}]}`)
	return 0
}

type answer struct {
	Credential *struct {
		Provider  string `json:"provider"`
		Token     string `json:"token"`
		Principal string `json:"principal"`
	} `json:"credential"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func ask(req []byte) (answer, error) {
	mem := pdk.AllocateBytes(req)
	off := hostCredential(mem.Offset())
	mem.Free()
	var a answer
	if off == 0 {
		return a, fmt.Errorf("no answer")
	}
	out := pdk.FindMemory(off)
	b := out.ReadBytes()
	out.Free()
	return a, json.Unmarshal(b, &a)
}

func digest(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])[:12]
}

//go:wasmexport call_tool
func callTool() int32 {
	var req struct {
		Call struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"call"`
	}
	if err := json.Unmarshal(pdk.Input(), &req); err != nil {
		pdk.SetError(err)
		return 1
	}
	var ask1 []byte
	switch req.Call.Name {
	case "xprofile":
		ask1 = []byte(`{"provider":"example-oauth","scopes":["profile:read"],"authUrl":"https://auth.example.test/authorize","authType":"oauth2"}`)
	case "xwhoami":
		ask1 = []byte(`{"provider":"caller"}`)
	default:
		var args struct {
			Raw string `json:"raw"`
		}
		_ = json.Unmarshal(req.Call.Arguments, &args)
		ask1 = []byte(args.Raw)
	}
	a, err := ask(ask1)
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	if a.Error != nil {
		b, _ := json.Marshal(map[string]string{"code": a.Error.Code, "message": a.Error.Message})
		pdk.SetErrorString(string(b))
		return 1
	}
	if a.Credential == nil {
		pdk.SetErrorString(`{"code":"internal_error","message":"an answer with neither credential nor error"}`)
		return 1
	}
	c := a.Credential
	out, _ := json.Marshal(map[string]any{"content": fmt.Sprintf("%s token of %d bytes (sha256 %s) principal %q",
		c.Provider, len(c.Token), digest(c.Token), c.Principal)})
	pdk.Output(out)
	return 0
}

func main() {}
