package host

import (
	"encoding/json"
	"testing"
)

// jsonSpots never panics, whatever the document, and on a valid one names
// every object key with the path encoding/json would reach it by.
func FuzzJSONSpots(f *testing.F) {
	for _, seed := range []string{
		`{"a":{"b":[{"c":1}]}, "zz":1}`,
		`{"auth":{"keys":[{"key":"k","principal":"p"}],"adminToken":"x"}}`,
		`[[{}],{"a":[]},[]]`,
		`{"a":[{"b":{"c":[1,{"d":2}]}}],"e":{}}`,
		`}`, `]`, `{"a":}`, `{"a" 1}`, `[1,,2]`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		spots := jsonSpots(b)
		if !json.Valid(b) {
			return
		}
		var keys int
		countKeys(mustDecode(t, b), &keys)
		n := 0
		for _, s := range spots {
			if s.key {
				n++
			}
		}
		if n < keys { // a key repeated in one object is found each time, decoded once
			t.Fatalf("%q: %d keys found, the document has %d at least", b, n, keys)
		}
	})
}

func mustDecode(t *testing.T, b []byte) any {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// countKeys counts the object keys in v as written (a repeated key of one
// object once: json.Unmarshal keeps the last), all levels.
func countKeys(v any, n *int) {
	switch x := v.(type) {
	case map[string]any:
		*n += len(x)
		for _, e := range x {
			countKeys(e, n)
		}
	case []any:
		for _, e := range x {
			countKeys(e, n)
		}
	}
}
