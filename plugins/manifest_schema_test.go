package plugins

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const schemaFile = "../docs/plugin.schema.json"

func manifestSchema(t *testing.T) (*jsonschema.Schema, map[string]any) {
	t.Helper()
	b, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("plugin.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("plugin.schema.json")
	if err != nil {
		t.Fatalf("compile %s: %v", schemaFile, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	return sch, raw
}

func validates(sch *jsonschema.Schema, b []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

// Every example manifest (and every template the build fills in) passes
// both the schema and the strict decoder.
func TestExampleManifestsMatchTheSchema(t *testing.T) {
	sch, _ := manifestSchema(t)
	files, _ := filepath.Glob("../examples/plugins/*/plugin.json")
	templates, _ := filepath.Glob("../examples/plugins/*/plugin.template.json")
	if len(files)+len(templates) < 10 {
		t.Fatalf("found %d manifests and %d templates", len(files), len(templates))
	}
	for _, f := range append(files, templates...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".template.json") { // what scripts/build-go-plugins.sh writes
			b = bytes.ReplaceAll(b, []byte(`"sha256": ""`), []byte(`"sha256": "`+strings.Repeat("0", 64)+`"`))
			b = bytes.ReplaceAll(b, []byte("@PLUGIN_DIR@"), []byte("/srv/plugin"))
			b = bytes.ReplaceAll(b, []byte("@GRANTS_DIR@"), []byte("/srv/grants"))
		}
		if err := validates(sch, b); err != nil {
			t.Errorf("%s does not match the schema: %v", f, err)
		}
		if _, err := ParseManifest(b); err != nil {
			t.Errorf("%s: the decoder refuses it: %v", f, err)
		}
	}
}

// The schema and the strict decoder agree: the same fields, and the same
// verdict on manifests that are wrong in one way each.
func TestManifestSchemaAgreesWithTheDecoder(t *testing.T) {
	sch, raw := manifestSchema(t)
	props := func(m map[string]any) []string {
		var out []string
		for k := range m["properties"].(map[string]any) {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	defs := raw["$defs"].(map[string]any)
	capSchema := defs["capabilities"].(map[string]any)
	pathSchema := capSchema["properties"].(map[string]any)["allowedPaths"].(map[string]any)["items"].(map[string]any)
	for _, c := range []struct {
		typ    reflect.Type
		schema map[string]any
	}{
		{reflect.TypeFor[Manifest](), raw},
		{reflect.TypeFor[Capabilities](), capSchema},
		{reflect.TypeFor[PathGrant](), pathSchema},
	} {
		if c.schema["additionalProperties"] != false {
			t.Errorf("%s: the schema allows unknown fields; the decoder does not", c.typ)
		}
		if got, want := props(c.schema), jsonFields(c.typ); !slices.Equal(got, want) {
			t.Errorf("%s: schema properties %v, decoder fields %v", c.typ, got, want)
		}
	}
	var fns []string
	for _, f := range capSchema["properties"].(map[string]any)["hostFunctions"].(map[string]any)["items"].(map[string]any)["enum"].([]any) {
		fns = append(fns, f.(string))
	}
	var known []string
	for f := range hostFuncs {
		known = append(known, f)
	}
	slices.Sort(fns)
	slices.Sort(known)
	if !slices.Equal(fns, known) {
		t.Errorf("schema host functions %v, decoder %v", fns, known)
	}

	good := `{"$schema":"../docs/plugin.schema.json","name":"ok","version":"1","kind":"tool","wasm":"ok.wasm","sha256":"` + strings.Repeat("a", 64) + `",
		"capabilities":{"callTimeout":"1m30s","memoryPages":64,"allowedPaths":[{"path":"/data","readOnly":true}],"hostFunctions":["log"]},
		"config":{"k":1},"secrets":{"key":"API_KEY"}}`
	if err := validates(sch, []byte(good)); err != nil {
		t.Fatalf("schema refuses a good manifest: %v", err)
	}
	if _, err := ParseManifest([]byte(good)); err != nil {
		t.Fatalf("decoder refuses a good manifest: %v", err)
	}
	for name, edit := range map[string][2]string{
		"unknown field":            {`"config"`, `"extra":1,"config"`},
		"unknown capability":       {`"memoryPages"`, `"cpus":2,"memoryPages"`},
		"bad kind":                 {`"kind":"tool"`, `"kind":"widget"`},
		"bare number duration":     {`"1m30s"`, `90000`},
		"duration without unit":    {`"1m30s"`, `"90"`},
		"uppercase sha":            {`"sha256":"aaaa`, `"sha256":"AAAA`},
		"wasm in a subfolder":      {`"ok.wasm"`, `"lib/ok.wasm"`},
		"relative path":            {`"/data"`, `"data"`},
		"unknown host function":    {`["log"]`, `["log","exec"]`},
		"too much memory":          {`"memoryPages":64`, `"memoryPages":70000`},
		"negative instances":       {`"memoryPages":64`, `"memoryPages":64,"instances":-1`},
		"bad name":                 {`"name":"ok"`, `"name":"-ok"`},
		"empty version":            {`"version":"1"`, `"version":""`},
		"empty secret variable":    {`"API_KEY"`, `""`},
		"unknown path grant field": {`"readOnly":true`, `"readOnly":true,"exec":true`},
	} {
		bad := strings.Replace(good, edit[0], edit[1], 1)
		if bad == good {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		schemaErr := validates(sch, []byte(bad))
		_, decErr := ParseManifest([]byte(bad))
		if schemaErr == nil || decErr == nil {
			t.Errorf("%s: schema error %v, decoder error %v; both must refuse", name, schemaErr, decErr)
		}
	}
}

// jsonFields lists the JSON names a struct decodes.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
