package host_test

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/host"
)

// The example config lists every field of the config, so that it is the
// reference an operator reads: a field added to host.Config and not to
// cmd/host/looopy.example.json fails here, naming it.
func TestExampleConfigListsEveryField(t *testing.T) {
	b, err := os.ReadFile("../cmd/host/looopy.example.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var missing []string
	walkFields(reflect.TypeOf(host.Config{}), "", func(path string) {
		if !present(doc, strings.Split(path, ".")) {
			missing = append(missing, path)
		}
	})
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("cmd/host/looopy.example.json lacks %d fields:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
}

// walkFields calls f with the JSON path of every field of t, through
// structs and lists of structs ("[]" stands for any element).
func walkFields(t reflect.Type, prefix string, f func(string)) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t.Kind() == reflect.Slice {
			prefix += ".[]"
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() == "time" {
		return
	}
	for i := 0; i < t.NumField(); i++ {
		fd := t.Field(i)
		name, _, _ := strings.Cut(fd.Tag.Get("json"), ",")
		if !fd.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = fd.Name
		}
		path := strings.TrimPrefix(prefix+"."+name, ".")
		f(path)
		walkFields(fd.Type, path, f)
	}
}

// present reports whether path is in v; "[]" matches when some element of
// the list has the rest of the path.
func present(v any, path []string) bool {
	if len(path) == 0 {
		return true
	}
	switch x := v.(type) {
	case map[string]any:
		if path[0] == "[]" {
			return false
		}
		// encoding/json matches names without regard to case (the
		// budgets have no tags: "maxTools" sets MaxTools).
		for k, child := range x {
			if strings.EqualFold(k, path[0]) && present(child, path[1:]) {
				return true
			}
		}
		return false
	case []any:
		if path[0] != "[]" {
			return false
		}
		for _, e := range x {
			if present(e, path[1:]) {
				return true
			}
		}
	}
	return false
}
