package plugins

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzToolSchema: whatever a guest offers as a tool's parameters schema,
// and whatever arguments a model then sends, compiling and validating
// answer an error or a verdict; they never take the host down.
func FuzzToolSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}`,
		`{"$ref":"#"}`,
		`{"$ref":"#/definitions/a","definitions":{"a":{"$ref":"#/definitions/a"}}}`,
		`{"$defs":{"a":{"$dynamicRef":"#a"}},"$dynamicAnchor":"a","$ref":"#/$defs/a"}`,
		`{"type":"object","patternProperties":{"(":{}}}`,
		`{"pattern":"\\p{Nope}"}`,
		`{"format":"regex","const":"("}`,
		`{"allOf":[{"$ref":"#/allOf/0"}]}`,
		`{"items":[{"type":"integer"}],"additionalItems":false,"minItems":1e400}`,
		`{"multipleOf":0}`,
		`{"$schema":"http://json-schema.org/draft-04/schema#","exclusiveMinimum":true,"minimum":1}`,
		`{"enum":[]}`,
		`{"$id":"file:///etc/passwd","$ref":"file:///etc/passwd"}`,
		`{"properties":{"a":{"$ref":"#/properties/b"},"b":{"$ref":"#/properties/a"}}}`,
		`[` + strings.Repeat(`{"items":`, 200) + `{}` + strings.Repeat(`}`, 200) + `]`,
		`{"contentEncoding":"base64","contentMediaType":"application/json","contentSchema":{"type":"object"}}`,
	} {
		f.Add([]byte(s), []byte(`{"x":"y","a":[1,2,{"b":null}]}`))
	}
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		sch, err := compileSchema("fuzzed", schema)
		if err != nil {
			if sch != nil {
				t.Fatalf("an error and a schema: %v", err)
			}
			return
		}
		if sch == nil {
			t.Fatal("no schema and no error")
		}
		var v any
		if json.Unmarshal(args, &v) != nil {
			v = string(args)
		}
		_ = validateArgs(sch, v)
	})
}

// A validator that panics answers the call with an error: the recovery is
// there for the schema library's bugs, and a nil schema is one way to make
// it panic for real.
func TestSchemaPanicIsAnError(t *testing.T) {
	err := validateArgs(nil, map[string]any{"x": 1})
	if err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Fatalf("validate with a nil schema: %v", err)
	}
}
