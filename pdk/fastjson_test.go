package pdk

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseToolCallRequest(t *testing.T) {
	good := []string{
		`{"call":{"id":"c1","name":"add","arguments":{"a":1,"b":[2,{"c":"}"}]}},"contextId":"ctx","taskId":"t"}`,
		`{"call":{"id":"c1","name":"x","arguments":"str\"ing"}}`,
		`{"call":{"name":"x","arguments":12.5e3},"extra":[1,2,{"z":null}],"taskId":"t"}`,
		` { "call" : { "arguments" : true , "id" : "i" } , "contextId" : "c" } `,
		`{"call":{"name":"x","arguments":null}}`,
		`{}`,
	}
	for _, in := range good {
		got, ok := parseToolCallRequest([]byte(in))
		if !ok {
			t.Errorf("%s: not parsed", in)
			continue
		}
		var want ToolCallRequest
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if got.Call.ID != want.Call.ID || got.Call.Name != want.Call.Name || got.ContextID != want.ContextID || got.TaskID != want.TaskID {
			t.Errorf("%s: got %+v, want %+v", in, got, want)
		}
		var g, w any
		if len(want.Call.Arguments) > 0 {
			if err := json.Unmarshal(got.Call.Arguments, &g); err != nil {
				t.Errorf("%s: arguments %s: %v", in, got.Call.Arguments, err)
			}
			_ = json.Unmarshal(want.Call.Arguments, &w)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s: arguments %s, want %s", in, got.Call.Arguments, want.Call.Arguments)
			}
		}
	}
	// what the fast path declines goes to encoding/json
	for _, in := range []string{
		`{"call":{"id":"c\u0031","name":"x"}}`, `{"call":{"id":"c1",}}`, `{"call":{"arguments":{"a":1}}`,
		`{"call":{"id":"c1"}} x`, `[]`, ``, `{"call":{"arguments":"unterminated}}`, `{"taskId":1}`,
	} {
		if _, ok := parseToolCallRequest([]byte(in)); ok {
			t.Errorf("%s: parsed", in)
		}
	}
}

func TestAppendMatchesEncodingJSON(t *testing.T) {
	strs := []string{"", "plain", `quote " and \ backslash`, "ctl \x00\x01\x1f\n\r\t", "<a&b>", "é ü 日本", "bad \xff utf8 \xc3", "sep \u2028 \u2029", strings.Repeat("x", 300)}
	for _, s := range strs {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Errorf("appendString(%q) = %s, want %s", s, got, want)
		}
		for _, r := range []ToolResult{{Content: s}, {ToolCallID: "id", Content: s, IsError: true, Data: json.RawMessage(`{"k":[1]}`)}} {
			want, _ := json.Marshal(r)
			if got := appendToolResult(nil, &r); string(got) != string(want) {
				t.Errorf("appendToolResult = %s, want %s", got, want)
			}
		}
		for _, d := range []Delta{{Content: s}, {Thought: s}, {Content: s, Thought: "t " + s}, {Content: "c", Thought: s}} {
			want, _ := json.Marshal(d)
			if got := appendDelta(nil, &d); string(got) != string(want) {
				t.Errorf("appendDelta = %s, want %s", got, want)
			}
		}
		for _, e := range []Error{{Message: s}, {Code: "c", Message: s, Transient: true}, {Code: "c", Message: s, Transient: true, RetryAfter: Duration(1500 * time.Millisecond)}} {
			want, _ := json.Marshal(&e)
			if got := appendError(nil, &e); string(got) != string(want) {
				t.Errorf("appendError = %s, want %s", got, want)
			}
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("a\"b\\c\x00\u2028\xff<>&")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
	})
}

func FuzzParseToolCallRequest(f *testing.F) {
	f.Add(`{"call":{"id":"c1","name":"add","arguments":{"a":1}},"contextId":"ctx","taskId":"t"}`)
	f.Fuzz(func(t *testing.T, in string) {
		got, ok := parseToolCallRequest([]byte(in))
		if !ok {
			return
		}
		var want ToolCallRequest
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			return // the fast path is lenient on structure the decoder refuses; args are decoded again
		}
		if got.Call.ID != want.Call.ID || got.Call.Name != want.Call.Name || got.ContextID != want.ContextID || got.TaskID != want.TaskID {
			t.Fatalf("%s: got %+v, want %+v", in, got, want)
		}
	})
}

