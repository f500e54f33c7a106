package chat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/looopy-go/looopy/host/chat"
)

// The chat works with any A2A server: here a2a-go's own server (a2asrv)
// with a trivial executor, over real HTTP, on A2A 1.0 and on 0.3 (a card
// that offers only 0.3). The executor streams text in two chunks (the
// second carrying a terminal escape sequence that must not reach the
// terminal), a progress message and a file artifact; "ask" pauses the
// task for a plain input-required answer; "slow" works until canceled.

type executor struct {
	mu       sync.Mutex
	answered []string      // the answers to "ask", as the executor got them
	release  chan struct{} // "wait" goes on when it is closed
}

func (e *executor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		text := ""
		for _, p := range ec.Message.Parts {
			text += p.Text()
		}
		if ec.StoredTask != nil { // the answer to "ask", on the same task
			e.mu.Lock()
			e.answered = append(e.answered, text)
			e.mu.Unlock()
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted,
				a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("Nice to meet you, "+text+"."))), nil)
			return
		}
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		switch text {
		case "ask":
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired,
				a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("What is your name?"))), nil)
		case "wait":
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking,
				a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("step one"))), nil) {
				return
			}
			<-e.release // on, whatever became of the request
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted,
				a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("after the break"))), nil)
		case "slow":
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking,
				a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("working slowly"))), nil) {
				return
			}
			<-ctx.Done()
		default:
			steps := []a2a.Event{
				a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking,
					a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("looking it up"))),
				&a2a.TaskArtifactUpdateEvent{TaskID: ec.TaskID, ContextID: ec.ContextID,
					Artifact: &a2a.Artifact{ID: "answer", Parts: a2a.ContentParts{a2a.NewTextPart("Hello, ")}}},
				&a2a.TaskArtifactUpdateEvent{TaskID: ec.TaskID, ContextID: ec.ContextID, Append: true, LastChunk: true,
					Artifact: &a2a.Artifact{ID: "answer", Parts: a2a.ContentParts{a2a.NewTextPart("world\x1b]0;pwned\x07 (" + text + ")")}}},
				&a2a.TaskArtifactUpdateEvent{TaskID: ec.TaskID, ContextID: ec.ContextID, LastChunk: true,
					Artifact: &a2a.Artifact{ID: "note", Name: "note.txt", Parts: a2a.ContentParts{
						&a2a.Part{Content: a2a.Raw("line one\nline two\n"), Filename: "note.txt", MediaType: "text/plain"}}}},
				a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil),
			}
			for _, ev := range steps {
				if !yield(ev, nil) {
					return
				}
			}
		}
	}
}

func (e *executor) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// breaker ends every response in flight when told to, as a dropped
// connection would.
type breakerT struct {
	mu      sync.Mutex
	cancels []context.CancelFunc
	stream  int // streaming requests since the last break
}

func (b *breakerT) streams() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stream
}

var breaker = &breakerT{}

func (b *breakerT) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		b.mu.Lock()
		b.cancels = append(b.cancels, cancel)
		if r.Header.Get("Accept") == "text/event-stream" {
			b.stream++
		}
		b.mu.Unlock()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (b *breakerT) breakAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.cancels {
		c()
	}
	b.cancels, b.stream = nil, 1
}

// serve runs a2asrv with the executor: A2A 1.0, or (v03) 0.3 only.
func serve(t *testing.T, v03 bool) (string, *executor) {
	t.Helper()
	return serveCard(t, v03, nil)
}

// serveCard is serve with extensions listed on the card.
func serveCard(t *testing.T, v03 bool, exts []a2a.AgentExtension) (string, *executor) {
	t.Helper()
	return serveNaming(t, v03, exts, "")
}

