package chat

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2aext"
	"github.com/a2aproject/a2a-go/v2/errordetails"
)

// ExtensionURI names Looopy's humans-in-the-loop extension
// (docs/A2A_EXTENSION.md): the key of its data parts and metadata.
const ExtensionURI = "https://github.com/looopy-go/looopy/blob/main/docs/A2A_EXTENSION.md#v1"

// DefaultURL is the agent the chat talks to when none is given: a host
// started with its defaults on this machine.
const DefaultURL = "http://127.0.0.1:8080"

// Options configure a chat.
type Options struct {
	// URL is the agent's base URL; its card is read from
	// URL/.well-known/agent-card.json.
	URL string
	// APIKey, when set, goes with every request: as a bearer token, or in
	// the header APIKeyHeader names.
	APIKey       string
	APIKeyHeader string
	// ContextID resumes a conversation; empty starts a new one.
	ContextID string
	// Color paints the meta lines (set it when the output is a terminal).
	Color bool
	// SaveDir is where /save writes when it is given no path ("." when
	// empty).
	SaveDir string
	// NoThoughts hides the agent's thoughts (Looopy hosts only).
	NoThoughts bool
	// Interrupts carries one value per interrupt (Ctrl-C): the first
	// cancels the running turn, a second before the next line quits.
	Interrupts <-chan struct{}
	// Transport, when set, carries the requests (tests); the default is
	// http.DefaultTransport.
	Transport http.RoundTripper
	// Echo, when set, turns the terminal's echo of typed input off (false)
	// and on again (true): off while a credential is typed, so that it
	// never shows on the screen or in a scrollback.
	Echo func(on bool)
}

// Run holds a conversation until the input ends, /quit, a second
// interrupt or ctx's end. It returns an error only when the agent can not
// be reached at all (its card, or a client for it).
func Run(ctx context.Context, opts Options, in io.Reader, out io.Writer) error {
	if opts.URL == "" {
		opts.URL = DefaultURL
	}
	opts.URL = strings.TrimRight(opts.URL, "/")
	if opts.SaveDir == "" {
		opts.SaveDir = "."
	}
	s := &session{opts: opts, p: &printer{w: out, color: opts.Color}, contextID: opts.ContextID, arts: map[string]*artifact{}}
	origin, err := originOf(opts.URL)
	if err != nil {
		return fmt.Errorf("agent URL %q: %w", opts.URL, err)
	}
	s.hc = &http.Client{Transport: authTransport{base: opts.Transport, key: opts.APIKey, header: opts.APIKeyHeader, origin: origin}}
	if err := s.connect(ctx); err != nil {
		return err
	}
	defer func() { _ = s.client.Destroy() }()

	lines := make(chan string)
	go readLines(in, lines)
	s.lines = lines
	if s.contextID != "" {
		s.resume(ctx)
	}
	s.p.line(styleDim, "Type a message; /help lists the commands, Ctrl-C cancels a turn, /quit leaves.")
	return s.loop(ctx)
}

// authTransport adds the API key to every request for the origin the
// user typed, and to no other: not to an interface a card names elsewhere,
// nor to a redirect's target.
type authTransport struct {
	base   http.RoundTripper
	key    string
	header string
	origin string
}

// originOf is a URL's scheme://host:port, the port made explicit.
func originOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("want an http:// or https:// URL")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Scheme + "://" + strings.ToLower(net.JoinHostPort(u.Hostname(), port)), nil
}

