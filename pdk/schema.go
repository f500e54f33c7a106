package pdk

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// SchemaOf returns the JSON Schema of the arguments object of type A, as the
// guest SDK derives it for Tool. A must be a struct (or a pointer to one).
//
// Each exported field is a property named by its json tag; a field tagged
// omitempty, omitzero or of pointer type is optional, every other field is
// required. Tags the SDK reads besides json:
//
//	desc:"what the field means"   -> "description"
//	enum:"a,b,c"                  -> "enum" (strings, or numbers for numeric fields)
//
// Unknown properties are refused ("additionalProperties": false).
func SchemaOf[A any]() (json.RawMessage, error) {
	return SchemaFor(reflect.TypeFor[A]())
}

// SchemaFor is SchemaOf for a reflect.Type.
func SchemaFor(t reflect.Type) (json.RawMessage, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("schema of %s: tool arguments must be a struct", t)
	}
	s, err := schemaOf(t, map[reflect.Type]bool{})
	if err != nil {
		return nil, fmt.Errorf("schema of %s: %w", t, err)
	}
	return json.Marshal(s)
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// schemaOf builds the schema of t as an ordered map. seen guards recursive
// types: a type met again inside itself gets the empty schema.
func schemaOf(t reflect.Type, seen map[reflect.Type]bool) (map[string]any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}, nil
	case rawType:
		return map[string]any{}, nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return map[string]any{"type": "integer", "minimum": 0}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.Interface:
		return map[string]any{}, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}, nil
		}
		items, err := schemaOf(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		s := map[string]any{"type": "array", "items": items}
		if t.Kind() == reflect.Array {
			s["minItems"], s["maxItems"] = t.Len(), t.Len()
		}
		return s, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key %s: only string keys have a JSON form", t.Key())
		}
		v, err := schemaOf(t.Elem(), seen)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "additionalProperties": v}, nil
	case reflect.Struct:
		if seen[t] {
			return map[string]any{}, nil
		}
		seen[t] = true
		defer delete(seen, t)
		props := map[string]any{}
		required := []string{}
		if err := structFields(t, seen, props, &required); err != nil {
			return nil, err
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			s["required"] = required
		}
		return s, nil
	}
	return nil, fmt.Errorf("type %s has no JSON form", t)
}

func structFields(t reflect.Type, seen map[reflect.Type]bool, props map[string]any, required *[]string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := structFields(ft, seen, props, required); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs, err := schemaOf(f.Type, seen)
		if err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		if d := f.Tag.Get("desc"); d != "" {
			fs["description"] = d
		}
		if e := f.Tag.Get("enum"); e != "" {
			vals, err := enumValues(f.Type, e)
			if err != nil {
				return fmt.Errorf("field %s: %w", f.Name, err)
			}
			fs["enum"] = vals
		}
		props[name] = fs
		optional := f.Type.Kind() == reflect.Pointer
		for o := range strings.SplitSeq(opts, ",") {
			if o == "omitempty" || o == "omitzero" {
				optional = true
			}
		}
		if !optional {
			*required = append(*required, name)
		}
	}
	return nil
}

func enumValues(t reflect.Type, tag string) ([]any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []any
	for v := range strings.SplitSeq(tag, ",") {
		v = strings.TrimSpace(v)
		switch t.Kind() {
		case reflect.String:
			out = append(out, v)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.Float32, reflect.Float64:
			var n json.Number
			if err := json.Unmarshal([]byte(v), &n); err != nil {
				return nil, fmt.Errorf("enum value %q is not a number", v)
			}
			out = append(out, n)
		default:
			return nil, fmt.Errorf("enum on a %s field", t.Kind())
		}
	}
	return out, nil
}