type flatArgs struct {
	S  string  `json:"s"`
	B  bool    `json:"b,omitempty"`
	I  int     `json:"i"`
	I8 int8    `json:"i8"`
	U  uint16  `json:"u"`
	F  float64 `json:"f"`
	F4 float32 `json:"f4"`
	No string  `json:"-"`
	Up string
}

func TestFlatDecoder(t *testing.T) {
	d := newFlatDecoder(reflect.TypeFor[flatArgs]())
	if d == nil {
		t.Fatal("flatArgs is flat")
	}
	good := []string{
		`{"s":"x","b":true,"i":-3,"i8":12,"u":7,"f":1.5e3,"f4":0.25,"Up":"u"}`,
		`{}`, ` { "s" : "é" , "i" : 0 } `, `{"s":null,"b":false,"f":-0.5}`,
	}
	for _, in := range good {
		var got, want flatArgs
		if !d.decode([]byte(in), reflect.ValueOf(&got)) {
			t.Errorf("%s: declined", in)
			continue
		}
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", in, got, want)
		}
	}
	declined := []string{
		`{"s":"a\nb"}`, `{"S":"case"}`, `{"zz":1}`, `{"i":1.5}`, `{"i8":300}`, `{"u":-1}`, `{"s":1}`,
		`{"b":"true"}`, `{"i":"1"}`, `{"f":[1]}`, `{"s":"x"} 1`, `[1]`, `{"i":1,}`, `{"No":"x"}`,
	}
	for _, in := range declined {
		var got flatArgs
		if d.decode([]byte(in), reflect.ValueOf(&got)) {
			t.Errorf("%s: decoded as %+v", in, got)
		}
	}
	type nested struct {
		A []string `json:"a"`
	}
	type named struct {
		K Kind `json:"k"`
	}
	if newFlatDecoder(reflect.TypeFor[nested]()) != nil || newFlatDecoder(reflect.TypeFor[named]()) != nil {
		t.Fatal("a non-flat struct got a flat decoder")
	}
}

func FuzzFlatDecoder(f *testing.F) {
	f.Add(`{"s":"x","b":true,"i":-3,"i8":12,"u":7,"f":1.5e3,"f4":0.25}`)
	d := newFlatDecoder(reflect.TypeFor[flatArgs]())
	f.Fuzz(func(t *testing.T, in string) {
		var got, want flatArgs
		if !d.decode([]byte(in), reflect.ValueOf(&got)) {
			return
		}
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%s: decoded as %+v but encoding/json refuses it: %v", in, got, err)
		}
		if got != want {
			t.Fatalf("%s: got %+v, want %+v", in, got, want)
		}
	})
}

func TestAppendScalarMatchesEncodingJSON(t *testing.T) {
	vals := []any{true, false, 0, -7, int8(-128), int16(300), int32(-5), int64(1) << 62, uint(7), uint16(65535), uint32(1 << 31), uint64(1) << 63,
		0.0, math.Copysign(0, -1), 1.5, -2.25, 1e20, 1e21, 123456789e15, 1e-6, 1e-7, 3.14159e-9, 5e-324, math.MaxFloat64,
		float32(0.1), float32(1e21), float32(1e-7), float32(3.4e38), float32(-1.5)}
	for _, v := range vals {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendScalar(nil, v)
		if !ok || string(got) != string(want) {
			t.Errorf("appendScalar(%T %v) = %s, %v; want %s", v, v, got, ok, want)
		}
	}
	for _, v := range []any{math.NaN(), math.Inf(1), "s", []int{1}, uint8(1)} {
		if _, ok := appendScalar(nil, v); ok {
			t.Errorf("appendScalar(%T %v) accepted", v, v)
		}
	}
}

func FuzzAppendFloat(f *testing.F) {
	f.Add(1.5, float32(0.1))
	f.Fuzz(func(t *testing.T, x float64, y float32) {
		for _, v := range []any{x, y} {
			want, err := json.Marshal(v)
			got, ok := appendScalar(nil, v)
			if err != nil {
				if ok {
					t.Fatalf("%v: accepted, encoding/json refuses", v)
				}
				continue
			}
			if !ok || string(got) != string(want) {
				t.Fatalf("appendScalar(%T %v) = %s; want %s", v, v, got, want)
			}
		}
	})
}
