package host

import (
	"encoding/json"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// The size of an answer that carries stored data (task histories,
// artifacts) scales with what a client stored, not with what it sent: a
// principal with large tasks could otherwise make the host build answers
// of hundreds of megabytes, several at once. Limits.MaxAnswerBytes bounds
// them: a ListTasks page ends when its tasks' encoded size reaches it (the
// next page's token says where to go on), and a task that alone passes it
// is answered with the oldest messages of its history left out, counted
// in its metadata's historyTrimmed.

// historyTrimmedKey is the task metadata key that counts the oldest
// history messages an answer left out to stay within maxAnswerBytes.
const historyTrimmedKey = "historyTrimmed"

// encodedSize is the size of v in JSON (0 when it does not encode: the
// answer's own encoding then reports the error).
func encodedSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}

// fitTask returns t's encoded size, after leaving out the oldest messages
// of its history while it is larger than limit (limit <= 0: no limit).
// What is left out is counted in t.Metadata[historyTrimmedKey]. A task
// larger than limit without any history is returned whole.
func fitTask(t *a2a.Task, limit int) int {
	n := encodedSize(t)
	if limit <= 0 || n <= limit || len(t.History) == 0 {
		return n
	}
	drop := 0
	for drop < len(t.History) && n > limit {
		// A message's share of the task's JSON: its own encoding and a
		// separating comma.
		n -= encodedSize(t.History[drop]) + 1
		drop++
	}
	t.History = t.History[drop:]
	if len(t.History) == 0 {
		t.History = nil
	}
	if t.Metadata == nil {
		t.Metadata = map[string]any{}
	}
	t.Metadata[historyTrimmedKey] = drop
	return encodedSize(t)
}
