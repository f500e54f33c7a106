package cli

// commands is the table of subcommands, in the order "looopy help" lists
// them. A new command is one line here and one file beside this one.
func commands() []Command {
	return []Command{
		{Name: "serve", Summary: "serve agents over A2A, the web page and the event streams (the default)", Run: serve},
		{Name: "chat", Summary: "talk to an A2A agent in the terminal (this host, or any other): looopy chat [url]", Run: chatCmd},
		{Name: "mcp", Summary: "serve the sandboxed plugin tools (and the agent) to one MCP client over stdio", Run: mcpCmd},
		{Name: "plugin", Summary: "write plugins: new (go, c, rust, assemblyscript, wat), build, test, install", Run: pluginCmd},
		{Name: "help", Summary: "list the commands, or show one command's flags", Run: help},
	}
}
