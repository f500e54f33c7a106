package artifacts

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

// TestConcurrentAppendsKeepOrder states the guarantee for concurrent
// appends to one file artifact: every chunk is stored whole at its own
// index; chunks from one goroutine keep the order it appended them in; the
// events come out in index order (0, 1, 2, ... with no gap or repeat) and
// their data, in that order, is exactly what a read returns.
func TestConcurrentAppendsKeepOrder(t *testing.T) {
	const writers, chunks = 8, 40
	for _, b := range backends(t, Config{InlineMax: 12}) { // some chunks spill to blobs
		t.Run(b.name, func(t *testing.T) {
			rec := &recorder{t: t}
			scope := Scope{ContextID: "c", TaskID: "t"}
			info := must[Info](t)(NewWriter(b.store, scope, rec.emit).Create(ctxb, Spec{Kind: KindFile}))
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for g := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w := NewWriter(b.store, scope, rec.emit) // a writer each: the ordering lock is the store's
					for i := range chunks {
						pad := ""
						if g == 0 && i%3 == 0 {
							pad = strings.Repeat("+", 10) // longer: goes to a blob
						}
						chunk := fmt.Sprintf("g%d-%03d%s;", g, i, pad)
						if _, err := w.AppendText(ctxb, info.ID, chunk, false); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			got := content(t, b.store, info.ID)
			var fromEvents []byte
			for i, e := range rec.all() {
				fw := e.(*loop.FileWrite)
				if fw.Index != i {
					t.Fatalf("event %d has index %d", i, fw.Index)
				}
				fromEvents = append(fromEvents, fw.Data...)
			}
			if !bytes.Equal(got, fromEvents) {
				t.Fatal("read differs from the events in index order")
			}
			last := map[string]int{}
			n := 0
			for _, c := range strings.Split(strings.TrimSuffix(string(got), ";"), ";") {
				c = strings.TrimRight(c, "+")
				var g, i int
				if _, err := fmt.Sscanf(c, "g%d-%d", &g, &i); err != nil {
					t.Fatalf("torn chunk %q", c)
				}
				key := fmt.Sprint(g)
				if prev, ok := last[key]; ok && i != prev+1 {
					t.Fatalf("writer %d: chunk %d after %d", g, i, prev)
				}
				last[key] = i
				n++
			}
			if n != writers*chunks || must[Info](t)(b.store.Get(ctxb, info.ID)).Parts != writers*chunks {
				t.Fatalf("%d chunks stored, want %d", n, writers*chunks)
			}
		})
	}
}

func TestWriterCompleteEvents(t *testing.T) {
	s := NewMemory(nil, Config{})
	rec := &recorder{t: t}
	w := NewWriter(s, Scope{ContextID: "c", TaskID: "t"}, rec.emit)
	f := must[Info](t)(w.Create(ctxb, Spec{Kind: KindFile, Name: "empty.txt"}))
	must[Info](t)(w.Complete(ctxb, f.ID))
	ds := must[Info](t)(w.Create(ctxb, Spec{Kind: KindDataset, Name: "none", Schema: salesSchema}))
	must[Info](t)(w.Complete(ctxb, ds.ID))
	d := must[Info](t)(w.Create(ctxb, Spec{Kind: KindData, Name: "unset"}))
	must[Info](t)(w.Complete(ctxb, d.ID))
	failed := must[Info](t)(w.Create(ctxb, Spec{Kind: KindFile}))
	must[Info](t)(w.AppendText(ctxb, failed.ID, "partial", false))
	must[Info](t)(w.Fail(ctxb, failed.ID, "upstream error"))
	events := rec.all()
	if len(events) != 5 {
		t.Fatalf("%d events, want 5", len(events))
	}
	if fail := events[4].(*loop.FileWrite); fail.Index != 1 || !fail.Complete || fail.Data != "" || fail.Error != "upstream error" {
		t.Fatalf("failure event %+v", fail)
	}
	fw := events[0].(*loop.FileWrite)
	if fw.Index != 0 || !fw.Complete || fw.Data != "" || fw.Name != "empty.txt" || fw.MimeType == "" {
		t.Fatalf("empty file completion %+v", fw)
	}
	dw := events[1].(*loop.DatasetWrite)
	if dw.Index != 0 || !dw.Complete || len(dw.Rows) != 0 || dw.Schema == nil {
		t.Fatalf("empty dataset completion %+v", dw)
	}
	if data := events[2].(*loop.DataWrite); data.Version != 0 || len(data.Data) != 0 {
		t.Fatalf("unwritten data completion %+v", data)
	}
	checkRebuild(t, s, events[:3])
}

func TestApplyOps(t *testing.T) {
	for _, b := range backends(t, Config{InlineMax: 64}) {
		t.Run(b.name, func(t *testing.T) {
			rec := &recorder{t: t}
			w := NewWriter(b.store, Scope{ContextID: "c", TaskID: "t", Owner: "plugin-user"}, rec.emit)
			apply := func(js string) OpResult {
				t.Helper()
				r, err := w.ApplyJSON(ctxb, []byte(js))
				if err != nil {
					t.Fatalf("%s: %v", js, err)
				}
				return r
			}
			// A binary file: bytes that are not UTF-8, sent base64 in events.
			png := apply(`{"op":"create","name":"dot.png","mimeType":"image/png","binary":true}`).ArtifactID
			raw1 := append([]byte{0x89, 'P', 'N', 'G', 0xff, 0x00}, bytes.Repeat([]byte{0xfe}, 100)...)
			raw2 := []byte{0, 1, 2, 0x80}
			apply(fmt.Sprintf(`{"op":"append","artifactId":%q,"base64":%q}`, png, base64.StdEncoding.EncodeToString(raw1)))
			apply(fmt.Sprintf(`{"op":"append","artifactId":%q,"base64":%q,"last":true}`, png, base64.StdEncoding.EncodeToString(raw2)))
			// A dataset from CSV, the way a CSV-producing tool writes one.
			ds := apply(`{"op":"create","kind":"dataset","name":"sales.csv","schema":{"columns":[{"name":"region","type":"string"},{"name":"total","type":"number"},{"name":"units","type":"integer"}]}}`).ArtifactID
			apply(fmt.Sprintf(`{"op":"append","artifactId":%q,"csv":"units,region,total\n3,north,12.5\n,\"south, far\",\n"}`, ds))
			r := apply(fmt.Sprintf(`{"op":"append","artifactId":%q,"rows":[{"region":"east","total":1e3,"units":7}],"last":true}`, ds))
			if r.Rows != 3 || r.Status != StatusComplete {
				t.Fatalf("dataset result %+v", r)
			}
			data := apply(`{"op":"create","kind":"data","name":"state"}`).ArtifactID
			apply(fmt.Sprintf(`{"op":"write","artifactId":%q,"data":{"a":1,"b":{"c":[true,null]}}}`, data))
			if v := apply(fmt.Sprintf(`{"op":"merge","artifactId":%q,"data":{"a":2},"last":true}`, data)).Version; v != 2 {
				t.Fatalf("merge version %d", v)
			}
			txt := apply(`{"op":"create","name":"log.txt"}`).ArtifactID
			apply(fmt.Sprintf(`{"op":"append","artifactId":%q,"text":"one\n"}`, txt))
			apply(fmt.Sprintf(`{"op":"append","artifactId":%q,"text":"two\n"}`, txt))
			apply(fmt.Sprintf(`{"op":"replace","artifactId":%q,"index":0,"text":"ONE\n"}`, txt))
			apply(fmt.Sprintf(`{"op":"complete","artifactId":%q}`, txt))

			built := checkRebuild(t, b.store, rec.all())
			if got := built[png].bytes(t); !bytes.Equal(got, append(append([]byte{}, raw1...), raw2...)) {
				t.Fatal("binary file rebuilt wrong")
			}
			if got := string(built[ds].bytes(t)); got != `{"region":"north","total":12.5,"units":3}`+"\n"+`{"region":"south, far","total":null,"units":null}`+"\n"+`{"region":"east","total":1000,"units":7}`+"\n" {
				t.Fatalf("dataset %s", got)
			}
			if got := string(content(t, b.store, data)); got != `{"a":2,"b":{"c":[true,null]}}` {
				t.Fatalf("data %s", got)
			}
			if got := string(content(t, b.store, txt)); got != "ONE\ntwo\n" {
				t.Fatalf("text %q", got)
			}

			bad := []struct{ op, want string }{
				{`{"op":"append","artifactId":"x","text":"a","colour":1}`, `unknown field "colour"`},
				{`{"op":"append","artifactId":"x","text":"a","base64":"YQ=="}`, "exactly one"},
				{`{"op":"append","text":"a"}`, "artifactId"},
				{`{"op":"explode","artifactId":"x"}`, "unknown op"},
				{`{"artifactId":"x"}`, `missing "op"`},
				{`[1]`, "cannot unmarshal"},
				{`{"op":"complete","artifactId":"x"} {}`, "after the JSON object"},
				{fmt.Sprintf(`{"op":"append","artifactId":%q,"base64":"***"}`, png), "base64"},
				{fmt.Sprintf(`{"op":"append","artifactId":%q,"text":"late"}`, txt), "is complete"},
				{fmt.Sprintf(`{"op":"append","artifactId":%q,"csv":"region\nx\n"}`, txt), "is a file"},
				{fmt.Sprintf(`{"op":"write","artifactId":%q}`, data), `"data"`},
			}
			for _, c := range bad {
				_, err := w.ApplyJSON(ctxb, []byte(c.op))
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("%s: %v, want an error saying %q", c.op, err, c.want)
				}
			}
			ds2 := apply(`{"op":"create","kind":"dataset","schema":{"columns":[{"name":"n","type":"integer"}]}}`).ArtifactID
			_, err := w.ApplyJSON(ctxb, []byte(fmt.Sprintf(`{"op":"append","artifactId":%q,"csv":"n\n1\n2.5\n"}`, ds2)))
			var re *RowError
			if !errors.As(err, &re) || re.Row != 1 || re.Column != "n" {
				t.Fatalf("csv refusal %v", err)
			}
			if _, err := w.ApplyJSON(ctxb, []byte(fmt.Sprintf(`{"op":"append","artifactId":%q,"csv":"m\n1\n"}`, ds2))); !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), `column "m"`) {
				t.Fatalf("csv header with an unknown column: %v", err)
			}
			other := NewWriter(b.store, Scope{ContextID: "c", TaskID: "t2"}, rec.emit)
			if _, err := other.ApplyJSON(ctxb, []byte(fmt.Sprintf(`{"op":"append","artifactId":%q,"rows":[{"n":1}]}`, ds2))); !errors.Is(err, ErrForeign) {
				t.Fatalf("write from another task: %v", err)
			}
			// Another conversation's artifact and no artifact read alike,
			// so a writer trying ids learns nothing of others'.
			stranger := NewWriter(b.store, Scope{ContextID: "c2", TaskID: "t3"}, rec.emit)
			_, foreign := stranger.ApplyJSON(ctxb, []byte(fmt.Sprintf(`{"op":"append","artifactId":%q,"rows":[{"n":1}]}`, ds2)))
			if !errors.Is(foreign, ErrForeign) || !errors.Is(foreign, ErrNotFound) {
				t.Fatalf("write from another context: %v", foreign)
			}
			missing := "art-000000000000000000000000"
			_, absent := stranger.ApplyJSON(ctxb, []byte(fmt.Sprintf(`{"op":"append","artifactId":%q,"rows":[{"n":1}]}`, missing)))
			if !errors.Is(absent, ErrNotFound) || strings.ReplaceAll(foreign.Error(), ds2, "ID") != strings.ReplaceAll(absent.Error(), missing, "ID") {
				t.Fatalf("another task's artifact: %q; a missing one: %q: they must read alike", foreign, absent)
			}
		})
	}
}
