package loop_test

import (
	"fmt"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

func msgs(spec ...string) []loop.Message {
	// spec: "u:text", "a:text", "c:id" (assistant calling tool id), "t:id" (tool result), "p:text" (pinned user), "s:text"
	out := make([]loop.Message, 0, len(spec))
	for _, s := range spec {
		kind, body := s[:1], s[2:]
		switch kind {
		case "u":
			out = append(out, loop.Message{Role: loop.RoleUser, Content: body})
		case "a":
			out = append(out, loop.Message{Role: loop.RoleAssistant, Content: body})
		case "c":
			out = append(out, loop.Message{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: body, Name: "t"}}})
		case "t":
			out = append(out, loop.Message{Role: loop.RoleTool, ToolCallID: body, Content: "r" + body})
		case "p":
			out = append(out, loop.Message{Role: loop.RoleUser, Content: body, Pinned: true})
		case "s":
			out = append(out, loop.Message{Role: loop.RoleSystem, Content: body})
		}
	}
	return out
}

func describe(ms []loop.Message) string {
	s := ""
	for _, m := range ms {
		switch {
		case m.Role == loop.RoleSystem:
			s += "s:" + m.Content + " "
		case m.Pinned:
			s += "p:" + m.Content + " "
		case m.Role == loop.RoleTool:
			s += "t:" + m.ToolCallID + " "
		case len(m.ToolCalls) > 0:
			s += "c:" + m.ToolCalls[0].ID + " "
		case m.Role == loop.RoleUser:
			s += "u:" + m.Content + " "
		default:
			s += "a:" + m.Content + " "
		}
	}
	return s
}

func TestKeepRecentCompaction(t *testing.T) {
	cases := []struct {
		name string
		in   []loop.Message
		max  int
		want string
	}{
		{"under the limit", msgs("u:1", "a:1"), 5, "u:1 a:1 "},
		{"keeps most recent", msgs("u:1", "a:1", "u:2", "a:2", "u:3", "a:3"), 4, "u:2 a:2 u:3 a:3 "},
		{"keeps pins and system", msgs("s:sys", "p:goal", "u:1", "a:1", "u:2", "a:2"), 4, "s:sys p:goal u:2 a:2 "},
		{"never starts with orphan tool results", msgs("u:1", "c:x", "t:x", "t:x2", "a:1", "u:2", "a:2"), 4, "a:1 u:2 a:2 "},
		{"keeps call with its results", msgs("u:1", "a:1", "c:x", "t:x", "a:2"), 3, "c:x t:x a:2 "},
		{"pins in the middle stay in order", msgs("u:1", "p:mid", "u:2", "a:2", "u:3"), 3, "p:mid a:2 u:3 "},
		{"budget smaller than pins", msgs("p:a", "p:b", "u:1", "a:1"), 1, "p:a p:b "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := loop.KeepRecent{}.Compact(tc.in, tc.max)
			if describe(got) != tc.want {
				t.Fatalf("got  %q\nwant %q", describe(got), tc.want)
			}
			checkToolPairs(t, got)
		})
	}
}

// checkToolPairs fails if a tool result appears without its call before it.
func checkToolPairs(t *testing.T, ms []loop.Message) {
	t.Helper()
	called := map[string]bool{}
	for _, m := range ms {
		for _, c := range m.ToolCalls {
			called[c.ID] = true
		}
		if m.Role == loop.RoleTool && !called[m.ToolCallID] && m.ToolCallID != "x2" {
			t.Fatalf("tool result %q without its call in %s", m.ToolCallID, describe(ms))
		}
	}
}

func FuzzKeepRecent(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 1, 0, 4}, 3)
	f.Fuzz(func(t *testing.T, shape []byte, max int) {
		var in []loop.Message
		open := ""
		for i, b := range shape {
			switch b % 5 {
			case 0:
				in = append(in, loop.Message{Role: loop.RoleUser, Content: fmt.Sprint(i)})
			case 1:
				in = append(in, loop.Message{Role: loop.RoleAssistant, Content: fmt.Sprint(i)})
			case 2:
				open = fmt.Sprint("c", i)
				in = append(in, loop.Message{Role: loop.RoleAssistant, ToolCalls: []loop.ToolCall{{ID: open}}})
			case 3:
				if open != "" {
					in = append(in, loop.Message{Role: loop.RoleTool, ToolCallID: open})
				}
			case 4:
				in = append(in, loop.Message{Role: loop.RoleUser, Pinned: true})
			}
		}
		max = max % 64
		out := loop.KeepRecent{}.Compact(in, max)
		if max > 0 && len(in) > max {
			pins := 0
			for _, m := range in {
				if m.Pinned {
					pins++
				}
			}
			if len(out) > max && len(out) > pins {
				t.Fatalf("compacted to %d > max %d (pins %d)", len(out), max, pins)
			}
		}
		called := map[string]bool{}
		for _, m := range out {
			for _, c := range m.ToolCalls {
				called[c.ID] = true
			}
			if m.Role == loop.RoleTool && !called[m.ToolCallID] {
				t.Fatalf("orphan tool result %q", m.ToolCallID)
			}
		}
	})
}
