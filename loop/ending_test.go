package loop_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

func events[T loop.Event](r *recorder) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []T
	for _, e := range r.events {
		if v, ok := e.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func lastStatus(t *testing.T, r *recorder) *loop.TaskStatusEvent {
	t.Helper()
	st := events[*loop.TaskStatusEvent](r)
	if len(st) == 0 {
		t.Fatal("no status event")
	}
	return st[len(st)-1]
}

// A call that fails after it streamed text is not made again: the client
// already has that text, and a second attempt would show it a second answer
// after the first.
func TestModelFailureAfterStreamingIsNotRetried(t *testing.T) {
	for _, what := range []string{"text", "thought"} {
		t.Run(what, func(t *testing.T) {
			m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, onDelta func(loop.Delta)) (*loop.ModelResponse, error) {
				if n == 1 {
					if what == "text" {
						onDelta(loop.Delta{Content: "The answer is"})
					} else {
						onDelta(loop.Delta{Thought: "thinking"})
					}
					return nil, &loop.ModelError{Code: "timeout", Message: "ran past its timeout", Transient: true}
				}
				return text("a different answer"), nil
			}}
			rec := &recorder{}
			out := newLoop(t, loop.Config{Model: m, Retry: loop.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}}).
				Run(context.Background(), userTurn("hi", rec))
			if m.Calls() != 1 || out.Status != loop.TaskFailed || out.Retries != 0 {
				t.Fatalf("calls %d status %s retries %d, want one call and a failure", m.Calls(), out.Status, out.Retries)
			}
			if out.Err == nil || !strings.Contains(out.Err.Error(), "after streaming part of its answer; not retried") ||
				!strings.Contains(out.Err.Error(), "ran past its timeout") {
				t.Fatalf("err = %v", out.Err)
			}
			if st := lastStatus(t, rec); st.Status != loop.TaskFailed || !strings.Contains(st.Message, "not retried") {
				t.Fatalf("final status %+v", st)
			}
		})
	}
}

// A retry waits at least what the model's Retry-After asks, and one asking
// more than the host's bound is not retried.
func TestModelRetryHonoursRetryAfter(t *testing.T) {
	fast := loop.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, MaxRetryAfter: time.Second}
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		if n == 1 {
			return nil, &loop.ModelError{Code: "rate_limit", Message: "slow down", Transient: true, RetryAfter: 200 * time.Millisecond}
		}
		return text("fine"), nil
	}}
	rec := &recorder{}
	began := time.Now()
	out := newLoop(t, loop.Config{Model: m, Retry: fast}).Run(context.Background(), userTurn("hi", rec))
	if out.Status != loop.TaskCompleted || m.Calls() != 2 {
		t.Fatalf("status %s calls %d err %v", out.Status, m.Calls(), out.Err)
	}
	retries := events[*loop.InternalLLMRetry](rec)
	if len(retries) != 1 || retries[0].Delay < 200*time.Millisecond {
		t.Fatalf("retry events %+v: want one waiting at least the 200ms asked", retries)
	}
	if waited := time.Since(began); waited < 200*time.Millisecond {
		t.Fatalf("the retry came after %s, before the 200ms asked", waited)
	}

	m = &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		return nil, &loop.ModelError{Code: "rate_limit", Message: "come back tomorrow", Transient: true, RetryAfter: 24 * time.Hour}
	}}
	out = newLoop(t, loop.Config{Model: m, Retry: fast}).Run(context.Background(), userTurn("hi", &recorder{}))
	if out.Status != loop.TaskFailed || m.Calls() != 1 || !strings.Contains(out.Err.Error(), "asks to wait 24h0m0s before a retry, longer than the host waits (1s)") {
		t.Fatalf("status %s calls %d err %v", out.Status, m.Calls(), out.Err)
	}
	var me *loop.ModelError
	if !errors.As(out.Err, &me) || me.Code != "rate_limit" {
		t.Fatalf("err %v does not keep the model's error", out.Err)
	}
}

