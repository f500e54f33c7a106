package pdk

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationReadsStringsOnly(t *testing.T) {
	for in, want := range map[string]time.Duration{`"30s"`: 30 * time.Second, `"1m30s"`: 90 * time.Second, `"250ms"`: 250 * time.Millisecond, `"0s"`: 0} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("%s: %v, %v; want %v", in, time.Duration(d), err, want)
		}
		out, _ := json.Marshal(d)
		var back Duration
		if err := json.Unmarshal(out, &back); err != nil || back != d {
			t.Errorf("%s: round trip %s gave %v, %v", in, out, back, err)
		}
	}
	for in, msg := range map[string]string{
		`30000`: `a bare number has no unit`, `1.5`: `a bare number has no unit`, `"30"`: `want a number and a unit`,
		`"soon"`: `want a number and a unit`, `"-5s"`: `must not be negative`, `true`: `want a string`, `{}`: `want a string`,
	} {
		var d Duration
		err := json.Unmarshal([]byte(in), &d)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: error %v, want one saying %q", in, err, msg)
		}
	}
}
