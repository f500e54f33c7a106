package host

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/looopy-go/looopy/loop"
)

// AdminTask is a task as the admin API lists it: the record without its
// history.
type AdminTask struct {
	ID           string          `json:"id"`
	ContextID    string          `json:"contextId"`
	Owner        string          `json:"owner,omitempty"`
	Status       loop.TaskStatus `json:"status"`
	Message      string          `json:"message,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	Iterations   int             `json:"iterations,omitempty"`
	Messages     int             `json:"messages"`
	Running      bool            `json:"running"` // a turn of the task runs in this process
	CreatedAt    time.Time       `json:"createdAt"`
	UpdatedAt    time.Time       `json:"updatedAt"`
	ExpiresAt    time.Time       `json:"expiresAt,omitzero"`
	ParentTaskID string          `json:"parentTaskId,omitempty"`
	Subtasks     []string        `json:"subtasks,omitempty"`
}

// errNoDurability: the journal or checkpoints were asked for on a host
// that keeps none.
var errNoDurability = errors.New("this host keeps no checkpoints or journal (durable execution is off)")

// adminTaskRoutes mounts the task routes of the admin API on r (behind the
// admin credential):
//
//	GET  /tasks?state=a,b&contextId=&owner=&limit=&after=   list tasks, newest first
//	GET  /tasks/:id              the record (with history), checkpoint and journal
//	GET  /tasks/:id/journal      the tool-call journal
//	GET  /tasks/:id/checkpoint   the checkpoint of a running turn (404 when none)
//	POST /tasks/:id/cancel       cancel the task, whoever owns it
//	POST /tasks/:id/retry        start the task's input again as a new task (see retry)
func (s *Server) adminTaskRoutes(r fiber.Router) {
	r.Get("/tasks", s.adminListTasks)
	r.Get("/tasks/:id", s.adminGetTask)
	r.Get("/tasks/:id/journal", func(c *fiber.Ctx) error {
		calls, err := s.taskJournal(c.UserContext(), c.Params("id"))
		if err != nil {
			return err
		}
		return c.JSON(fiber.Map{"taskId": c.Params("id"), "calls": calls})
	})
	r.Get("/tasks/:id/checkpoint", func(c *fiber.Ctx) error {
		if s.stores.Checkpoints == nil {
			return errNoDurability
		}
		cp, err := s.stores.Checkpoints.LoadCheckpoint(c.UserContext(), c.Params("id"))
		if err != nil {
			return fmt.Errorf("checkpoint of task %q: %w", c.Params("id"), err)
		}
		return c.JSON(cp)
	})
	r.Post("/tasks/:id/cancel", func(c *fiber.Ctx) error {
		rec, err := s.adminLoad(c.UserContext(), c.Params("id"))
		if err != nil {
			return err
		}
		rec, err = s.tasks.Cancel(c.UserContext(), rec.Owner, rec.ID)
		if err != nil {
			return err
		}
		return c.JSON(fiber.Map{"task": s.adminTask(rec)})
	})
	r.Post("/tasks/:id/retry", func(c *fiber.Ctx) error {
		rec, err := s.adminLoad(c.UserContext(), c.Params("id"))
		if err != nil {
			return err
		}
		id, err := s.tasks.Retry(c.UserContext(), rec)
		if err != nil {
			return err
		}
		return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"retryOf": rec.ID, "taskId": id, "contextId": rec.ContextID})
	})
}

func (s *Server) adminListTasks(c *fiber.Ctx) error {
	f := loop.TaskFilter{ContextID: c.Query("contextId"), Owner: c.Query("owner"), After: c.Query("after"),
		Limit: s.cfg.Limits.MaxPageSize}
	for _, st := range strings.Split(c.Query("state"), ",") {
		st = strings.TrimSpace(st)
		if st == "" {
			continue
		}
		ts := loop.TaskStatus(st)
		if !knownStatus(ts) {
			return fmt.Errorf("%w: state %q is not a task state", loop.ErrInvalid, st)
		}
		f.Statuses = append(f.Statuses, ts)
	}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			return fmt.Errorf("%w: limit %q: want a positive number", loop.ErrInvalid, l)
		}
		f.Limit = min(n, s.cfg.Limits.MaxPageSize)
	}
	// The records are read a few at a time: each may hold megabytes of
	// history, and the listing keeps only their summaries.
	limit := f.Limit
	out := []AdminTask{}
	for len(out) < limit {
		f.Limit = min(listChunk, limit-len(out))
		recs, err := s.stores.Tasks.ListTasks(c.UserContext(), f)
		if err != nil {
			return fmt.Errorf("list tasks: %w", err)
		}
		for _, rec := range recs {
			out = append(out, s.adminTask(rec))
		}
		if len(recs) < f.Limit {
			break
		}
		f.After = recs[len(recs)-1].ID
	}
	res := fiber.Map{"tasks": out}
	if len(out) == limit {
		res["next"] = out[len(out)-1].ID
	}
	return c.JSON(res)
}

func (s *Server) adminGetTask(c *fiber.Ctx) error {
	ctx := c.UserContext()
	rec, err := s.adminLoad(ctx, c.Params("id"))
	if err != nil {
		return err
	}
	out := fiber.Map{"task": s.adminTask(rec), "history": rec.History}
	if s.stores.Journal != nil {
		calls, err := s.stores.Journal.Calls(ctx, rec.ID)
		if err != nil {
			return fmt.Errorf("journal of task %q: %w", rec.ID, err)
		}
		out["journal"] = calls
	}
	if s.stores.Checkpoints != nil {
		cp, err := s.stores.Checkpoints.LoadCheckpoint(ctx, rec.ID)
		switch {
		case err == nil:
			out["checkpoint"] = cp
		case !errors.Is(err, loop.ErrNotFound):
			return fmt.Errorf("checkpoint of task %q: %w", rec.ID, err)
		}
	}
	return c.JSON(out)
}

// taskJournal returns the journal of a task. A task that is gone (expired)
// may still have a journal until the cleanup removes it; it is shown.
func (s *Server) taskJournal(ctx context.Context, taskID string) ([]loop.JournalEntry, error) {
	if s.stores.Journal == nil {
		return nil, errNoDurability
	}
	calls, err := s.stores.Journal.Calls(ctx, taskID)
	if err != nil {
		return nil, fmt.Errorf("journal of task %q: %w", taskID, err)
	}
	if len(calls) == 0 {
		if _, err := s.adminLoad(ctx, taskID); err != nil {
			return nil, err
		}
	}
	if calls == nil {
		calls = []loop.JournalEntry{}
	}
	return calls, nil
}

// adminLoad returns the record of any task, whoever owns it.
func (s *Server) adminLoad(ctx context.Context, taskID string) (loop.TaskRecord, error) {
	rec, err := s.stores.Tasks.LoadTask(ctx, taskID)
	if errors.Is(err, loop.ErrNotFound) {
		return rec, &loop.NotFoundError{What: "task", ID: taskID}
	}
	if err != nil {
		return rec, fmt.Errorf("load task %q: %w", taskID, err)
	}
	return rec, nil
}

func (s *Server) adminTask(rec loop.TaskRecord) AdminTask {
	return AdminTask{ID: rec.ID, ContextID: rec.ContextID, Owner: rec.Owner, Status: rec.Status,
		Message: rec.Message, Reason: rec.Reason, Iterations: rec.Iterations, Messages: len(rec.History),
		Running: s.tasks.Running(rec.ID) != nil, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt,
		ExpiresAt: rec.ExpiresAt, ParentTaskID: rec.ParentTaskID, Subtasks: rec.Subtasks}
}

func knownStatus(st loop.TaskStatus) bool {
	switch st {
	case loop.TaskSubmitted, loop.TaskWorking, loop.TaskWaitingInput, loop.TaskWaitingAuth,
		loop.TaskWaitingSubtask, loop.TaskCompleted, loop.TaskFailed, loop.TaskCanceled, loop.TaskRejected:
		return true
	}
	return false
}
