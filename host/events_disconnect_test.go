package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/looopy-go/looopy/host"
)

// A client that closes its /events stream is an ordinary goodbye: the host
// ends the stream (its next heartbeat write fails) and logs no warning.
func TestEventsDisconnectIsNotAWarning(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t.TempDir())
	cfg.LogFormat = "json"
	var logs syncBuffer
	m := host.NewMain()
	m.Config, m.Stdout = cfg, &logs
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })

	openLooopyStreams := func() float64 {
		for k, v := range scrape(t, m.URL()+"/metrics") {
			if strings.HasPrefix(k, "looopy_sse_streams{") && strings.Contains(k, `kind="looopy"`) {
				return v
			}
		}
		return -1
	}
	// waitStreams polls /metrics until n looopy streams are open; the guard
	// only ends a hung wait.
	waitStreams := func(n float64) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for openLooopyStreams() != n {
			if time.Now().After(deadline) {
				t.Fatalf("open /events streams never reached %v (now %v)", n, openLooopyStreams())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	task := send(t, client10(t, m.URL(), ""), context.Background(), &a2a.SendMessageRequest{Message: userMsg("hello")})
	ctx, cancel := context.WithCancel(context.Background())
	resp := openSSE(t, ctx, m.URL()+"/events/"+task.ContextID, "", "")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /events: status %d", resp.StatusCode)
	}
	waitStreams(1)
	cancel()
	_ = resp.Body.Close()
	waitStreams(0) // the host noticed (a heartbeat every 100ms) and ended it

	// Everything logged once the host served: the turn and the stream.
	_, served, _ := strings.Cut(logs.String(), `"msg":"looopy serving"`)
	if strings.Contains(served, `"level":"WARN"`) || strings.Contains(served, `"level":"ERROR"`) {
		t.Fatalf("a client's ordinary disconnect was logged as a warning:\n%s", served)
	}
}
