package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/pdk"
)

// chunkCases are chunks the fast path must read as encoding/json does, or
// decline.
var chunkCases = []string{
	`{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"m","system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"content":"line\nnext \"q\" \\ \/ \t \u00e9 \ud83d\ude00 \ud800 \udc00x"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"wörld ✓ 日本"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"bad ` + "\xff\xc3" + ` utf8"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"think","reasoning":null,"content":null}}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16,"prompt_tokens_details":{"cached_tokens":0}}}`,
	`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
	`{"choices":null,"usage":null}`,
	`{"choices":[null,{"index":1,"message":{"content":"whole"}}]}`,
	`  {"choices":[{"index":0,"delta":null,"finish_reason":"length"}]}  `,
	`{"choices":[{"index":0,"delta":{"content":"a"},"delta":{"reasoning":"b"}}]}`,
	`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`,
	`{"extra":[1,-2.5e+3,true,false,null,{"k":["v"]}],"choices":[]}`,
	// declined: tool calls, errors, keys that match only by case, odd numbers, bad JSON
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"f","arguments":""}}]}}]}`,
	`{"error":{"message":"overloaded","type":"server_error"}}`,
	`{"Choices":[{"index":0,"delta":{"content":"case"}}]}`,
	`{"choices":[{"INDEX":1,"delta":{"Content":"case"}}]}`,
	`{"choices":[{"index":1.0,"delta":{"content":"x"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x"}}],}`,
	`{"choices":[{"index":0,"delta":{"content":"x"}}]} trailing`,
	`{"choices":[{"index":0,"delta":{"content":"x` + "\x01" + `"}}]}`,
	`{"choices":[],"choices":[{"index":0}]}`,
	`{"usage":{"total_tokens":99999999999999999999999}}`,
}

// The fast path reads every chunk it accepts exactly as encoding/json does.
func TestParseChunkMatchesEncodingJSON(t *testing.T) {
	accepted := 0
	for _, in := range chunkCases[:13] {
		if checkParseChunk(t, in) {
			accepted++
		} else {
			t.Errorf("parseChunk declined an ordinary chunk: %s", in)
		}
	}
	if accepted < 13 {
		t.Fatalf("the fast path accepted %d of the 13 ordinary chunks", accepted)
	}
	for _, in := range chunkCases[13:] {
		var c chunk
		if parseChunk([]byte(in), &c) {
			t.Errorf("parseChunk accepted %s, which it must leave to encoding/json", in)
		}
	}
}

func checkParseChunk(t *testing.T, in string) bool {
	t.Helper()
	var got chunk
	if !parseChunk([]byte(in), &got) {
		return false
	}
	var want chunk
	if err := json.Unmarshal([]byte(in), &want); err != nil {
		t.Errorf("parseChunk accepted %s, which encoding/json refuses: %v", in, err)
		return true
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseChunk(%s) = %s, encoding/json reads %s", in, mustJSON(got), mustJSON(want))
	}
	return true
}

func FuzzParseChunk(f *testing.F) {
	for _, in := range chunkCases {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) { checkParseChunk(t, in) })
}

// Chunks that are already read when the parser would wait for more go out
// as one delta; the text and its order are the same.
func TestParseStreamJoinsWhatArrivesTogether(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []pdk.Delta
	}{
		{"text.sse", []pdk.Delta{{Content: "Hello, wörld!"}}},
		{"reasoning-crlf-nodone.sse", []pdk.Delta{{Thought: "Two plus two is four."}, {Content: "4"}}},
	} {
		b, err := os.ReadFile("testdata/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		var got []pdk.Delta
		if _, err := ParseStream(strings.NewReader(string(b)), func(d pdk.Delta) error { got = append(got, d); return nil }); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s read at once: deltas %+v, want %+v", tc.file, got, tc.want)
		}
	}
}

// splitReader hands out its data in pieces of random size.
type splitReader struct {
	rest []byte
	rnd  *rand.Rand
}

func (s *splitReader) Read(p []byte) (int, error) {
	if len(s.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 1+s.rnd.IntN(200))], s.rest)
	s.rest = s.rest[n:]
	return n, nil
}

// However the stream arrives, the deltas carry every piece of text once, in
// the order the server sent it: a piece lost, repeated or reordered by the
// joining fails this.
func TestParseStreamDeltasKeepOrderHoweverSplit(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		var stream strings.Builder
		var want []string // "c:text" or "t:text", one per piece, in order
		for i := range 1 + rnd.IntN(60) {
			piece := fmt.Sprintf("p%d.%d \"é\"\n", round, i)
			b, _ := json.Marshal(piece)
			switch rnd.IntN(4) {
			case 0:
				fmt.Fprintf(&stream, "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":%s}}]}\n\n", b)
				want = append(want, "t:"+piece)
			case 1:
				fmt.Fprintf(&stream, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s,\"reasoning\":\"r\"}}]}\n\n", b)
				want = append(want, "c:"+piece, "t:r")
			default:
				fmt.Fprintf(&stream, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s}}]}\n\n", b)
				want = append(want, "c:"+piece)
			}
		}
		stream.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		var got []string
		resp, err := ParseStream(&splitReader{rest: []byte(stream.String()), rnd: rnd}, func(d pdk.Delta) error {
			if d.Content != "" {
				got = append(got, "c:"+d.Content)
			}
			if d.Thought != "" {
				got = append(got, "t:"+d.Thought)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if g, w := runs(got), runs(want); !reflect.DeepEqual(g, w) {
			t.Fatalf("round %d: the deltas read\n%q\nwant\n%q", round, g, w)
		}
		var content strings.Builder
		for _, w := range want {
			if c, ok := strings.CutPrefix(w, "c:"); ok {
				content.WriteString(c)
			}
		}
		if resp.Message.Content != content.String() {
			t.Fatalf("round %d: the answer's content %q, want %q", round, resp.Message.Content, content.String())
		}
	}
}

// runs joins neighbouring pieces of the same kind: what a client that
// appends the deltas it reads ends up with, kind by kind, in order.
func runs(pieces []string) []string {
	var out []string
	for _, p := range pieces {
		if n := len(out); n > 0 && out[n-1][:2] == p[:2] {
			out[n-1] += p[2:]
			continue
		}
		out = append(out, p)
	}
	return out
}