// serveNaming is serveCard with a card whose interface is on base (the
// server's own URL when empty) rather than where it is served.
func serveNaming(t *testing.T, v03 bool, exts []a2a.AgentExtension, base string) (string, *executor) {
	t.Helper()
	ex := &executor{release: make(chan struct{})}
	handler := a2asrv.NewHandler(ex)
	mux := http.NewServeMux()
	srv := httptest.NewServer(breaker.wrap(mux))
	t.Cleanup(srv.Close)
	if base == "" {
		base = srv.URL
	}
	card := &a2a.AgentCard{Name: "Trivial", Description: "a2asrv with a trivial executor", Version: "1",
		Capabilities: a2a.AgentCapabilities{Streaming: true, Extensions: exts}, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "hello", Name: "hello", Description: "says hello", Tags: []string{"hello"}}}}
	if v03 {
		card.SupportedInterfaces = []*a2a.AgentInterface{{URL: base + "/rpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version}}
		mux.Handle("/rpc", a2av0.NewJSONRPCHandler(handler))
		mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewAgentCardHandler(a2av0.NewStaticAgentCardProducer(card)))
	} else {
		card.SupportedInterfaces = []*a2a.AgentInterface{a2a.NewAgentInterface(base+"/rpc", a2a.TransportProtocolJSONRPC)}
		mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(handler))
		mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	}
	return srv.URL, ex
}

// session is a chat run in the test: lines typed into its input, its
// output read back.
type session struct {
	t     *testing.T
	in    *io.PipeWriter
	intr  chan struct{}
	out   *syncBuffer
	read  int
	done  chan error
	saved string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, opts chat.Options) *session {
	t.Helper()
	r, w := io.Pipe()
	s := &session{t: t, in: w, intr: make(chan struct{}, 2), out: &syncBuffer{}, done: make(chan error, 1), saved: t.TempDir()}
	opts.Interrupts, opts.SaveDir = s.intr, s.saved
	go func() { s.done <- chat.Run(context.Background(), opts, r, s.out) }()
	t.Cleanup(func() {
		_ = w.Close()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Errorf("the chat did not end when its input did")
		}
		if t.Failed() {
			t.Logf("output:\n%s", s.out.String())
		}
	})
	return s
}

func (s *session) say(line string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatalf("type %q: %v", line, err)
	}
}

