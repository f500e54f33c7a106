package schemamsg

import (
	"errors"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func TestTextListsEachProblemByLocation(t *testing.T) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"type":"object","required":["b"],"properties":{"a":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://tool.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem://tool.json")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := jsonschema.UnmarshalJSON(strings.NewReader(`{"a":"x"}`))
	verr := sch.Validate(v)
	if verr == nil {
		t.Fatal("an invalid value validated")
	}
	got := Text(verr)
	for _, want := range []string{"at /: missing property 'b'", "at /a: got string, want integer"} {
		if !strings.Contains(got, want) {
			t.Errorf("Text = %q, lacks %q", got, want)
		}
	}
	if strings.Contains(got, "mem://") || strings.Count(got, "; ") != 1 {
		t.Errorf("Text = %q: want the two problems on one line, without the schema's URL", got)
	}
	if got := Text(errors.New("plain")); got != "plain" {
		t.Errorf("Text(plain) = %q", got)
	}
}
