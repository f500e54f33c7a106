package sse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/loop"
)

// LooopyEncoder writes Looopy's own frames: the event name is the event's
// kind and the data its JSON, as the log holds it.
type LooopyEncoder struct {
	// ContextScope, when set, is the prefix of the stream's scoped context
	// id (loop.ContextScope): it is removed from the contextId fields, so
	// the client sees the id it knows.
	ContextScope string
}

// Encode implements Encoder.
func (e LooopyEncoder) Encode(it Item) (Frame, bool, error) {
	if it.Kind == "" {
		return Frame{}, false, nil
	}
	data := it.Data
	if e.ContextScope != "" {
		data = bytes.ReplaceAll(data, []byte(`"contextId":"`+e.ContextScope), []byte(`"contextId":"`))
	}
	return Frame{Event: string(it.Kind), Data: data}, true, nil
}

// decodeForClient returns the event of it as a client sees it (its context
// id the one the client knows, loop.ClientContextID): the event kept from
// its publishing, or else its log record decoded.
func decodeForClient(it Item) (loop.Event, error) {
	if it.client != nil {
		return it.client, nil
	}
	data := it.Data
	ev, err := loop.DecodeEvent(data)
	if err != nil {
		return nil, err
	}
	h := ev.Head()
	h.ContextID = loop.ClientContextID(h.ContextID)
	return ev, nil
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
	m, err := memoized(it, func(m *memo) *atomic.Pointer[mapped] { return &m.v1 }, map1)
	if err != nil {
		return Frame{}, false, err
	}
	return rpcFrame(e.RequestID, m)
}

// Wrap returns the data of a frame carrying ev, for events the log does not
// hold (the Task snapshot that opens a SubscribeToTask stream). Write it
// with AppendFrame and id 0, so it does not move the client's Last-Event-ID.
func (e A2AEncoder) Wrap(ev a2a.Event) ([]byte, error) {
	res, err := json.Marshal(a2a.StreamResponse{Event: ev})
	if err != nil {
		return nil, fmt.Errorf("encode A2A %T: %w", ev, err)
	}
	f, _, err := rpcFrame(e.RequestID, &mapped{result: res})
	return f.Data, err
}

func map1(it Item) (*mapped, error) {
	ev, err := decodeForClient(it)
	if err != nil {
		return nil, err
	}
	a, ok := ToA2A(ev)
	if !ok {
		return &mapped{}, nil
	}
	res, err := json.Marshal(a2a.StreamResponse{Event: a})
	if err != nil {
		return nil, fmt.Errorf("encode A2A %T: %w", a, err)
	}
	return &mapped{result: res, last: FinalA2A(a)}, nil
}

// A2A03Encoder writes A2A 0.3 frames: JSON-RPC responses to message/stream
// or tasks/resubscribe whose result is the event with its "kind", mapped by
// ToA2A03; the stream ends after a status with final true.
type A2A03Encoder struct {
	RequestID any
}

// Encode implements Encoder.
func (e A2A03Encoder) Encode(it Item) (Frame, bool, error) {
	m, err := memoized(it, func(m *memo) *atomic.Pointer[mapped] { return &m.v03 }, map03)
	if err != nil {
		return Frame{}, false, err
	}
	return rpcFrame(e.RequestID, m)
}

// Wrap returns the data of a frame carrying ev (see A2AEncoder.Wrap).
func (e A2A03Encoder) Wrap(ev a2a03.Event) ([]byte, error) {
	res, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode A2A 0.3 %T: %w", ev, err)
	}
	f, _, err := rpcFrame(e.RequestID, &mapped{result: res})
	return f.Data, err
}

func map03(it Item) (*mapped, error) {
	ev, err := decodeForClient(it)
	if err != nil {
		return nil, err
	}
	a, ok := ToA2A03(ev)
	if !ok {
		return &mapped{}, nil
	}
	res, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("encode A2A 0.3 %T: %w", a, err)
	}
	return &mapped{result: res, last: FinalA2A03(a)}, nil
}