func (t authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	if o, err := originOf(r.URL.String()); t.key == "" || err != nil || o != t.origin {
		return base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	if t.header == "" || strings.EqualFold(t.header, "Authorization") {
		r.Header.Set("Authorization", "Bearer "+t.key)
	} else {
		r.Header.Set(t.header, t.key)
	}
	return base.RoundTrip(r)
}

func readLines(in io.Reader, out chan<- string) {
	defer close(out)
	r := bufio.NewReader(in)
	for {
		s, err := r.ReadString('\n')
		if s != "" || err == nil {
			out <- strings.TrimRight(s, "\r\n")
		}
		if err != nil {
			return
		}
	}
}

type session struct {
	opts      Options
	p         *printer
	hc        *http.Client
	client    *a2aclient.Client
	card      *a2a.AgentCard
	looopy    bool // the card lists Looopy's extension: /events is there
	noFeed    bool // /events failed once: A2A alone from then on
	contextID string
	lastEvent int64 // the last /events id seen in this context

	lines      <-chan string
	interrupts int  // interrupts since the last line
	hidden     bool // the terminal's echo is off while a secret is typed

	pause   *pause
	arts    map[string]*artifact // by task and artifact id
	artList []*artifact          // in arrival order; /save N is 1-based
}

// connect reads the card and makes the client: A2A 1.0 when the card
// offers it, else 0.3 through the SDK's compatibility transport.
func (s *session) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res := &agentcard.Resolver{Client: s.hc, CardParser: parseCard}
	card, err := res.Resolve(cctx, s.opts.URL)
	if err != nil {
		return fmt.Errorf("read the agent card of %s: %w", s.opts.URL, err)
	}
	s.card = card
	if moved := s.keepToOrigin(card); moved != "" {
		s.p.line(styleDim, "(the agent card names %s; talking to %s instead)", moved, s.opts.URL)
	}
	s.client, err = a2aclient.NewFromCard(cctx, card,
		a2aclient.WithJSONRPCTransport(s.hc),
		a2aclient.WithRESTTransport(s.hc),
		a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: s.hc}),
		a2aclient.WithCallInterceptors(a2aext.NewActivator(ExtensionURI)),
	)
	if err != nil {
		return fmt.Errorf("no way to talk to %s: %w", s.opts.URL, err)
	}
	for _, e := range card.Capabilities.Extensions {
		if e.URI == ExtensionURI {
			s.looopy = true
		}
	}
	s.p.line(styleBold, "Connected to %s (%s) at %s", sanitize(orDash(card.Name)), protocolOf(card), s.opts.URL)
	if card.Description != "" {
		s.p.line(styleDim, "%s", sanitize(card.Description))
	}
	return nil
}

// keepToOrigin points every interface of the card at the origin the user
// typed, keeping its path: a card (the agent's own, or one a proxy
// rewrote) must not send the conversation, and with it the API key, to
// another origin. It returns the first other origin the card named.
func (s *session) keepToOrigin(card *a2a.AgentCard) string {
	typed, _ := originOf(s.opts.URL)
	moved := ""
	for i := range card.SupportedInterfaces {
		iface := card.SupportedInterfaces[i]
		if iface == nil {
			continue
		}
		u, err := url.Parse(iface.URL)
		if err != nil {
			continue
		}
		if o, err := originOf(iface.URL); err == nil && o == typed {
			continue
		}
		if moved == "" {
			moved = u.Scheme + "://" + u.Host
		}
		t, _ := url.Parse(s.opts.URL)
		u.Scheme, u.Host, u.User = t.Scheme, t.Host, nil
		iface.URL = u.String()
	}
	return moved
}

// parseCard reads a 1.0 card, or a 0.3 one (which names no
// supportedInterfaces).
func parseCard(b []byte) (*a2a.AgentCard, error) {
	card, err := agentcard.DefaultCardParser(b)
	if err == nil && len(card.SupportedInterfaces) > 0 {
		return card, nil
	}
	return a2av0.NewAgentCardParser()(b)
}