// expect waits for want in the output after the last match and returns
// what came before it (the guard only fails fast).
func (s *session) expect(want string) string {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		o := s.out.String()
		if i := strings.Index(o[s.read:], want); i >= 0 {
			before := o[s.read : s.read+i]
			s.read += i + len(want)
			return before
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the chat never showed %q; after the last match:\n%s", want, o[s.read:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestChatWithA2ASrv(t *testing.T) {
	for _, v03 := range []bool{false, true} {
		name := "A2A-1.0"
		if v03 {
			name = "A2A-0.3"
		}
		t.Run(name, func(t *testing.T) {
			url, ex := serve(t, v03)
			s := start(t, chat.Options{URL: url})
			want := "(A2A 1.0 JSONRPC)"
			if v03 {
				want = "(A2A 0.3 JSONRPC)"
			}
			s.expect("Connected to Trivial " + want)
			s.expect("you> ")

			// Text in two chunks, progress, a file artifact.
			s.say("hi there")
			s.expect("… looking it up")
			s.expect("Hello, world]0;pwned (hi there)") // the escape and the bell removed, the rest shown as text
			s.expect("📎 artifact #1 note.txt: text/plain, 18 bytes — /save 1")
			s.expect("you> ")
			if o := s.out.String(); strings.ContainsAny(o, "\x1b\x07") {
				t.Fatalf("a control sequence from the server reached the terminal: %q", o)
			}
			s.say("/save 1")
			s.expect("saved artifact #1 to " + filepath.Join(s.saved, "artifact-1-note.txt"))
			if b, err := os.ReadFile(filepath.Join(s.saved, "artifact-1-note.txt")); err != nil || string(b) != "line one\nline two\n" {
				t.Fatalf("saved artifact = %q (%v)", b, err)
			}
			s.say("/save 1")
			s.expect("exists: give another path")
			s.say("/save 7")
			s.expect("no artifact #7")

			// A plain input-required pause: the next line answers it, as
			// text, on the same task.
			s.say("ask")
			s.expect("? the agent needs input-required: What is your name?")
			s.expect("answer> ")
			s.say("Ada")
			s.expect("Nice to meet you, Ada.")
			ex.mu.Lock()
			got := append([]string(nil), ex.answered...)
			ex.mu.Unlock()
			if len(got) != 1 || got[0] != "Ada" {
				t.Fatalf("the executor got answers %q, want [Ada] on the paused task", got)
			}

			// An interrupt cancels the running task over CancelTask.
			s.say("slow")
			s.expect("… working slowly")
			s.intr <- struct{}{}
			s.expect("canceling the turn")
			s.expect("⊘ canceled")
			s.expect("you> ")

			s.say("/quit")
			select {
			case err := <-s.done:
				if err != nil {
					t.Fatalf("chat ended with %v", err)
				}
				s.done <- nil
			case <-time.After(30 * time.Second):
				t.Fatal("the chat did not end at /quit")
			}
		})
	}
}

// A server whose card lists Looopy's extension but that serves no
// /events stream: the chat says so and draws the turn from A2A, nothing
// lost.
func TestChatWithoutTheEventStream(t *testing.T) {
	url, _ := serveCard(t, false, []a2a.AgentExtension{{URI: chat.ExtensionURI}})
	s := start(t, chat.Options{URL: url})
	s.expect("you> ")
	s.say("hi")
	s.expect("the host's event stream answered 404")
	s.expect("Hello, world]0;pwned (hi)")
	s.expect("📎 artifact #1 note.txt: text/plain, 18 bytes")
	s.expect("you> ")
	s.say("again")
	s.expect("Hello, world]0;pwned (again)")
	s.expect("you> ")
	if n := strings.Count(s.out.String(), "event stream answered"); n != 1 {
		t.Fatalf("the failing event stream was tried %d times, want once", n)
	}
	if n := strings.Count(s.out.String(), "Hello, world]0;pwned (hi)"); n != 1 {
		t.Fatalf("the first answer was shown %d times, want once", n)
	}
}

// A stream that breaks off before its task ends: the chat follows the
// task again (SubscribeToTask) and shows how it ends.
func TestChatFollowsATaskAfterTheStreamBreaks(t *testing.T) {
	url, ex := serve(t, false)
	s := start(t, chat.Options{URL: url})
	s.expect("you> ")
	s.say("wait")
	s.expect("… step one")
	breaker.breakAll()
	s.expect("(the stream broke off")
	s.expect("following task")
	// The task goes on once the chat follows it again.
	deadline := time.Now().Add(60 * time.Second)
	for breaker.streams() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the chat never followed the task again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(ex.release)
	got := s.expect("after the break")
	s.expect("you> ")
	if strings.Contains(got, "error") || strings.Contains(got, "the stream ended") {
		t.Fatalf("the task's end did not come on the stream that followed it:\n%s", got)
	}
}

// A URL with no agent behind it is an error, said at once.
func TestChatNoAgent(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	err := chat.Run(context.Background(), chat.Options{URL: srv.URL}, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "agent card") {
		t.Fatalf("Run against no agent = %v, want an error about the agent card", err)
	}
}

// Colours only when asked for (the command asks when its output is a
// terminal).
func TestChatColours(t *testing.T) {
	url, _ := serve(t, false)
	for _, color := range []bool{false, true} {
		var out syncBuffer
		err := chat.Run(context.Background(), chat.Options{URL: url, Color: color}, strings.NewReader("/context\n"), &out)
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(out.String(), "\x1b["); has != color {
			t.Fatalf("colour %v: output has escape sequences: %v\n%q", color, has, out.String())
		}
	}
}

// A hostile agent puts terminal control sequences (window title, clipboard
// write, clear screen, a one-byte CSI, a bidirectional override) in every
// string it sends: the task and context ids, the answer, the artifact's
// name, an error. None of them reaches the terminal, whichever line of the
// chat prints it.
func TestChatNeverPrintsControlSequencesFromTheServer(t *testing.T) {
	const evil = "\x1b]0;TITLE\x07\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x1b[H\x9b31m\u202e"
	ctxID, taskID := "ctx-"+evil, "task-"+evil
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"name": "hostile" + evil, "description": "d" + evil, "version": "1",
				"capabilities": map[string]any{"streaming": true}, "defaultInputModes": []string{"text/plain"},
				"defaultOutputModes": []string{"text/plain"}, "skills": []any{},
				"supportedInterfaces": []any{map[string]any{"url": srv.URL + "/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}}})
			return
		}
		var req struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		send := func(result any) {
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
			_, _ = w.Write(append(append([]byte("data: "), b...), '\n', '\n'))
		}
		switch req.Method {
		case "SendStreamingMessage":
			w.Header().Set("Content-Type", "text/event-stream")
			send(map[string]any{"task": map[string]any{"id": taskID, "contextId": ctxID, "status": map[string]any{"state": "TASK_STATE_WORKING"}}})
			send(map[string]any{"artifactUpdate": map[string]any{"taskId": taskID, "contextId": ctxID,
				"artifact": map[string]any{"artifactId": "a1", "name": "response", "parts": []any{map[string]any{"text": "answer " + evil + " end"}}}}})
			send(map[string]any{"artifactUpdate": map[string]any{"taskId": taskID, "contextId": ctxID,
				"artifact": map[string]any{"artifactId": "a2", "name": "file" + evil, "parts": []any{map[string]any{"raw": "aGk=", "mediaType": "application/octet-stream"}}}}})
			send(map[string]any{"statusUpdate": map[string]any{"taskId": taskID, "contextId": ctxID,
				"status": map[string]any{"state": "TASK_STATE_FAILED", "message": map[string]any{"messageId": "m" + evil, "role": "ROLE_AGENT", "parts": []any{map[string]any{"text": "failed " + evil}}}}}})
		default:
			w.Header().Set("Content-Type", "application/json")
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32001, "message": "no such task " + evil}})
			_, _ = w.Write(b)
		}
	}))
	defer srv.Close()
	s := start(t, chat.Options{URL: srv.URL})
	s.expect("you> ")
	s.say("hello")
	s.expect("you> ")
	s.say("/context")
	s.expect("context ctx-")
	s.say("/save 1")
	s.expect("saved artifact #1 to ")
	s.say("/cancel")
	s.say("/artifacts")
	s.expect("— /save 1")
	out := s.out.String()
	if !strings.Contains(out, "answer ") || !strings.Contains(out, "TITLE") {
		t.Fatalf("the hostile strings' printable parts never showed, so nothing was checked:\n%q", out)
	}
	for _, c := range []string{"\x1b", "\x07", "\x9b", "\u202e"} {
		if strings.Contains(out, c) {
			t.Fatalf("the chat printed %q from the server:\n%q", c, out)
		}
	}
}

