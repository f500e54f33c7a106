package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/looopy-go/looopy/host"
	"github.com/looopy-go/looopy/host/taskrt"
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// heldModel is the host's model for the token-reservation tests. A
// parent's call asks for the researcher copy its prompt names
// ("q-<i>@<agent>") and answers once it has the tool's result; a
// researcher's call (its system prompt) waits at the gate until every
// caller either made its call or ended without one, then uses its whole
// reservation. So every call that passed the budget's check is running
// when the first one's tokens are counted: a check-then-count lets all of
// them through.
type heldModel struct {
	gate    chan struct{}
	waiting atomic.Int64
	arrived sync.Map // caller id -> *sync.Once

	mu    sync.Mutex
	spent int64 // tokens the researchers' calls used
	calls int
	maxR  int64 // the largest reservation of one call
}

func newHeldModel(callers int) *heldModel {
	m := &heldModel{gate: make(chan struct{})}
	m.waiting.Store(int64(callers))
	return m
}

// arrive marks caller id at the gate (once): it made its call or ended.
func (m *heldModel) arrive(id string) {
	o, _ := m.arrived.LoadOrStore(id, new(sync.Once))
	o.(*sync.Once).Do(func() {
		if m.waiting.Add(-1) == 0 {
			close(m.gate)
		}
	})
}

const researcherPrompt = "You are a researcher"

func (m *heldModel) Generate(ctx context.Context, req *loop.ModelRequest, _ func(loop.Delta)) (*loop.ModelResponse, error) {
	last := ""
	for _, msg := range req.Messages {
		if msg.Role == loop.RoleUser {
			last = msg.Content
		}
	}
	if len(req.Messages) > 0 && strings.HasPrefix(req.Messages[0].Content, researcherPrompt) {
		_, id, _ := strings.Cut(last, ": ")
		r := int64(loop.EstimateTokens(req, loop.DefaultReserveTokens))
		m.arrive(id)
		select {
		case <-m.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		m.mu.Lock()
		m.spent += r
		m.calls++
		m.maxR = max(m.maxR, r)
		m.mu.Unlock()
		return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "notes on " + id},
			Usage: loop.Usage{PromptTokens: int(r) / 2, CompletionTokens: int(r) - int(r)/2, TotalTokens: int(r)}}, nil
	}
	for _, msg := range req.Messages {
		if msg.Role == loop.RoleTool {
			m.arrive(last)
			return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant, Content: "done: " + msg.Content}}, nil
		}
	}
	_, agent, _ := strings.Cut(last, "@")
	args, _ := json.Marshal(map[string]string{"prompt": last})
	return &loop.ModelResponse{Message: loop.Message{Role: loop.RoleAssistant,
		ToolCalls: []loop.ToolCall{{ID: "c1", Name: agent, Arguments: args}}}}, nil
}