func protocolOf(card *a2a.AgentCard) string {
	best := ""
	for _, i := range card.SupportedInterfaces {
		v := "A2A " + string(i.ProtocolVersion) + " " + string(i.ProtocolBinding)
		if best == "" || strings.HasPrefix(string(i.ProtocolVersion), "1") {
			best = v
			if strings.HasPrefix(string(i.ProtocolVersion), "1") {
				break
			}
		}
	}
	return best
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// loop reads lines and acts on them until the conversation ends.
func (s *session) loop(ctx context.Context) error {
	defer s.hideInput(false)
	for {
		// The echo goes off before the prompt shows, so that nothing
		// typed in answer to it is echoed.
		s.hideInput(s.pause != nil && s.pause.secret())
		s.p.prompt(s.promptText())
		select {
		case <-ctx.Done():
			s.p.endLine()
			return nil
		case <-s.opts.Interrupts:
			s.interrupts++
			if s.interrupts >= 2 {
				s.p.line(styleDim, "bye")
				return nil
			}
			if s.pause != nil {
				s.p.line(styleAsk, "^C: canceling the paused task (Ctrl-C again quits)")
				s.cancelPaused(ctx)
				continue
			}
			s.p.line(styleDim, "^C: Ctrl-C again (or /quit) leaves")
		case line, ok := <-s.lines:
			s.hideInput(false)
			if !ok {
				s.p.endLine()
				return nil
			}
			s.interrupts = 0
			if quit := s.handle(ctx, line); quit {
				return nil
			}
		}
	}
}

// hideInput turns the terminal's echo off while a secret is typed, and on
// again (ending the line the unechoed Enter left open).
func (s *session) hideInput(hide bool) {
	if s.opts.Echo == nil || hide == s.hidden {
		return
	}
	s.hidden = hide
	s.opts.Echo(!hide)
	if !hide {
		s.p.newline()
	}
}

func (s *session) promptText() string {
	if s.pause != nil {
		return s.pause.promptText()
	}
	return "you> "
}

const helpText = `Commands:
  /help               this list
  /quit, /exit        leave (so does Ctrl-D, or Ctrl-C twice)
  /cancel             cancel the paused task
  /artifacts          list the artifacts received
  /save N [path]      save artifact N (to path, or to artifact-N-<its name> here)
  /context            show the conversation's context id
  /new                start a new conversation
Anything else is sent to the agent. While a turn runs, Ctrl-C cancels it.
When the agent asks for an approval: y (approve), n [reason] (reject),
e {json} (approve with edited arguments, when allowed).`

// handle acts on one line; it reports whether the chat should end.
func (s *session) handle(ctx context.Context, line string) bool {
	trimmed := strings.TrimSpace(line)
	if strings.HasPrefix(trimmed, "/") {
		f := strings.Fields(trimmed)
		switch f[0] {
		case "/quit", "/exit":
			return true
		case "/help":
			s.p.line(styleNone, "%s", helpText)
		case "/cancel":
			if s.pause == nil {
				s.p.line(styleDim, "nothing to cancel: no task is paused")
			} else {
				s.cancelPaused(ctx)
			}
		case "/artifacts":
			s.listArtifacts()
		case "/save":
			s.save(f[1:])
		case "/context":
			if s.contextID == "" {
				s.p.line(styleDim, "no context yet: the first message starts one")
			} else {
				s.p.line(styleNone, "context %s", s.contextID)
			}
		case "/new":
			s.contextID, s.lastEvent, s.pause = "", 0, nil
			s.p.line(styleDim, "new conversation")
		default:
			s.p.line(styleErr, "unknown command %s (/help lists them)", f[0])
		}
		return false
	}
	if s.pause != nil {
		return s.answer(ctx, trimmed)
	}
	if trimmed == "" {
		return false
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(line))
	return s.turn(ctx, msg)
}

// cancelPaused cancels the task that waits for an answer.
func (s *session) cancelPaused(ctx context.Context) {
	id := s.pause.taskID
	s.pause = nil
	s.cancelTask(ctx, id)
}

func (s *session) cancelTask(ctx context.Context, id a2a.TaskID) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := s.client.CancelTask(cctx, &a2a.CancelTaskRequest{ID: id})
	if err != nil {
		s.p.line(styleErr, "cancel %s: %s", id, sanitize(err.Error()))
		return
	}
	if t != nil && t.Status.State.Terminal() {
		s.p.line(styleAsk, "⊘ task %s: %s", id, stateName(t.Status.State))
	}
}

func stateName(st a2a.TaskState) string {
	s := strings.ToLower(strings.TrimPrefix(string(st), "TASK_STATE_"))
	return strings.ReplaceAll(s, "_", "-")
}

// streamItem is one event of a stream, or the error that ended it.
type streamItem struct {
	ev  a2a.Event
	err error
}

// turnState is what one leg of a turn (a message and its stream) learned.
type turnState struct {
	taskID       a2a.TaskID
	state        a2a.TaskState
	textShown    bool
	cancelWanted bool
	canceling    bool
	ended        bool // a final event came (terminal, paused, or a message)
}

