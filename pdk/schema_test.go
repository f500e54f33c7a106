package pdk

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type inner struct {
	N int `json:"n"`
}

type Embedded struct {
	Shared string `json:"shared" desc:"from an embedded struct"`
}

type args struct {
	Embedded
	Name  string           `json:"name" desc:"who"`
	Count uint8            `json:"count,omitempty"`
	Ratio float64          `json:"ratio"`
	Mode  string           `json:"mode" enum:"a, b"`
	Level int              `json:"level" enum:"1,2,3"`
	Tags  []string         `json:"tags,omitempty"`
	Blob  []byte           `json:"blob,omitzero"`
	Opt   *inner           `json:"opt"`
	Map   map[string]inner `json:"map,omitempty"`
	When  time.Time        `json:"when,omitzero"`
	Any   any              `json:"any,omitempty"`
	Raw   json.RawMessage  `json:"raw,omitempty"`
	Fixed [2]int           `json:"fixed,omitempty"`
	Skip  string           `json:"-"`
	//lint:ignore U1000 an unexported field SchemaOf must leave out
	private string
	Headers map[string]string `json:"headers,omitempty"`
}

func TestSchemaOf(t *testing.T) {
	raw, err := SchemaOf[args]()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"additionalProperties":false,"properties":{` +
		`"any":{},` +
		`"blob":{"contentEncoding":"base64","type":"string"},` +
		`"count":{"minimum":0,"type":"integer"},` +
		`"fixed":{"items":{"type":"integer"},"maxItems":2,"minItems":2,"type":"array"},` +
		`"headers":{"additionalProperties":{"type":"string"},"type":"object"},` +
		`"level":{"enum":[1,2,3],"type":"integer"},` +
		`"map":{"additionalProperties":{"additionalProperties":false,"properties":{"n":{"type":"integer"}},"required":["n"],"type":"object"},"type":"object"},` +
		`"mode":{"enum":["a","b"],"type":"string"},` +
		`"name":{"description":"who","type":"string"},` +
		`"opt":{"additionalProperties":false,"properties":{"n":{"type":"integer"}},"required":["n"],"type":"object"},` +
		`"ratio":{"type":"number"},` +
		`"raw":{},` +
		`"shared":{"description":"from an embedded struct","type":"string"},` +
		`"tags":{"items":{"type":"string"},"type":"array"},` +
		`"when":{"format":"date-time","type":"string"}},` +
		`"required":["shared","name","ratio","mode","level"],"type":"object"}`
	if string(raw) != want {
		t.Fatalf("schema\n got %s\nwant %s", raw, want)
	}
}

type node struct {
	Name     string  `json:"name"`
	Children []*node `json:"children,omitempty"`
}

func TestSchemaOfRecursiveAndRefused(t *testing.T) {
	raw, err := SchemaOf[node]()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"children":{"items":{},"type":"array"}`) {
		t.Fatalf("recursive schema = %s", raw)
	}
	if _, err := SchemaOf[string](); err == nil || !strings.Contains(err.Error(), "must be a struct") {
		t.Fatalf("string args: %v", err)
	}
	type bad struct {
		C chan int `json:"c"`
	}
	if _, err := SchemaOf[bad](); err == nil || !strings.Contains(err.Error(), "field C") {
		t.Fatalf("chan field: %v", err)
	}
	type badEnum struct {
		N int `json:"n" enum:"x"`
	}
	if _, err := SchemaOf[badEnum](); err == nil || !strings.Contains(err.Error(), `enum value "x" is not a number`) {
		t.Fatalf("bad enum: %v", err)
	}
	type intKeys struct {
		M map[int]string `json:"m"`
	}
	if _, err := SchemaOf[intKeys](); err == nil {
		t.Fatal("int map keys accepted")
	}
}

func TestHTTPRequestBody(t *testing.T) {
	r := &HTTPRequest{BodyBase64: "aGk="}
	if b, err := r.BodyBytes(); err != nil || string(b) != "hi" {
		t.Fatalf("%q %v", b, err)
	}
	r = &HTTPRequest{Body: "x", BodyBase64: "aGk="}
	if _, err := r.BodyBytes(); err == nil {
		t.Fatal("both bodies accepted")
	}
	r = &HTTPRequest{BodyBase64: "!!"}
	if _, err := r.BodyBytes(); err == nil {
		t.Fatal("bad base64 accepted")
	}
}
