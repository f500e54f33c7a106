package host

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/looopy-go/looopy/host/taskrt"
	"github.com/looopy-go/looopy/loop"
)

// adminConversationRoutes mounts the conversation routes of the admin API
// on r (behind the admin credential):
//
//	DELETE /conversations/:contextId[?cancel=true]   delete a conversation now
//
// The context id is the one /admin/tasks lists. The conversation's agent
// record, history, finished tasks (records, artifacts, event streams) and
// its event stream are deleted (taskrt.Runtime.DeleteConversation: a host
// killed midway finishes it at its next start); an /events stream open on
// it ends with a stream-end frame (reason CONVERSATION_DELETED). One with
// an unfinished task is refused (409, {"error": ..., "reason":
// "CONVERSATION_BUSY"}) unless cancel=true: its tasks are canceled first.
// An unknown conversation is 404.
func (s *Server) adminConversationRoutes(r fiber.Router) {
	r.Delete("/conversations/:contextId", func(c *fiber.Ctx) error {
		ctx := c.UserContext()
		id := c.Params("contextId")
		cancel := false
		if v := c.Query("cancel"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%w: cancel=%q: want true or false", loop.ErrInvalid, v)
			}
			cancel = b
		}
		tasks, err := s.tasks.DeleteConversation(ctx, id, cancel)
		if errors.Is(err, taskrt.ErrConversationBusy) {
			// The reason beside the message: an operator's script tells
			// busy apart from other conflicts by it.
			setSafeHeaders(c)
			return c.Status(HTTPStatus(err)).JSON(fiber.Map{"error": err.Error(), "reason": lookupError(err).reason})
		}
		if err != nil {
			return err
		}
		if tasks == nil {
			tasks = []string{}
		}
		return c.JSON(fiber.Map{"deleted": id, "tasks": tasks})
	})
}