// turn sends msg and shows its stream until the task ends or pauses. It
// reports whether the chat should end (a second interrupt).
func (s *session) turn(ctx context.Context, msg *a2a.Message) bool {
	if msg.ContextID == "" {
		msg.ContextID = s.contextID
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := pump(tctx, s.client.SendStreamingMessage(tctx, &a2a.SendMessageRequest{Message: msg}))
	tries, lastEvent := 0, time.Now() // following the task again: tries since the last event
	st := &turnState{taskID: msg.TaskID}
	events := 0
	// Against a Looopy host the turn is drawn from its event stream (one
	// ordered log: text, tool calls, sub-agents, artifacts); the A2A events
	// are kept and only their final status is shown, once that stream has
	// caught up. Should the stream fail, the kept events are drawn instead.
	var feed *eventFeed
	var kept []a2a.Event
	defer func() {
		if feed != nil {
			feed.stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-s.opts.Interrupts:
			s.interrupts++
			if s.interrupts >= 2 {
				s.p.line(styleDim, "bye")
				return true
			}
			s.p.line(styleAsk, "^C: canceling the turn (Ctrl-C again quits)")
			if st.taskID == "" {
				st.cancelWanted = true
			} else {
				st.canceling = true
				go s.cancelTask(ctx, st.taskID)
			}
		case <-feed.failedCh():
			feed.stop()
			st.textShown = st.textShown || feed.st.textShown
			feed, s.noFeed = nil, true
			for _, ev := range kept {
				s.render(st, ev)
			}
			kept = nil
		case it, ok := <-items:
			if (!ok || brokeOff(it.err)) && events > 0 && !st.ended && st.taskID != "" && time.Since(lastEvent) < followFor {
				// The stream broke off before the task ended or paused
				// (a dropped connection, the host stopping or not back
				// yet): follow the task again.
				tries++
				why := "ended"
				if ok {
					why = sanitize(it.err.Error())
				}
				if tries == 1 {
					s.p.line(styleDim, "(the stream broke off: %s; following task %s again)", why, st.taskID)
				}
				select {
				case <-time.After(min(time.Duration(tries)*500*time.Millisecond, 5*time.Second)):
				case <-ctx.Done():
					return true
				}
				items = pump(tctx, s.client.SubscribeToTask(tctx, &a2a.SubscribeToTaskRequest{ID: st.taskID}))
				continue
			}
			if !ok {
				if events == 0 {
					s.silent(ctx)
				}
				s.finishTurn(ctx, st, &feed, kept)
				return false
			}
			events++
			if it.err == nil {
				tries, lastEvent = 0, time.Now()
			}
			if it.err != nil {
				if refused(it.err) {
					s.refusedLine(it.err)
				} else {
					s.p.line(styleErr, "error: %s", sanitize(it.err.Error()))
				}
				s.finishTurn(ctx, st, &feed, kept)
				return false
			}
			if feed != nil {
				s.note(st, it.ev)
				kept = append(kept, it.ev)
			} else {
				s.render(st, it.ev)
			}
			if st.cancelWanted && st.taskID != "" {
				st.cancelWanted, st.canceling = false, true
				go s.cancelTask(ctx, st.taskID)
			}
			if feed == nil && s.looopy && !s.noFeed && !st.ended && st.taskID != "" && s.contextID != "" {
				feed = s.follow(ctx, st.taskID)
			}
		}
	}
}

// followFor bounds how long a turn whose stream broke off tries to follow
// its task again without getting an event (a host restarting takes a few
// seconds; one that does not come back is given up on).
const followFor = 2 * time.Minute

// brokeOff reports whether a stream's error means it broke off while its
// task may go on: a failed connection, or the host stopping (SHUTTING_DOWN,
// whose message says to subscribe again; a task it stops is resumed when
// it comes back). Any other error the agent answered is the turn's.
func brokeOff(err error) bool {
	if err == nil {
		return false
	}
	var ae *a2a.Error
	if !errors.As(err, &ae) {
		return !errors.Is(err, a2a.ErrTaskNotFound)
	}
	return reasonOf(ae) == reasonShuttingDown
}

// reasonShuttingDown is a Looopy host's reason for refusing while it
// stops.
const reasonShuttingDown = "SHUTTING_DOWN"

// reasonOf is the reason a Looopy host gave for an error: its ErrorInfo
// metadata's (A2A 1.0), or the one leading the message of a 0.3 server
// error ("SHUTTING_DOWN: ..."); "" when it says none.
func reasonOf(ae *a2a.Error) string {
	for _, d := range ae.TypedDetails {
		if d == nil || d.TypeURL != errordetails.ErrorInfoType {
			continue
		}
		switch m := d.Value["metadata"].(type) {
		case map[string]string:
			if r := m["reason"]; r != "" {
				return r
			}
		case map[string]any:
			if r, _ := m["reason"].(string); r != "" {
				return r
			}
		}
	}
	if errors.Is(ae.Err, a2a.ErrServerError) {
		if r, _, ok := strings.Cut(ae.Message, ": "); ok && r == reasonShuttingDown {
			return r
		}
	}
	return ""
}

// pump forwards a stream's events to a channel, closed after the last (or
// after an error).
func pump(ctx context.Context, seq iter.Seq2[a2a.Event, error]) <-chan streamItem {
	items := make(chan streamItem)
	go func() {
		defer close(items)
		for ev, err := range seq {
			select {
			case items <- streamItem{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return items
}

// finishTurn lets the Looopy event stream catch up (so that everything
// of the turn is on screen before the prompt comes back) and shows the
// final status it kept; a stream that broke off is followed by a look at
// the task.
func (s *session) finishTurn(ctx context.Context, st *turnState, feedp **eventFeed, kept []a2a.Event) {
	if feed := *feedp; feed != nil {
		feed.wait(st.state)
		feed.stop()
		*feedp = nil
		st.textShown = st.textShown || feed.st.textShown
		select {
		case <-feed.failed:
			// The stream failed after the turn's last A2A event: draw
			// them all.
			s.noFeed = true
			for _, ev := range kept {
				s.render(st, ev)
			}
			kept = nil
		default:
		}
		for _, ev := range kept {
			switch v := ev.(type) {
			case *a2a.TaskStatusUpdateEvent:
				if finalState(v.Status.State) {
					s.status(st, v.Status, v.Metadata)
				}
			case *a2a.Task:
				if finalState(v.Status.State) {
					s.status(st, v.Status, v.Metadata)
				}
			case *a2a.Message:
				s.message(st, v)
			}
		}
	}
	s.p.endLine()
	if !st.ended && st.taskID != "" {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if t, err := s.client.GetTask(gctx, &a2a.GetTaskRequest{ID: st.taskID}); err == nil {
			s.p.line(styleDim, "the stream ended; task %s is %s", st.taskID, stateName(t.Status.State))
			if finalState(t.Status.State) {
				s.status(st, t.Status, nil)
			}
		}
	}
}

// finalState reports whether a task in st waits for the client or ended.
func finalState(st a2a.TaskState) bool {
	return st.Terminal() || st == a2a.TaskStateInputRequired || st == a2a.TaskStateAuthRequired
}

// note takes from an event what the turn needs to go on (its task, its
// context, its state) without showing it.
func (s *session) note(st *turnState, ev a2a.Event) {
	switch v := ev.(type) {
	case *a2a.Task:
		s.noteTask(st, v.ID, v.ContextID)
		st.state = v.Status.State
	case *a2a.TaskStatusUpdateEvent:
		s.noteTask(st, v.TaskID, v.ContextID)
		st.state = v.Status.State
	case *a2a.TaskArtifactUpdateEvent:
		s.noteTask(st, v.TaskID, v.ContextID)
		return
	case *a2a.Message:
		s.noteTask(st, v.TaskID, v.ContextID)
		st.ended = true
		return
	}
	if finalState(st.state) {
		st.ended = true
	}
}

// silent explains a stream that ended without an event or an error: some
// servers answer a streaming request they refuse (a missing credential,
// say) with a plain JSON-RPC error, which a stream reader does not see. A
// harmless call brings the reason back.
func (s *session) silent(ctx context.Context) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := s.client.GetTask(gctx, &a2a.GetTaskRequest{ID: a2a.NewTaskID()})
	switch {
	case refused(err):
		s.refusedLine(err)
	case err != nil && !errors.Is(err, a2a.ErrTaskNotFound):
		s.p.line(styleErr, "error: the agent sent nothing back: %s", sanitize(err.Error()))
	default:
		s.p.line(styleErr, "error: the agent sent nothing back")
	}
}

// refused reports an error that refuses the caller's credential.
func refused(err error) bool {
	return errors.Is(err, a2a.ErrUnauthenticated) || errors.Is(err, a2a.ErrUnauthorized)
}

// refusedLine says the agent refused the message for its credential and
// how to give one, whether the refusal came as the stream's error event or
// only from a call made after a silent stream.
func (s *session) refusedLine(err error) {
	s.p.line(styleErr, "error: the agent refused the message: %s (give an API key: -api-key or $LOOOPY_API_KEY)", sanitize(err.Error()))
}

// atoi reads a positive number.
func atoi(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0
}
