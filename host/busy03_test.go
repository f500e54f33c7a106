package host_test

import (
	"context"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/looopy-go/looopy/host/remote"
)

// A busy refusal of a real host reached over A2A 0.3, through the client a
// remote agent uses (the SDK's 0.3 transport): 0.3 keeps only an error's
// code and message, so the host leads a -32000 message with its reason,
// and remote.IsBusy tells a busy context apart by it (an answer meeting a
// paused turn still winding down is then sent again, as over 1.0). Other
// -32000 refusals are not busy. Before, over 0.3 IsBusy never matched.
func TestBusyToldApartOver03(t *testing.T) {
	t.Parallel()
	h := startHost(t, baseConfig(t.TempDir()))
	ctx := context.Background()
	hc := httpClient("")
	card, err := agentcard.NewResolver(hc).Resolve(ctx, h.URL())
	if err != nil {
		t.Fatal(err)
	}
	// The card as a 0.3-only host offers it: its 0.3 interface alone.
	var only03 []*a2a.AgentInterface
	for _, iface := range card.SupportedInterfaces {
		if strings.HasPrefix(string(iface.ProtocolVersion), "0.3") {
			only03 = append(only03, iface)
		}
	}
	if len(only03) == 0 {
		t.Fatalf("the card offers no 0.3 interface: %+v", card.SupportedInterfaces)
	}
	card.SupportedInterfaces = only03
	c, err := a2aclient.NewFromCard(ctx, card, a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: hc}))
	if err != nil {
		t.Fatalf("0.3 client: %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	// A slow turn holds its context.
	slow, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: userMsg("slow 3"),
		Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := slow.(*a2a.Task)
	if !ok {
		t.Fatalf("the slow turn answered %T", slow)
	}
	m := userMsg("me too")
	m.ContextID = task.ContextID
	var streamErr error
	for _, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: m}) {
		if err != nil {
			streamErr = err
			break
		}
	}
	if streamErr == nil || !remote.IsBusy(streamErr) {
		t.Fatalf("a streamed message to a busy context over 0.3: %#v, want a busy refusal", streamErr)
	}
	if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: m}); err == nil || !remote.IsBusy(err) {
		t.Fatalf("a message to a busy context over 0.3: %#v, want a busy refusal", err)
	}
	// Not busy: a task not found, and a -32000 of another reason.
	if _, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: "no-such-task"}); err == nil || remote.IsBusy(err) {
		t.Fatalf("a task not found over 0.3: %v, busy %v", err, remote.IsBusy(err))
	}
	other := a2a.NewError(a2a.ErrServerError, "HOST_BUSY: "+strings.Repeat("x", 3))
	if remote.IsBusy(other) {
		t.Fatal("a HOST_BUSY server error was taken for a busy context")
	}
	if remote.IsBusy(a2a.NewError(a2a.ErrInternalError, "CONTEXT_BUSY: but internal")) {
		t.Fatal("an internal error whose message starts with the marker was taken for busy")
	}
}
