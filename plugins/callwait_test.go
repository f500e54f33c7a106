package plugins

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// waitCallTimeout is the call timeout of the plugins below: long enough
// for their call's run on any machine, short enough to wait past.
const waitCallTimeout = 3 * time.Second

// waitingPlugins loads a model, a tool and an agent plugin of one instance
// each, and returns how to call each one.
func waitingPlugins(t *testing.T) (*Registry, map[string]func(ctx context.Context) error) {
	t.Helper()
	r := newRegistry(t, Config{})
	dir := t.TempDir()
	one := func(m map[string]any) {
		caps(m)["instances"] = 1
		caps(m)["callTimeout"] = waitCallTimeout.String()
	}
	for _, l := range []struct {
		name, guest, kind string
		fns               []string
	}{
		{"mock", "model", "model", []string{"emit"}},
		{"echo", "echo", "tool", nil},
		{"researcher", "agent", "agent", []string{"model_call", "tool_call"}},
	} {
		if _, err := r.Load(context.Background(), install(t, dir, l.name, guestWasm(t, l.guest), func(m map[string]any) {
			m["kind"] = l.kind
			if l.fns != nil {
				caps(m)["hostFunctions"] = l.fns
			}
			one(m)
		})); err != nil {
			t.Fatal(err)
		}
	}
	m, err := r.Model("mock")
	if err != nil {
		t.Fatal(err)
	}
	return r, map[string]func(ctx context.Context) error{
		"mock": func(ctx context.Context) error {
			resp, err := m.Generate(ctx, &loop.ModelRequest{Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}}, nil)
			if err == nil && resp.Message.Content == "" {
				err = errors.New("the model answered nothing")
			}
			return err
		},
		"echo": func(ctx context.Context) error {
			res, err := r.Call(ctx, call("echo", `{"text":"hi"}`), &loop.ToolEnv{})
			if err == nil && res.IsError {
				err = errors.New(res.Content)
			}
			return err
		},
		"researcher": func(ctx context.Context) error {
			pinned, release := r.PinToolset()
			defer release()
			res, err := r.Call(ctx, loop.ToolCall{ID: "a1", Name: "researcher", Arguments: []byte(`{"prompt":"why"}`)},
				&loop.ToolEnv{ContextID: "c", TaskID: "t", Model: &stubModel{}, Tools: pinned, Emit: func(loop.Event) {}})
			if err == nil && res.IsError {
				err = errors.New(res.Content)
			}
			return err
		},
	}
}

// A plugin's call timeout bounds the call's run, not its wait for a free
// instance: with every instance held, a model, tool or agent call waits
// longer than its call timeout, then gets the instance, runs and
// completes. (It ended "ran past its timeout" while it waited, so under
// load one principal's calls failed another's acknowledged tasks.)
func TestCallTimeoutStartsWhenTheCallHasAnInstance(t *testing.T) {
	r, calls := waitingPlugins(t)
	for _, name := range []string{"mock", "echo", "researcher"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := r.plugins[name]
			held, err := p.pool.get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- calls[name](context.Background()) }()
			waitFor(t, "the call to wait for the instance", func() bool { return p.pool.waiting() == 1 })
			// Not a measurement: the call waits at least this long.
			time.Sleep(waitCallTimeout + waitCallTimeout/2)
			p.pool.put("", held, true)
			if err := hangGuard(t, done, "the call given the instance"); err != nil {
				t.Fatalf("a call that waited past its call timeout for an instance, then ran: %v", err)
			}
		})
	}
}

// A call whose caller's deadline (its turn's) ends while it waits for an
// instance fails with ErrNoInstance, saying it never ran: never the call
// timeout, which had not started.
func TestCallWaitingPastItsCallersDeadline(t *testing.T) {
	r, calls := waitingPlugins(t)
	for _, name := range []string{"mock", "echo", "researcher"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := r.plugins[name]
			held, err := p.pool.get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer p.pool.put("", held, true)
			ctx := &endingContext{Context: context.Background(), done: make(chan struct{})}
			done := make(chan error, 1)
			go func() { done <- calls[name](ctx) }()
			waitFor(t, "the call to wait for the instance", func() bool { return p.pool.waiting() == 1 })
			close(ctx.done) // the deadline, without waiting for it
			err = hangGuard(t, done, "the call whose caller's deadline passed")
			if !errors.Is(err, ErrNoInstance) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
				t.Fatalf("error = %v, want ErrNoInstance and the caller's deadline, never the call timeout", err)
			}
			if p.pool.waiting() != 0 {
				t.Fatal("the call is still queued")
			}
		})
	}
}

// endingContext is a context whose deadline passes when done is closed.
type endingContext struct {
	context.Context
	done chan struct{}
}

func (c *endingContext) Done() <-chan struct{} { return c.done }

func (c *endingContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// echoCaller is a model that calls the echo tool once, then ends.
type echoCaller struct{}

func (echoCaller) Generate(_ context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Role == loop.RoleTool {
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "tool said " + last.Content}}, nil
	}
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		ToolCalls: []loop.ToolCall{{ID: "c1", Name: "echo", Arguments: []byte(`{"text":"hi"}`)}}}}, nil
}

// In a turn, a tool plugin's call that waits for a free instance longer
// than the loop's own tool timeout is not cut by it: the plugin's call
// timeout bounds the run (loop.SelfTimed), and the call completes.
func TestTurnsToolPluginCallWaitsPastTheToolTimeout(t *testing.T) {
	r, _ := waitingPlugins(t)
	const toolTimeout = time.Second
	l, err := loop.New(loop.Config{Model: echoCaller{}, Toolsets: []loop.Toolset{r}, ToolTimeout: toolTimeout})
	if err != nil {
		t.Fatal(err)
	}
	p := r.plugins["echo"]
	held, err := p.pool.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan loop.Outcome, 1)
	go func() {
		done <- l.Run(context.Background(), loop.Turn{ContextID: "ctx", TaskID: "task-1",
			Messages: []loop.Message{{Role: loop.RoleUser, Content: "go"}}})
	}()
	waitFor(t, "the tool call to wait for the instance", func() bool { return p.pool.waiting() == 1 })
	time.Sleep(2 * toolTimeout) // not a measurement: the call waits at least this long
	p.pool.put("", held, true)
	out := hangGuard(t, done, "the turn")
	if out.Status != loop.TaskCompleted {
		t.Fatalf("turn: %+v", out)
	}
	for _, m := range out.Messages {
		if m.Role == loop.RoleTool && m.Metadata["isError"] == true {
			t.Fatalf("the tool call that waited for an instance: %q", m.Content)
		}
	}
}
