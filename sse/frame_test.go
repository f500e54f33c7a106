package sse_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/sse"
)

func TestAppendFrame(t *testing.T) {
	cases := []struct {
		id    uint64
		event string
		data  string
		want  string
	}{
		{7, "task-status", `{"a":1}`, "id: 7\nevent: task-status\ndata: {\"a\":1}\n\n"},
		{0, "", `x`, "data: x\n\n"},
		{1, "a\nb", "one\ntwo\r\nthree\rfour", "id: 1\nevent: ab\ndata: one\ndata: two\ndata: three\ndata: four\n\n"},
		{2, "e", "", "id: 2\nevent: e\ndata: \n\n"},
	}
	for _, c := range cases {
		if got := string(sse.AppendFrame(nil, c.id, c.event, []byte(c.data))); got != c.want {
			t.Errorf("AppendFrame(%d, %q, %q) = %q, want %q", c.id, c.event, c.data, got, c.want)
		}
	}
}

func TestParseLastEventID(t *testing.T) {
	good := map[string]uint64{"": 0, "0": 0, "42": 42, " 17 ": 17, "18446744073709551615": 1<<64 - 1, "007": 7}
	for s, want := range good {
		if got, err := sse.ParseLastEventID(s); err != nil || got != want {
			t.Errorf("ParseLastEventID(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	bad := map[string]string{
		"-1":                    "decimal",
		"1.5":                   "decimal",
		"abc":                   "decimal",
		"+3":                    "decimal",
		"0x10":                  "decimal",
		"18446744073709551616":  "out of range",
		"123456789012345678901": "too long",
		"1 2":                   "decimal",
	}
	for s, why := range bad {
		if _, err := sse.ParseLastEventID(s); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseLastEventID(%q) error %v, want one saying %q", s, err, why)
		}
	}
}

func FuzzParseLastEventID(f *testing.F) {
	for _, s := range []string{"", "0", "42", " 9 ", "18446744073709551615", "18446744073709551616", "-1", "1e3", "\x00", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := sse.ParseLastEventID(s)
		if err != nil {
			if id != 0 {
				t.Fatalf("error with id %d", id)
			}
			return
		}
		tr := strings.TrimSpace(s)
		if tr == "" {
			if id != 0 {
				t.Fatalf("empty gives %d", id)
			}
			return
		}
		want, perr := strconv.ParseUint(tr, 10, 64)
		if perr != nil || want != id || strings.ContainsAny(tr, "+-_") {
			t.Fatalf("ParseLastEventID(%q) = %d, strconv says %d, %v", s, id, want, perr)
		}
	})
}