// tokenHoldHosts serves copies of the researcher agent plugin (real
// Wasm; each plugin runs at most 4 calls at once) with m as the model and
// a token limit on the principal "local": for "badger", one host; for
// "redis", two hosts sharing a real redis-server, its counters and holds.
func tokenHoldHosts(t *testing.T, backend string, m loop.Model, copies int, limit int64) ([]*testHost, []string) {
	t.Helper()
	plugins := t.TempDir()
	var names []string
	for i := range copies {
		name := fmt.Sprintf("researcher-%d", i)
		copyPlugin(t, plugins, "researcher", func(m map[string]any) { m["name"] = name })
		if err := os.Rename(filepath.Join(plugins, "researcher"), filepath.Join(plugins, name)); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	ids := []string{"host-a"}
	var srv *redistest.Server
	if backend == "redis" {
		srv = redistest.Start(t, redistest.Options{})
		ids = append(ids, "host-b")
	}
	var hosts []*testHost
	for _, id := range ids {
		cfg := baseConfig(t.TempDir())
		cfg.PluginDir = plugins
		cfg.Plugins.Only = nil
		cfg.Limits.HostID = id
		if srv != nil {
			cfg.Store.Backend = "redis"
			cfg.Store.Redis = host.RedisConfig{Addr: srv.Addr, Password: srv.Password, Prefix: "svc:"}
		}
		// The parents' own calls reserve little: only the researchers'
		// can reach the limit.
		cfg.Model.MaxTokens = 50
		cfg.Observability.UsageLimits = map[string]taskrt.UsageLimit{"local": {Tokens: limit}}
		hm := host.NewMain()
		hm.Config, hm.Model = cfg, m
		hm.Stdout = io.Discard
		if os.Getenv("LOOOPY_TEST_LOG") != "" {
			hm.Stdout = os.Stderr
		}
		if err := hm.Run(context.Background()); err != nil {
			t.Fatalf("run host: %v", err)
		}
		t.Cleanup(func() { _ = hm.Close() })
		hosts = append(hosts, &testHost{Main: hm, dir: cfg.DataDir})
	}
	return hosts, names
}

// A token limit holds for the model calls of sub-agents run in-process by
// the loop (the researcher plugin, real Wasm, as the tool of 12 turns at
// once, on one host and on two sharing Redis): each call reserves what it
// may use before it runs, charged to the turn's principal, so the calls
// that pass the check together use less than the limit plus one call's
// reservation. Before, a sub-agent's
// call was checked and counted after it ended: all 12 ran, 12 calls'
// tokens against a limit of less than one.
func TestTokenLimitHoldsForSubAgentModelCalls(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"badger", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const copies, callers, limit = 3, 12, 3000
			m := newHeldModel(callers)
			hosts, agents := tokenHoldHosts(t, backend, m, copies, limit)
			var clients []*a2aclient.Client
			for _, h := range hosts {
				clients = append(clients, client10(t, h.URL(), ""))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
			defer cancel()
			var wg sync.WaitGroup
			var mu sync.Mutex
			var refusals []string
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := fmt.Sprintf("q-%d@%s", i, agents[i%copies])
					defer m.arrive(id)
					r, err := clients[i%len(clients)].SendMessage(ctx, &a2a.SendMessageRequest{Message: userMsg(id)})
					if err != nil {
						t.Errorf("send %s: %v", id, err)
						return
					}
					task, _ := r.(*a2a.Task)
					if task == nil {
						t.Errorf("send %s returned %T", id, r)
						return
					}
					if task.Status.State != a2a.TaskStateCompleted && task.Status.Message != nil {
						mu.Lock()
						refusals = append(refusals, task.Status.Message.Parts[0].Text())
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			checkHeld(t, hosts[len(hosts)-1], m, limit, callers, refusals)
		})
	}
}

// checkHeld: the researchers' calls that ran used less than the limit
// plus one call's reservation, the counters hold exactly what they used
// and nothing is left held.
func checkHeld(t *testing.T, h *testHost, m *heldModel, limit int64, callers int, refusals []string) {
	t.Helper()
	m.mu.Lock()
	spent, calls, maxR := m.spent, m.calls, m.maxR
	m.mu.Unlock()
	if calls == 0 || spent >= limit+maxR {
		t.Fatalf("%d of %d researcher calls ran at once and used %d tokens; the limit is %d, one call reserves %d",
			calls, callers, spent, limit, maxR)
	}
	t.Logf("%d of %d researcher calls ran, %d tokens used, the limit is %d, one call reserves %d; refusals %q",
		calls, callers, spent, limit, maxR, refusals)
	got := host.UsageOf(h.Server(), "local")
	if got.TotalTokens != spent || got.ReservedTokens != 0 {
		t.Fatalf("usage %+v, want the %d tokens the calls used and nothing held", got, spent)
	}
	refused := false
	for _, r := range refusals {
		refused = refused || strings.Contains(r, `principal "local" has used`)
	}
	if !refused {
		t.Fatalf("no refusal names the limit: %q", refusals)
	}
}

// The same over MCP: 12 calls of the researcher at once from MCP clients
// (no turn; one host, and two sharing Redis), each of its model calls reserved under the caller's
// principal before it runs. Before, mcpModel checked the limit and
// counted the tokens after the call: all 12 ran.
func TestTokenLimitHoldsForMCPAgentModelCalls(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"badger", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			const copies, callers, limit = 3, 12, 3000
			m := newHeldModel(callers)
			hosts, agents := tokenHoldHosts(t, backend, m, copies, limit)
			sessions := make([]*sdk.ClientSession, callers)
			for i := range sessions {
				cs, err := mcpConnect(t, hosts[i%len(hosts)].URL()+"/mcp", "", nil)
				if err != nil {
					t.Fatal(err)
				}
				sessions[i] = cs
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
			defer cancel()
			var wg sync.WaitGroup
			var mu sync.Mutex
			var refusals []string
			for i, cs := range sessions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := fmt.Sprintf("q-%d@%s", i, agents[i%copies])
					defer m.arrive(id)
					res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: agents[i%copies], Arguments: map[string]any{"prompt": id}})
					if err != nil {
						t.Errorf("%s over MCP: %v", agents[i%copies], err)
						return
					}
					if res.IsError {
						mu.Lock()
						refusals = append(refusals, mcpText(res))
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			checkHeld(t, hosts[len(hosts)-1], m, limit, callers, refusals)
		})
	}
}