// Retries are visible: a warning per retry, and their number in the final
// status, the task-complete event and the outcome.
func TestModelRetriesAreVisible(t *testing.T) {
	m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		if n <= 2 {
			return nil, &loop.ModelError{Code: "server_error", Message: "HTTP 503", Transient: true}
		}
		return text("fine"), nil
	}}
	rec := &recorder{}
	out := newLoop(t, loop.Config{Model: m, Retry: loop.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}}).
		Run(context.Background(), userTurn("hi", rec))
	if out.Status != loop.TaskCompleted || out.Retries != 2 {
		t.Fatalf("status %s retries %d", out.Status, out.Retries)
	}
	var warned []string
	for _, w := range events[*loop.Warning](rec) {
		if w.Code == loop.WarningModelRetry {
			warned = append(warned, w.Message)
		}
	}
	if len(warned) != 2 || !strings.Contains(warned[0], "HTTP 503") || !strings.Contains(warned[1], "attempt 3 of 3") {
		t.Fatalf("retry warnings %q", warned)
	}
	if md := lastStatus(t, rec).Metadata; md["retries"] != 2 || md["reason"] != loop.ReasonStop || md["finishReason"] != "stop" {
		t.Fatalf("final status metadata %v", md)
	}
	tc := events[*loop.TaskComplete](rec)
	if len(tc) != 1 || tc[0].Metadata["retries"] != 2 {
		t.Fatalf("task-complete %+v", tc)
	}
}

// A reply cut off by its token limit or a content filter, and a turn ended
// by its iteration limit, say so: reason, warning, status message and
// metadata.
func TestTurnEndingIsVisible(t *testing.T) {
	for _, tc := range []struct {
		finish loop.FinishReason
		reason string
		says   string
	}{
		{loop.FinishLength, loop.ReasonLength, "cut off at its token limit"},
		{loop.FinishContentFilter, loop.ReasonContentFilter, "cut off by its content filter"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			m := &fakeModel{fn: func(int, *loop.ModelRequest, func(loop.Delta)) (*loop.ModelResponse, error) {
				r := text("The first half of")
				r.FinishReason = tc.finish
				return r, nil
			}}
			rec := &recorder{}
			out := newLoop(t, loop.Config{Model: m}).Run(context.Background(), userTurn("hi", rec))
			if out.Status != loop.TaskCompleted || out.Reason != tc.reason || out.Content != "The first half of" {
				t.Fatalf("outcome %+v", out)
			}
			w := events[*loop.Warning](rec)
			if len(w) != 1 || w[0].Code != tc.reason || !strings.Contains(w[0].Message, tc.says) {
				t.Fatalf("warnings %+v", w)
			}
			st := lastStatus(t, rec)
			if !strings.Contains(st.Message, tc.says) || st.Metadata["reason"] != tc.reason || st.Metadata["finishReason"] != string(tc.finish) {
				t.Fatalf("final status %+v", st)
			}
			if c := events[*loop.TaskComplete](rec); c[0].Reason != tc.reason {
				t.Fatalf("task-complete reason %q", c[0].Reason)
			}
		})
	}
	t.Run("max_iterations", func(t *testing.T) {
		m := &fakeModel{fn: func(n int, _ *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
			return calls(call("c"+string(rune('0'+n)), "echo", `{}`)), nil
		}}
		rec := &recorder{}
		out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"echo": echoTool}}, MaxIterations: 2}).
			Run(context.Background(), userTurn("hi", rec))
		st := lastStatus(t, rec)
		if out.Reason != loop.ReasonMaxIterations || st.Metadata["reason"] != loop.ReasonMaxIterations ||
			!strings.Contains(st.Message, "limit of 2 iterations") {
			t.Fatalf("outcome %+v, final status %+v", out, st)
		}
	})
}

// The loop's model parameters are in every request it makes.
func TestModelParamsReachEveryRequest(t *testing.T) {
	temp := 0.5
	var got []*loop.ModelRequest
	m := &fakeModel{fn: func(n int, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
		got = append(got, req)
		if n == 1 {
			return calls(call("c1", "echo", `{}`)), nil
		}
		return text("done"), nil
	}}
	out := newLoop(t, loop.Config{Model: m, Toolsets: []loop.Toolset{toolsMap{"echo": echoTool}},
		Params: loop.ModelParams{Model: "m-1", Temperature: &temp, MaxTokens: 42}}).Run(context.Background(), userTurn("hi", nil))
	if out.Status != loop.TaskCompleted || len(got) != 2 {
		t.Fatalf("outcome %+v after %d calls", out, len(got))
	}
	for i, r := range got {
		if r.Metadata["model"] != "m-1" || r.Temperature == nil || *r.Temperature != 0.5 || r.MaxTokens != 42 {
			t.Errorf("request %d: model %v temperature %v max tokens %d", i, r.Metadata["model"], r.Temperature, r.MaxTokens)
		}
	}
}
