package store

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// Fuzz targets for every decoder of stored data: whatever bytes a damaged
// database holds, decoding returns a record or a *loop.CorruptError naming
// the key, and never panics.

func checkDecodeErr(t *testing.T, key []byte, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ce *loop.CorruptError
	if !errors.As(err, &ce) || ce.Key != string(key) {
		t.Fatalf("decode error %v is not a *loop.CorruptError naming %q", err, key)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte(`{"role":"assistant","toolCalls":[{"id":"1","name":"t","arguments":{"a":1}}]}`))
	f.Add([]byte(`{"role":"user","content":"hi","metadata":{"k":[1,"x",null]}}`))
	f.Add([]byte(`{"content":"no role"}`))
	f.Add([]byte(`null`))
	f.Add([]byte{0xff, 0x00})
	key := []byte("msg/c/00000000000000000001")
	f.Fuzz(func(t *testing.T, v []byte) {
		m, err := decodeMessage(key, v)
		checkDecodeErr(t, key, err)
		if err != nil {
			return
		}
		again, err := json.Marshal(&m)
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		if _, err := decodeMessage(key, again); err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
	})
}

func FuzzDecodeTask(f *testing.F) {
	f.Add([]byte(`{"id":"t","contextId":"c","status":"completed","createdAt":"2025-01-01T00:00:00Z","history":[{"role":"user"}]}`))
	f.Add([]byte(`{"id":"t","expiresAt":"not a time"}`))
	f.Add([]byte(`{"id":""}`))
	f.Add([]byte(`[]`))
	key := []byte("task/t")
	f.Fuzz(func(t *testing.T, v []byte) {
		tr, err := decodeTask(key, v)
		checkDecodeErr(t, key, err)
		if err == nil && tr.ID == "" {
			t.Fatal("decoded a task without id")
		}
	})
}

func FuzzDecodeAgent(f *testing.F) {
	f.Add([]byte(`{"contextId":"c","status":"ready","turnCount":2,"usage":{"totalTokens":3}}`))
	f.Add([]byte(`{"contextId":5}`))
	f.Add([]byte(`{}`))
	key := []byte("agent/c")
	f.Fuzz(func(t *testing.T, v []byte) {
		m, err := decodeAgent(key, v)
		checkDecodeErr(t, key, err)
		if err == nil && m.ContextID == "" {
			t.Fatal("decoded agent metadata without context id")
		}
	})
}

func FuzzDecodeSummary(f *testing.F) {
	f.Add([]byte(`{"s":"working","u":123,"c":"c","a":"a","o":"o"}`))
	f.Add([]byte(`{"u":-1}`))
	key := []byte("tidx/all/0000000000000000001/t")
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := decodeSummary(key, v)
		checkDecodeErr(t, key, err)
		if err == nil {
			s.match(&loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskWorking}})
		}
	})
}

func FuzzDecodeHead(f *testing.F) {
	f.Add(head{a: 1, b: 5}.encode())
	f.Add(head{a: 9, b: 5, c: 9}.encode())
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, v []byte) {
		h, err := decodeHead(v)
		if err != nil {
			if len(v) == headSize {
				t.Fatalf("a %d-byte head was refused: %v", headSize, err)
			}
			return
		}
		if string(h.encode()) != string(v) {
			t.Fatalf("head %x decodes to %+v which encodes to %x", v, h, h.encode())
		}
	})
}

func FuzzParseSeqKey(f *testing.F) {
	f.Add([]byte("msg/c/00000000000000000042"), uint64(42))
	f.Add([]byte("msg/c/99999999999999999999"), uint64(0))
	f.Add([]byte("msg/c/0000000000000000004x"), uint64(0))
	f.Add([]byte("msg/c/18446744073709551615"), uint64(1<<64-1))
	const prefix = "msg/c/"
	f.Fuzz(func(t *testing.T, key []byte, seq uint64) {
		if got, err := parseSeqKey(msgKey([]byte(prefix), seq), prefix); err != nil || got != seq {
			t.Fatalf("parseSeqKey(msgKey(%d)) = %d, %v", seq, got, err)
		}
		s, err := parseSeqKey(key, prefix)
		if err != nil {
			return
		}
		if string(msgKey([]byte(prefix), s)) != string(key) {
			t.Fatalf("parseSeqKey(%q) = %d, which is key %q", key, s, msgKey([]byte(prefix), s))
		}
	})
}

func FuzzParseTaskIdxKey(f *testing.F) {
	prefix := taskIdxPrefix(idxContext, "c/1")
	f.Add(taskIdxKey(prefix, 17, "task/%1"))
	f.Add([]byte("tidx/ctx/c%2F1/000000000000000001x/t"))
	f.Add([]byte("tidx/ctx/c%2F1/0000000000000000001/%"))
	f.Fuzz(func(t *testing.T, key []byte) {
		created, id, err := parseTaskIdxKey(key, prefix)
		if err != nil {
			return
		}
		if string(taskIdxKey(prefix, created, id)) != string(key) {
			// Escapes are case-insensitive on input; the canonical form
			// must at least parse back to the same task.
			c2, id2, err := parseTaskIdxKey(taskIdxKey(prefix, created, id), prefix)
			if err != nil || c2 != created || id2 != id {
				t.Fatalf("key %q parses to (%d, %q), which does not round-trip", key, created, id)
			}
		}
	})
}

func FuzzEscape(f *testing.F) {
	f.Add("plain")
	f.Add("a/b%c\x00\x7f")
	f.Fuzz(func(t *testing.T, s string) {
		e := escape(s)
		for i := 0; i < len(e); i++ {
			if e[i] == '/' {
				t.Fatalf("escape(%q) = %q contains '/'", s, e)
			}
		}
		back, err := unescape(e)
		if err != nil || back != s {
			t.Fatalf("unescape(escape(%q)) = %q, %v", s, back, err)
		}
		unescape(s) // must not panic on arbitrary input
	})
}

func FuzzDecodeIdent(f *testing.F) {
	f.Add([]byte(`{"contextId":"c","agentId":"a","owner":"o","createdAt":"2025-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"contextId":"c","createdAt":"yesterday"}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		ti, err := decodeIdent(v)
		if err != nil {
			return
		}
		for _, k := range ti.indexKeys("t") {
			if _, id, err := parseTaskIdxKey(k, k[:len(k)-len("0000000000000000000/t")]); err != nil || id != "t" {
				t.Fatalf("index key %q of a decoded placement does not parse: %v", k, err)
			}
		}
	})
}
