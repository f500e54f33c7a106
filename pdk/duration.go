package pdk

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a length of time, written in JSON as a Go duration string:
// "250ms", "30s", "1m30s", "2h". It is the one duration format of plugin
// manifests (capabilities.callTimeout) and of the host's configuration.
// A bare number is refused with an error that says so: it would not say
// its unit.
type Duration time.Duration

// String formats the duration as "1m30s".
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string; anything else is an error.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n json.Number
		if json.Unmarshal(b, &n) == nil {
			return fmt.Errorf("duration %s: write a string with a unit, like \"%ss\" or \"%sms\" (a bare number has no unit)", b, n, n)
		}
		return fmt.Errorf("duration %s: want a string like \"30s\"", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: want a number and a unit (ns, us, ms, s, m, h), like \"30s\" or \"1m30s\"", s)
	}
	if v < 0 {
		return fmt.Errorf("duration %q: must not be negative", s)
	}
	*d = Duration(v)
	return nil
}