// A card that names an interface on another origin (another host, port or
// scheme) never gets the API key sent there: the chat talks to the origin
// it was given, where the key belongs, and says so; a redirect elsewhere
// gets no key either.
func TestChatKeepsTheKeyToItsOrigin(t *testing.T) {
	var mu sync.Mutex
	var elsewhere []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		elsewhere = append(elsewhere, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "not here", http.StatusTeapot)
	}))
	defer other.Close()
	for _, v03 := range []bool{false, true} {
		url, _ := serveNaming(t, v03, nil, other.URL)
		s := start(t, chat.Options{URL: url, APIKey: "sk-secret"})
		s.expect("(the agent card names " + other.URL + "; talking to " + url + " instead)")
		s.expect("you> ")
		s.say("hi there")
		s.expect("Hello, world]0;pwned (hi there)") // answered at the typed origin
	}
	// A redirect to another origin: followed, without the key.
	redir := httptest.NewServer(http.RedirectHandler(other.URL+"/card", http.StatusFound))
	defer redir.Close()
	_ = chat.Run(context.Background(), chat.Options{URL: redir.URL, APIKey: "sk-secret"}, strings.NewReader(""), io.Discard)
	mu.Lock()
	defer mu.Unlock()
	if len(elsewhere) == 0 {
		t.Fatal("the redirect was not followed: nothing checked")
	}
	for _, r := range elsewhere {
		if strings.Contains(r, "sk-secret") {
			t.Fatalf("the key went to another origin: %q", elsewhere)
		}
	}
}
