package taskrt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// noAnswer is what an expired request is told.
const noAnswer = "no answer in time"

// ExpireRequests resolves the requests of paused tasks that expired by now,
// as Config.OnTimeout says: "fail" fails the task naming the request;
// "reject" answers each expired request (an approval is rejected with the
// reason "no answer in time", a client tool call gets an error result, a
// text question an empty answer) and, once nothing is open, the task goes
// on. It returns how many tasks it changed. A task answered or continued by
// someone else meanwhile is left to them (versioned writes).
func (rt *Runtime) ExpireRequests(ctx context.Context, now time.Time) (int, error) {
	waiting, err := rt.st.Tasks.ListTasks(ctx, loop.TaskFilter{Statuses: []loop.TaskStatus{loop.TaskWaitingInput, loop.TaskWaitingAuth}})
	if err != nil {
		return 0, fmt.Errorf("expire requests: %w", err)
	}
	n := 0
	var errs []error
	for _, rec := range waiting {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		var expired []loop.InputRequest
		for _, r := range rec.OpenRequests() {
			if !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt) {
				expired = append(expired, r)
			}
		}
		if len(expired) == 0 || rec.ParentTaskID != "" || rt.Running(rec.ID) != nil {
			// A sub-task's request expires with the one its parent
			// passed up, which ends or answers it; a sub-task never
			// runs on its own.
			continue
		}
		if err := rt.expire(ctx, rec, expired, now); err != nil {
			if !errors.Is(err, loop.ErrConflict) && !errors.Is(err, loop.ErrBusy) {
				errs = append(errs, err)
			}
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (rt *Runtime) expire(ctx context.Context, rec loop.TaskRecord, expired []loop.InputRequest, now time.Time) error {
	if rt.cfg.OnTimeout == "fail" {
		ids := make([]string, len(expired))
		for i, r := range expired {
			ids[i] = fmt.Sprintf("%q", r.InputID)
		}
		return rt.finishOwned(ctx, rec, loop.TaskFailed,
			fmt.Sprintf("request %s expired with no answer", strings.Join(ids, ", ")))
	}
	reqs := append([]loop.InputRequest(nil), rec.Requests...)
	for i := range reqs {
		r := &reqs[i]
		if r.Answer != nil || r.ExpiresAt.IsZero() || now.Before(r.ExpiresAt) {
			continue
		}
		a := &loop.InputAnswer{InputID: r.InputID, ProvidedBy: "agent", AgentID: "looopy:timeout", At: now}
		switch r.InputType {
		case loop.InputApproval:
			a.Decision, a.Reason = loop.DecisionReject, noAnswer
		case loop.InputText:
		default:
			a.Result = &loop.ToolResult{IsError: true, Content: noAnswer}
		}
		r.Answer = a
	}
	rec.Requests = reqs
	if len(rec.OpenRequests()) > 0 {
		_, err := rt.recordAnswers(ctx, rec, nil)
		return err
	}
	// The runtime goes on by itself: the caller's credentials are not
	// here, and a plugin granted them asks for them again.
	_, err := rt.Start(ctx, StartRequest{Auth: &loop.AuthContext{Principal: rec.Owner, Lost: true}, TaskID: rec.ID, answered: &rec})
	return err
}
