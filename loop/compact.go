package loop

import "encoding/json"

// Compactor shrinks a history that grew past max messages. It must keep the
// conversation valid for a model: never a tool result without the assistant
// message that called it, nor the reverse. It returns a new slice.
type Compactor interface {
	Compact(history []Message, max int) []Message
}

// KeepRecent is the default Compactor: it keeps every pinned message (and
// system messages) whole and the most recent messages up to max, moving the
// cut so that a tool call and its results are kept or dropped together.
type KeepRecent struct{}

// Compact implements Compactor.
func (KeepRecent) Compact(history []Message, max int) []Message {
	if max <= 0 || len(history) <= max {
		return append([]Message(nil), history...)
	}
	pinned := 0
	for _, m := range history {
		if keepAlways(m) {
			pinned++
		}
	}
	budget := max - pinned
	if budget < 0 {
		budget = 0
	}
	// cut: the first unpinned message kept. Count unpinned from the end.
	cut := len(history)
	for n := 0; cut > 0; {
		if !keepAlways(history[cut-1]) {
			if n == budget {
				break
			}
			n++
		}
		cut--
	}
	cut = safeCut(history, cut)
	out := make([]Message, 0, max)
	for _, m := range history[:cut] {
		if keepAlways(m) {
			out = append(out, m)
		}
	}
	out = append(out, history[cut:]...)
	return dropOrphanResults(out)
}

// dropOrphanResults removes the tool results whose call is not in h: a
// pinned message kept inside a tool exchange can leave results after the
// cut whose call was before it.
func dropOrphanResults(h []Message) []Message {
	called := map[string]bool{}
	kept := h[:0]
	for _, m := range h {
		for _, c := range m.ToolCalls {
			called[c.ID] = true
		}
		if m.Role == RoleTool && !called[m.ToolCallID] {
			continue
		}
		kept = append(kept, m)
	}
	return kept
}

func keepAlways(m Message) bool { return m.Pinned || m.Role == RoleSystem }

// safeCut moves a cut forward past tool results whose call would be cut off,
// so the kept part never starts in the middle of a tool exchange.
func safeCut(h []Message, cut int) int {
	for cut < len(h) && h[cut].Role == RoleTool {
		cut++
	}
	return cut
}

// trimHistory returns the last n messages of h, starting at a safe cut.
func trimHistory(h []Message, n int) []Message {
	return h[safeCut(h, len(h)-n):]
}

// trimHistoryBytes returns the most recent messages of h whose sizes add up
// to at most max, starting at a safe cut.
func trimHistoryBytes(h []Message, max int) []Message {
	cut, sum := len(h), 0
	for cut > 0 {
		sum += MessageSize(h[cut-1])
		if sum > max {
			break
		}
		cut--
	}
	return h[safeCut(h, cut):]
}

// MessageSize is about how many bytes m takes: its text, its tool calls and
// its metadata (strings and numbers of it). It is what the byte bounds of a
// history (AgentConfig.HistoryBytes) count.
func MessageSize(m Message) int {
	n := 64 + len(m.Role) + len(m.Content) + len(m.Name) + len(m.ToolCallID)
	for _, c := range m.ToolCalls {
		n += 32 + len(c.ID) + len(c.Name) + len(c.Arguments)
	}
	for k, v := range m.Metadata {
		n += len(k) + valueSize(v, 0)
	}
	return n
}

// MessagesSize is the sum of MessageSize over h.
func MessagesSize(h []Message) int {
	n := 0
	for _, m := range h {
		n += MessageSize(m)
	}
	return n
}

// valueSize estimates a metadata value decoded from JSON.
func valueSize(v any, depth int) int {
	if depth > 32 {
		return 16
	}
	switch x := v.(type) {
	case string:
		return 16 + len(x)
	case []any:
		n := 24
		for _, e := range x {
			n += valueSize(e, depth+1)
		}
		return n
	case map[string]any:
		n := 48
		for k, e := range x {
			n += len(k) + valueSize(e, depth+1)
		}
		return n
	case json.RawMessage:
		return 24 + len(x)
	case []byte:
		return 24 + len(x)
	default:
		return 16
	}
}
