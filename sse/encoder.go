package sse

import (
	"encoding/json"
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/loop"
)

// LooopyEncoder writes Looopy's own frames: the event name is the event's
// kind and the data its JSON, as the log holds it.
type LooopyEncoder struct{}

// Encode implements Encoder.
func (LooopyEncoder) Encode(it Item) (Frame, bool, error) {
	if it.Kind == "" {
		return Frame{}, false, nil
	}
	return Frame{Event: string(it.Kind), Data: it.Data}, true, nil
}

// rpcResponse is a JSON-RPC 2.0 success response: A2A's SSE frames over
// JSON-RPC are responses to the streaming request, each with its id.
type rpcResponse struct {
	JSONRPC string `json:"jsonrpc"`
	ID      any    `json:"id"`
	Result  any    `json:"result"`
}

// A2AEncoder writes A2A 1.0 frames: each data is a JSON-RPC response to the
// streaming request (SendStreamingMessage, SubscribeToTask) whose result is
// a StreamResponse ({"task"|"statusUpdate"|"artifactUpdate": …}), mapped by
// ToA2A. Frames have no event name, as A2A's own server writes them; the
// stream ends after a final status (FinalA2A).
type A2AEncoder struct {
	// RequestID is the id of the JSON-RPC request (a string, a number, or
	// a json.RawMessage as received).
	RequestID any
}

// Encode implements Encoder.
func (e A2AEncoder) Encode(it Item) (Frame, bool, error) {
	ev, err := loop.DecodeEvent(it.Data)
	if err != nil {
		return Frame{}, false, err
	}
	a, ok := ToA2A(ev)
	if !ok {
		return Frame{}, false, nil
	}
	data, err := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: e.RequestID, Result: a2a.StreamResponse{Event: a}})
	if err != nil {
		return Frame{}, false, fmt.Errorf("encode A2A %T: %w", a, err)
	}
	return Frame{Data: data, Last: FinalA2A(a)}, true, nil
}

// A2A03Encoder writes A2A 0.3 frames: JSON-RPC responses to message/stream
// or tasks/resubscribe whose result is the event with its "kind", mapped by
// ToA2A03; the stream ends after a status with final true.
type A2A03Encoder struct {
	RequestID any
}

// Encode implements Encoder.
func (e A2A03Encoder) Encode(it Item) (Frame, bool, error) {
	ev, err := loop.DecodeEvent(it.Data)
	if err != nil {
		return Frame{}, false, err
	}
	a, ok := ToA2A03(ev)
	if !ok {
		return Frame{}, false, nil
	}
	data, err := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: e.RequestID, Result: a})
	if err != nil {
		return Frame{}, false, fmt.Errorf("encode A2A 0.3 %T: %w", a, err)
	}
	return Frame{Data: data, Last: FinalA2A03(a)}, true, nil
}

// Interface guards.
var (
	_ Encoder = LooopyEncoder{}
	_ Encoder = A2AEncoder{}
	_ Encoder = A2A03Encoder{}
)
