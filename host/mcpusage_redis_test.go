package host_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/host/taskrt"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// MCP calls count against observability.usageLimits on the counters the
// hosts of a service share in Redis, and calls made at once, on both
// hosts, cannot pass the limit together: each call's check and count is
// one step on the server. Before, every call passed the check before any
// was counted (and this path had no test on Redis).
func TestMCPUsageLimitHoldsAcrossHostsOnRedis(t *testing.T) {
	t.Parallel()
	const limit, calls = 4, 16
	srv := redistest.Start(t, redistest.Options{})
	var urls []string
	for _, id := range []string{"host-a", "host-b"} {
		cfg := baseConfig(t.TempDir())
		cfg.Store.Backend = "redis"
		cfg.Store.Redis = host.RedisConfig{Addr: srv.Addr, Password: srv.Password, Prefix: "svc:"}
		cfg.Limits.HostID = id
		cfg.Auth = host.AuthConfig{Enabled: true, Keys: []host.APIKey{{Key: "k-alice", Principal: "alice"}, {Key: "k-bob", Principal: "bob"}}}
		cfg.Observability.UsageLimits = map[string]taskrt.UsageLimit{"alice": {ToolCalls: limit}}
		urls = append(urls, startHost(t, cfg).URL()+"/mcp")
	}
	sessions := make([]*sdk.ClientSession, calls)
	for i := range sessions {
		cs, err := mcpConnect(t, urls[i%2], "k-alice", nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions[i] = cs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var ok int
	var refusals []string
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, cs := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "calc", Arguments: map[string]any{"expression": "6*7"}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("calc over MCP: %v", err)
			case !res.IsError && strings.Contains(mcpText(res), "42"):
				ok++
			default:
				refusals = append(refusals, mcpText(res))
			}
		}()
	}
	close(start)
	wg.Wait()
	if ok != limit || len(refusals) != calls-limit {
		t.Fatalf("%d of %d concurrent MCP calls on two hosts ran, the limit is %d; refusals: %q", ok, calls, limit, refusals)
	}
	for _, r := range refusals {
		if !strings.Contains(r, "has made 4 tool calls, its limit is 4") {
			t.Fatalf("refusal %q, want the limit named with the count", r)
		}
	}
	// bob has no limit and is served on either host.
	cs, err := mcpConnect(t, urls[1], "k-bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "calc", Arguments: map[string]any{"expression": "6*7"}}); err != nil || res.IsError {
		t.Fatalf("bob's call: %v %+v", err, res)
	}
}
