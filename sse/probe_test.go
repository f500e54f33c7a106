package sse

import (
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

func TestProbeMatchesDecoding(t *testing.T) {
	for _, k := range loop.AllKinds() {
		for _, task := range []string{"t1", "", `we"ird\task`, "ünïcode"} {
			e := loop.NewEvent(k)
			h := e.Head()
			h.ContextID, h.TaskID, h.Timestamp = `c"1`, task, time.Unix(5, 0)
			data, err := loop.EncodeEvent(e)
			if err != nil {
				t.Fatal(err)
			}
			kind, gotTask := probe(data)
			if kind != k || string(gotTask) != task {
				t.Fatalf("probe(%s) = %q, %q; want %q, %q", data, kind, gotTask, k, task)
			}
		}
	}
	for _, bad := range []string{"", "{", `{"kind":"nope","taskId":"x"}`, `[1]`, `{"kind":"task-status"`} {
		if kind, _ := probe([]byte(bad)); kind != "" {
			t.Fatalf("probe(%q) = %q, want no kind", bad, kind)
		}
	}
	// Not in header order: the slow path still finds both.
	kind, task := probe([]byte(`{"taskId":"x","kind":"task-status"}`))
	if kind != loop.KindTaskStatus || string(task) != "x" {
		t.Fatalf("slow path: %q %q", kind, task)
	}
}
