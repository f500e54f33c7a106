package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/loop/jsonlimit"
)

// rpcRequest is a decoded JSON-RPC 2.0 request.
type rpcRequest struct {
	ID     json.RawMessage // the id as sent (a string or a number), or null
	Method string
	Params json.RawMessage // an object, or nil when absent
}

// rpcResponse is a JSON-RPC 2.0 response: Result or Error.
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

var nullID = json.RawMessage("null")

// decodeRPCRequest parses one JSON-RPC 2.0 request. On failure it returns
// the id when it could be read (so the error response can carry it) and an
// error wrapping a2a.ErrParseError, a2a.ErrInvalidRequest or
// a2a.ErrInvalidParams. It never panics, whatever body it is given.
func decodeRPCRequest(body []byte) (rpcRequest, error) {
	req := rpcRequest{ID: nullID}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return req, fmt.Errorf("%w: empty body", a2a.ErrInvalidRequest)
	}
	if !json.Valid(body) {
		var se *json.SyntaxError
		err := json.Unmarshal(body, new(any))
		if errors.As(err, &se) {
			return req, fmt.Errorf("%w: %v at offset %d", a2a.ErrParseError, se, se.Offset)
		}
		return req, fmt.Errorf("%w: body is not valid JSON", a2a.ErrParseError)
	}
	// What a client sends is stored inside the host's own records, a few
	// levels deeper: nesting is bounded far below what a decoder refuses.
	if err := jsonlimit.Check(body, jsonlimit.MaxDepth); err != nil {
		return req, fmt.Errorf("%w: %v", a2a.ErrInvalidRequest, err)
	}
	switch body[0] {
	case '{':
	case '[':
		return req, fmt.Errorf("%w: batch requests are not supported", a2a.ErrInvalidRequest)
	default:
		return req, fmt.Errorf("%w: the request must be a JSON object", a2a.ErrInvalidRequest)
	}
	var env struct {
		JSONRPC json.RawMessage `json:"jsonrpc"`
		Method  json.RawMessage `json:"method"`
		Params  json.RawMessage `json:"params"`
		ID      json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return req, fmt.Errorf("%w: %v", a2a.ErrInvalidRequest, err)
	}
	if id := bytes.TrimSpace(env.ID); len(id) > 0 {
		switch id[0] {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			req.ID = bytes.Clone(id) // kept by streams that outlive the request
		default:
			return req, fmt.Errorf("%w: id must be a string, a number or null", a2a.ErrInvalidRequest)
		}
	}
	var version string
	if err := json.Unmarshal(env.JSONRPC, &version); err != nil || version != "2.0" {
		return req, fmt.Errorf("%w: jsonrpc must be \"2.0\"", a2a.ErrInvalidRequest)
	}
	if err := json.Unmarshal(env.Method, &req.Method); err != nil || req.Method == "" {
		return req, fmt.Errorf("%w: method must be a non-empty string", a2a.ErrInvalidRequest)
	}
	if p := bytes.TrimSpace(env.Params); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if p[0] != '{' {
			return req, fmt.Errorf("%w: params must be an object", a2a.ErrInvalidParams)
		}
		req.Params = p
	}
	return req, nil
}

// decodeParams unmarshals the params of req into v. Missing params, or
// params of the wrong shape, are a2a.ErrInvalidParams.
func decodeParams(req rpcRequest, v any) error {
	if req.Params == nil {
		return fmt.Errorf("%w: %s needs params", a2a.ErrInvalidParams, req.Method)
	}
	if err := json.Unmarshal(req.Params, v); err != nil {
		return fmt.Errorf("%w: %s: %v", a2a.ErrInvalidParams, req.Method, err)
	}
	return nil
}
