package sse_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/loop"
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

func TestServeA2AFramesAreOneLineWhateverTheRequestID(t *testing.T) {
	h := newHub(t, sse.Config{Log: memoryLog(t)})
	ctx := t.Context()
	stream := sse.TaskStream("t1")
	for _, e := range taskEvents("t1", loop.TaskCompleted) {
		if _, err := h.Publish(ctx, stream, e); err != nil {
			t.Fatal(err)
		}
	}
	ids := []any{json.RawMessage("{\n\"a\": 1}"), json.RawMessage(" 12 "), "plain", "qu\"ote\n<&>", 3, int64(4), nil, 2.5}
	for _, id := range ids {
		sub, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		err = sse.Serve(ctx, &buf, nil, sub, sse.A2AEncoder{RequestID: id}, sse.ServeOptions{Heartbeat: -1})
		_ = sub.Close()
		if err != nil {
			t.Fatalf("id %#v: %v", id, err)
		}
		fs := eventFrames(parseFrames(t, buf.Bytes()))
		if len(fs) != 6 {
			t.Fatalf("id %#v: %d frames, want 6", id, len(fs))
		}
		want, _ := json.Marshal(id)
		if raw, ok := id.(json.RawMessage); ok {
			var c bytes.Buffer
			_ = json.Compact(&c, raw)
			want = c.Bytes()
		}
		for _, f := range fs {
			if strings.Contains(f.data, "\n") {
				t.Fatalf("id %#v: frame data spans lines: %q", id, f.data)
			}
			var env struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Result  json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal([]byte(f.data), &env); err != nil || env.JSONRPC != "2.0" || len(env.Result) == 0 {
				t.Fatalf("id %#v: frame %q: %v", id, f.data, err)
			}
			var got, exp any
			_ = json.Unmarshal(env.ID, &got)
			_ = json.Unmarshal(want, &exp)
			if fmt.Sprint(got) != fmt.Sprint(exp) {
				t.Fatalf("id %#v came back as %s", id, env.ID)
			}
		}
	}
	sub, err := h.Subscribe(ctx, stream, 0, sse.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sse.Serve(ctx, &bytes.Buffer{}, nil, sub, sse.A2AEncoder{RequestID: json.RawMessage("{oops")}, sse.ServeOptions{Heartbeat: -1}); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Fatalf("an invalid raw id: %v", err)
	}
}

func TestParseFilter(t *testing.T) {
	f, err := sse.ParseFilter([]string{"a, b", "", "c"}, []string{"content-delta,task-status", " tool-start "})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(f.TaskIDs) != "[a b c]" || fmt.Sprint(f.Kinds) != "[content-delta task-status tool-start]" || f.Internal {
		t.Fatalf("filter %+v", f)
	}
	if f, err := sse.ParseFilter(nil, nil); err != nil || len(f.TaskIDs)+len(f.Kinds) != 0 {
		t.Fatalf("empty filter %+v %v", f, err)
	}
	if _, err := sse.ParseFilter(nil, []string{"nope"}); err == nil || !strings.Contains(err.Error(), `unknown event kind "nope"`) {
		t.Fatalf("unknown kind: %v", err)
	}
	if _, err := sse.ParseFilter(nil, []string{"internal:llm-call"}); err == nil || !strings.Contains(err.Error(), "internal") {
		t.Fatalf("internal kind: %v", err)
	}
}
