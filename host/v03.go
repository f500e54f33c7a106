package host

import (
	"context"
	"fmt"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/gofiber/fiber/v2"
)

// rpc03 serves one A2A 0.3 call: the 0.3 request is converted to 1.0 types
// (a2a-go's own conversions), served, and the result converted back.
func (s *Server) rpc03(ctx context.Context, c *fiber.Ctx, call *rpcCall, answer func(any, error) (*taskStream, error)) (*taskStream, error) {
	auth := call.auth
	switch call.req.Method {
	case "message/send":
		p, err := sendParams03(call.req)
		if err != nil {
			return answer(nil, err)
		}
		t, err := s.sendMessage(ctx, auth, p)
		if err != nil {
			return answer(nil, err)
		}
		return answer(a2av0.FromV1Task(t), nil)
	case "message/stream":
		p, err := sendParams03(call.req)
		if err != nil {
			return nil, err
		}
		return s.startStream(ctx, auth, p)
	case "tasks/get":
		var p a2a03.TaskQueryParams
		if err := decodeParams(call.req, &p); err != nil {
			return answer(nil, err)
		}
		t, err := s.getTask(ctx, auth, a2av0.ToV1GetTaskRequest(&p))
		if err != nil {
			return answer(nil, err)
		}
		return answer(a2av0.FromV1Task(t), nil)
	case "tasks/cancel":
		var p a2a03.TaskIDParams
		if err := decodeParams(call.req, &p); err != nil {
			return answer(nil, err)
		}
		t, err := s.cancelTask(ctx, auth, a2av0.ToV1CancelTaskRequest(&p))
		if err != nil {
			return answer(nil, err)
		}
		return answer(a2av0.FromV1Task(t), nil)
	case "tasks/resubscribe":
		var p a2a03.TaskIDParams
		if err := decodeParams(call.req, &p); err != nil {
			return nil, err
		}
		header := c.Get("Last-Event-ID")
		last, err := parseLastEventID(header)
		if err != nil {
			return nil, err
		}
		return s.subscribe(ctx, auth, a2av0.ToV1SubscribeToTaskRequest(&p), last, header != "")
	case "tasks/pushNotificationConfig/get", "tasks/pushNotificationConfig/set",
		"tasks/pushNotificationConfig/list", "tasks/pushNotificationConfig/delete":
		return answer(nil, a2a.ErrPushNotificationNotSupported)
	case "agent/getAuthenticatedExtendedCard":
		return answer(nil, a2a.ErrExtendedCardNotConfigured)
	}
	return answer(nil, fmt.Errorf("%w: %q", a2a.ErrMethodNotFound, call.req.Method))
}

func sendParams03(req rpcRequest) (*a2a.SendMessageRequest, error) {
	var p a2a03.MessageSendParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if p.Message == nil {
		return nil, fmt.Errorf("%w: message is required", a2a.ErrInvalidParams)
	}
	v1, err := a2av0.ToV1SendMessageRequest(&p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", a2a.ErrInvalidParams, err)
	}
	return v1, nil
}
