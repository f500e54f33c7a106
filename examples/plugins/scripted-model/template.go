package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/looopy-go/looopy/pdk"
)

// vars are what a template can refer to.
//
//	$0, $1 … $9, ${12}, ${name}   groups captured by the rule's match ($0: the whole match)
//	${1:-text}                    group 1, or text when group 1 is empty
//	$$                            a literal $
//	{{input}}                     the latest user message
//	{{history}}                   every user message of the conversation, oldest first, joined by " | "
//	{{lastToolResult}}            the content of the last tool result
//	{{toolResults}}               every tool result since the latest user message, joined by "\n"
//	{{attempt}}                   the attempt of this model call (1 unless the host retried)
//	{{i}}                         the repetition of a repeated step, from 1
type vars struct {
	groups         []string
	names          []string // names[k] is the name of group k ("" if unnamed)
	input          string
	msgs           []pdk.Message // their user messages are joined for {{history}} only when a template asks
	lastToolResult string
	toolResults    string
	attempt        int
	i              int
}

var placeholders = map[string]func(*vars) string{
	"input":          func(v *vars) string { return v.input },
	"history":        func(v *vars) string { return joinUsers(v.msgs) },
	"lastToolResult": func(v *vars) string { return v.lastToolResult },
	"toolResults":    func(v *vars) string { return v.toolResults },
	"attempt":        func(v *vars) string { return strconv.Itoa(v.attempt) },
	"i":              func(v *vars) string { return strconv.Itoa(v.i) },
}

// joinUsers joins the contents of the user messages, oldest first, with " | ".
func joinUsers(msgs []pdk.Message) string {
	var b strings.Builder
	first := true
	for _, m := range msgs {
		if m.Role != pdk.RoleUser {
			continue
		}
		if !first {
			b.WriteString(" | ")
		}
		first = false
		b.WriteString(m.Content)
	}
	return b.String()
}

// checkTemplate reports a malformed reference or an unknown placeholder.
func checkTemplate(t string) error {
	_, err := expand(t, nil)
	return err
}

// expand fills template t. With v nil it only checks t. Text inserted from v
// is never expanded again.
func expand(t string, v *vars) (string, error) {
	if !strings.ContainsAny(t, "${") {
		return t, nil
	}
	var b strings.Builder
	for i := 0; i < len(t); {
		c := t[i]
		switch {
		case c == '$' && i+1 < len(t) && t[i+1] == '$':
			b.WriteByte('$')
			i += 2
		case c == '$' && i+1 < len(t) && t[i+1] == '{':
			end := strings.IndexByte(t[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("template %q: ${ without }", t)
			}
			ref := t[i+2 : i+2+end]
			if ref == "" {
				return "", fmt.Errorf("template %q: empty ${}", t)
			}
			ref, def, hasDef := strings.Cut(ref, ":-")
			if g := v.group(ref); g != "" || !hasDef {
				b.WriteString(g)
			} else {
				b.WriteString(def)
			}
			i += 3 + end
		case c == '$' && i+1 < len(t) && t[i+1] >= '0' && t[i+1] <= '9':
			b.WriteString(v.group(t[i+1 : i+2])) // one digit: $10 is $1 then 0; write ${10}
			i += 2
		case c == '{' && strings.HasPrefix(t[i:], "{{"):
			end := strings.Index(t[i+2:], "}}")
			if end < 0 {
				b.WriteString("{{")
				i += 2
				continue
			}
			name := strings.TrimSpace(t[i+2 : i+2+end])
			f, ok := placeholders[name]
			if !ok {
				return "", fmt.Errorf("template %q: unknown placeholder {{%s}} (known: input, history, lastToolResult, toolResults, attempt, i)", t, name)
			}
			if v != nil {
				b.WriteString(f(v))
			}
			i += 4 + end
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), nil
}

// group returns a captured group by number or name; "" when there is none.
func (v *vars) group(ref string) string {
	if v == nil {
		return ""
	}
	if n, err := strconv.Atoi(ref); err == nil {
		if n >= 0 && n < len(v.groups) {
			return v.groups[n]
		}
		return ""
	}
	for k, name := range v.names {
		if name == ref && k < len(v.groups) {
			return v.groups[k]
		}
	}
	return ""
}
