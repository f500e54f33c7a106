package jsonlimit

import (
	"errors"
	"strings"
	"testing"
)

func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func TestDepth(t *testing.T) {
	cases := []struct {
		in   string
		want int
	}{
		{`1`, 0},
		{`{}`, 1},
		{`{"a":[1,{"b":2}]}`, 3},
		{`"[[[[[["`, 0},
		{`["\"[[[", "\\", [[]]]`, 3},
		{`{"a":"}}}}"}`, 1},
		{nested(600), 600},
	}
	for _, c := range cases {
		if got := Depth([]byte(c.in), 1000); got != c.want {
			t.Errorf("Depth(%.30q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestCheckRefusesPastTheLimit(t *testing.T) {
	if err := Check([]byte(nested(MaxDepth)), MaxDepth); err != nil {
		t.Fatalf("depth %d refused: %v", MaxDepth, err)
	}
	err := Check([]byte(nested(MaxDepth+1)), MaxDepth)
	var tde *TooDeepError
	if !errors.As(err, &tde) || tde.Max != MaxDepth {
		t.Fatalf("depth %d: err = %v, want TooDeepError", MaxDepth+1, err)
	}
	// A string full of brackets is no nesting.
	if err := Check([]byte(`"`+strings.Repeat("[", 20000)+`"`), MaxDepth); err != nil {
		t.Fatalf("brackets in a string refused: %v", err)
	}
}

func TestCheckSchemaBoundsNodes(t *testing.T) {
	ok := `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}}}}`
	if err := CheckSchema([]byte(ok)); err != nil {
		t.Fatal(err)
	}
	wide := `{"allOf":[` + strings.Repeat(`{"not":{}},`, SchemaMaxNodes/2) + `{}]}`
	if err := CheckSchema([]byte(wide)); err == nil || !strings.Contains(err.Error(), "more than 2000") {
		t.Fatalf("a schema of %d nodes: %v", SchemaMaxNodes+2, err)
	}
	deep := strings.Repeat(`{"not":`, SchemaMaxDepth+1) + `{}` + strings.Repeat(`}`, SchemaMaxDepth+1)
	if err := CheckSchema([]byte(deep)); err == nil {
		t.Fatal("a schema nested past SchemaMaxDepth passed")
	}
}
