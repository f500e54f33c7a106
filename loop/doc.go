// Package loop is the domain of Looopy-Go: conversations ([Message],
// [ToolCall], [ToolDefinition]), the model and toolset interfaces, the events
// of Looopy's internal protocol, the store interfaces, the single turn
// ([Loop]) and the multi-turn [Agent] with its lifecycle.
//
// loop imports only the standard library, the OpenTelemetry trace API,
// golang.org/x/sync and the wire types of package pdk. It must not import any
// other package of this module, nor Fiber, Badger, wazero or Extism: the
// adapters (store, plugins, sse, host) depend on loop, never the reverse.
package loop
