// Package schemamsg words a JSON Schema validation error for a model or a
// client: one line, each problem as "at <JSON pointer>: <what is wrong>",
// without the schema's internal URL. The plugin runtime (tool arguments)
// and the built-in artifact tools use it, so both say it the same way.
//
// schemamsg imports only the JSON Schema library and x/text.
package schemamsg

import (
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// Text flattens err, a *jsonschema.ValidationError or one wrapping it, to
// one line of its leaf problems; any other error is its own text.
func Text(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var lines []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			at := "/" + strings.Join(e.InstanceLocation, "/")
			lines = append(lines, fmt.Sprintf("at %s: %s", at, e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return strings.Join(lines, "; ")
}
