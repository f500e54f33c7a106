package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEchoReturnsTheArguments(t *testing.T) {
	for _, in := range []string{`{}`, `{"text":"hi"}`, `{"n":1,"nested":{"list":[1,"two",null]}}`} {
		var a Args
		if err := json.Unmarshal([]byte(in), &a); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		res := Echo(a)
		if res.Content != in || string(res.Data) != in || res.IsError {
			t.Errorf("Echo(%s) = %+v", in, res)
		}
	}
	if res := Echo(Args{}); res.Content != "{}" {
		t.Errorf("Echo of no arguments = %q, want {}", res.Content)
	}
}

func TestEchoRefusesNonObjects(t *testing.T) {
	for _, in := range []string{`[1]`, `"s"`, `3`} {
		var a Args
		err := json.Unmarshal([]byte(in), &a)
		if err == nil || !strings.Contains(err.Error(), "must be a JSON object") {
			t.Errorf("%s: error %v, want one about objects", in, err)
		}
	}
	if !json.Valid([]byte(schema)) {
		t.Error("schema is not JSON")
	}
}