// memo holds the A2A encodings of one event of the tail, computed by the
// first subscriber that needs them and reused by the others: fan-out to
// many A2A subscribers maps and marshals each event once.
type memo struct {
	v1, v03 atomic.Pointer[mapped]
}

// mapped is the JSON of a JSON-RPC result (nil: not carried by the
// protocol) and whether it ends the stream.
type mapped struct {
	result []byte
	last   bool
}

func memoized(it Item, slot func(*memo) *atomic.Pointer[mapped], compute func(Item) (*mapped, error)) (*mapped, error) {
	if it.memo != nil {
		if m := slot(it.memo).Load(); m != nil {
			return m, nil
		}
	}
	m, err := compute(it)
	if err != nil {
		return nil, err
	}
	if it.memo != nil {
		slot(it.memo).Store(m)
	}
	return m, nil
}

// rpcFrame wraps a result in a JSON-RPC 2.0 success response: A2A's SSE
// frames over JSON-RPC are responses to the streaming request, each with
// the request's id.
func rpcFrame(id any, m *mapped) (Frame, bool, error) {
	if m.result == nil {
		return Frame{}, false, nil
	}
	data, err := appendRPC(nil, id, m.result)
	if err != nil {
		return Frame{}, false, err
	}
	return Frame{Data: data, Last: m.last}, true, nil
}

// appendRPC appends {"jsonrpc":"2.0","id":<id>,"result":<result>} to dst,
// on one line.
func appendRPC(dst []byte, id any, result []byte) ([]byte, error) {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	switch v := id.(type) {
	case nil:
		dst = append(dst, "null"...)
	case int:
		dst = strconv.AppendInt(dst, int64(v), 10)
	case int64:
		dst = strconv.AppendInt(dst, v, 10)
	case string:
		if plainASCII(v) {
			dst = append(append(append(dst, '"'), v...), '"')
			break
		}
		b, err := json.Marshal(v)
		if err != nil {
			return dst, fmt.Errorf("encode JSON-RPC id: %w", err)
		}
		dst = append(dst, b...)
	case json.RawMessage:
		if !json.Valid(v) {
			return dst, fmt.Errorf("encode JSON-RPC id %q: not JSON", v)
		}
		if bytes.ContainsAny(v, "\r\n") {
			var buf bytes.Buffer
			_ = json.Compact(&buf, v) // valid, so it compacts
			v = buf.Bytes()
		}
		dst = append(dst, v...)
	default:
		b, err := json.Marshal(id)
		if err != nil {
			return dst, fmt.Errorf("encode JSON-RPC id %v: %w", id, err)
		}
		dst = append(dst, b...)
	}
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}'), nil
}

// plainASCII reports whether s needs no escaping in a JSON string.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// dataAppender is implemented by the encoders whose frame data Serve can
// build in its own buffer, without an allocation per frame. The data must
// be one line.
type dataAppender interface {
	appendData(dst []byte, it Item) (out []byte, ok, last bool, err error)
}

func (e A2AEncoder) appendData(dst []byte, it Item) ([]byte, bool, bool, error) {
	m, err := memoized(it, func(m *memo) *atomic.Pointer[mapped] { return &m.v1 }, map1)
	if err != nil || m.result == nil {
		return dst, false, false, err
	}
	dst, err = appendRPC(dst, e.RequestID, m.result)
	return dst, err == nil, m.last, err
}

func (e A2A03Encoder) appendData(dst []byte, it Item) ([]byte, bool, bool, error) {
	m, err := memoized(it, func(m *memo) *atomic.Pointer[mapped] { return &m.v03 }, map03)
	if err != nil || m.result == nil {
		return dst, false, false, err
	}
	dst, err = appendRPC(dst, e.RequestID, m.result)
	return dst, err == nil, m.last, err
}

// Interface guards.
var (
	_ Encoder = LooopyEncoder{}
	_ Encoder = A2AEncoder{}
	_ Encoder = A2A03Encoder{}

	_ dataAppender = A2AEncoder{}
	_ dataAppender = A2A03Encoder{}
)
