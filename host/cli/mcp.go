package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/looopy-go/looopy/host"
)

// mcpCmd is `looopy mcp`: the host's sandboxed tools (and, with
// mcp.exposeAgent, the agent) served to one MCP client over stdin and
// stdout. It takes the server's flags; logs go to stderr, since stdout
// carries the protocol.
func mcpCmd(ctx context.Context, args []string, env Env) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := host.NewMain()
	m.Stdout = env.Stderr
	if err := m.ParseFlags(args); err != nil {
		fmt.Fprintln(env.Stderr, err)
		return 2
	}
	if err := m.ServeMCPStdio(ctx, io.NopCloser(env.Stdin), nopWriteCloser{env.Stdout}); err != nil {
		fmt.Fprintln(env.Stderr, "looopy mcp:", err)
		return 1
	}
	return 0
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
