package loop_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

func TestEveryKindRoundTrips(t *testing.T) {
	for _, k := range loop.AllKinds() {
		e := loop.NewEvent(k)
		if e == nil {
			t.Fatalf("NewEvent(%q) = nil", k)
		}
		h := e.Head()
		h.ContextID, h.TaskID, h.Timestamp = "c", "t", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		data, err := loop.EncodeEvent(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := loop.DecodeEvent(data)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if back.Head().Kind != k || back.Head().TaskID != "t" || !back.Head().Timestamp.Equal(h.Timestamp) {
			t.Fatalf("%s came back as %+v", k, back.Head())
		}
		if want := len(k) > 9 && k[:9] == "internal:"; k.Internal() != want {
			t.Fatalf("%s.Internal() = %v", k, k.Internal())
		}
	}
	if len(loop.AllKinds()) != 22 {
		t.Fatalf("protocol has %d kinds, want 22", len(loop.AllKinds()))
	}
}

func TestDecodeEventErrors(t *testing.T) {
	for _, in := range []string{``, `{`, `{"kind":"nope"}`, `{}`, `{"kind":"tool-start","toolCallId":5}`, `[]`} {
		if _, err := loop.DecodeEvent([]byte(in)); err == nil {
			t.Fatalf("DecodeEvent(%q) accepted", in)
		}
	}
	e, err := loop.DecodeEvent([]byte(`{"kind":"tool-complete","taskId":"t1","toolCallId":"c","toolName":"calc","success":true,"result":"4"}`))
	if err != nil {
		t.Fatal(err)
	}
	tc, ok := e.(*loop.ToolComplete)
	if !ok || tc.Result != "4" || !tc.Success || tc.TaskID != "t1" {
		t.Fatalf("decoded %#v", e)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, k := range loop.AllKinds() {
		data, _ := json.Marshal(loop.NewEvent(k))
		f.Add(data)
	}
	f.Add([]byte(`{"kind":"dataset-write","rows":[{"a":1}],"schema":{"columns":[{"name":"a","type":"number"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := loop.DecodeEvent(data)
		if err != nil {
			return
		}
		again, err := loop.EncodeEvent(e)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := loop.DecodeEvent(again); err != nil {
			t.Fatalf("decode of re-encoded %s: %v", again, err)
		}
	})
}
