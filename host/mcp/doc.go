// Package mcp speaks the Model Context Protocol both ways, with the official
// Go SDK (github.com/modelcontextprotocol/go-sdk):
//
//   - Server offers a loop.Toolset (the host's Wasm-sandboxed plugin tools)
//     and, optionally, the agent itself as one tool, to any MCP client: over
//     streamable HTTP (Server.Handler, mounted by the host at /mcp) or over
//     stdio (Server.ServeStdio, the `looopy mcp` command). Tool progress
//     becomes MCP progress notifications.
//   - Toolset makes the tools of an outside MCP server (a command run as a
//     child process, or a URL) a loop.Toolset of the agent, filtered by allow
//     and deny lists. Those tools are not sandboxed: they run with whatever
//     the server process or service can do.
//
// mcp imports loop, the MCP SDK and the standard library; never Fiber, the
// stores, the plugin runtime or host.
package mcp
