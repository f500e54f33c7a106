package host

import (
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// A stored status's message has one id, whatever reads it (the blocking
// answer, GetTask again and again, a stream's final status): its id was
// minted at each read before, so a client that keeps messages by id showed
// a task's failure or pause question once per read. A new status (a new
// UpdatedAt) gets a new id.
func TestStatusMessageIDIsTheStoredStatus(t *testing.T) {
	at := time.Date(2026, 11, 25, 16, 40, 0, 123456789, time.UTC)
	for _, rec := range []loop.TaskRecord{
		{ID: "t-failed", ContextID: "c", Status: loop.TaskFailed, Message: "the model failed", UpdatedAt: at},
		{ID: "t-paused", ContextID: "c", Status: loop.TaskWaitingInput, UpdatedAt: at,
			Requests: []loop.InputRequest{{InputID: "i1", InputType: loop.InputApproval, Prompt: "run it?"}}},
	} {
		first := toA2ATask(rec, 0).Status.Message
		if first == nil {
			t.Fatalf("%s: no status message", rec.ID)
		}
		for range 3 {
			time.Sleep(time.Microsecond) // a read at another time
			if again := toA2ATask(rec, 0).Status.Message; again.ID != first.ID {
				t.Fatalf("%s: status message %q read again as %q", rec.ID, first.ID, again.ID)
			}
		}
		next := rec
		next.UpdatedAt = at.Add(time.Millisecond)
		if toA2ATask(next, 0).Status.Message.ID == first.ID {
			t.Fatalf("%s: a new status kept the message id %q", rec.ID, first.ID)
		}
	}
}
