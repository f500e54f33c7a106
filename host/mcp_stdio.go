package host

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ServeMCPStdio is `looopy mcp`: the host's sandboxed tools (and the agent,
// with mcp.exposeAgent) served to one MCP client over stdin and stdout,
// with the same configuration, plugins and data folder as the server,
// without listening on any port. Logs go to m.Stdout (stderr), never to
// out. It returns when the client closes in or ctx ends.
func (m *Main) ServeMCPStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) (err error) {
	if err := m.Start(ctx); err != nil {
		if errors.Is(err, ErrDataDirInUse) {
			return fmt.Errorf("%w\n(is a host already serving this data folder? give `looopy mcp` its own -data, or connect your MCP client to that host's /mcp)", err)
		}
		return err
	}
	defer func() { err = errors.Join(err, m.Close()) }()
	srv := m.server.MCP()
	if srv == nil {
		return errors.New("no tools to serve over MCP: no plugin folder, or mcp.disabled is set")
	}
	m.log.Info("serving MCP over stdio")
	return srv.ServeStdio(ctx, in, out)
}
