// Package chat is a terminal client for any A2A agent: `looopy chat [url]`.
//
// It talks to the agent with the official a2a-go client (A2A 1.0, or 0.3
// through the SDK's compatibility transport when the card offers only
// that), line by line: the answer's text as it streams, progress and other
// status messages, artifacts (name, type, size, and /save to keep one),
// and the pauses of the humans-in-the-loop extension
// (docs/A2A_EXTENSION.md), whose approvals and questions are answered from
// the prompt with a data part on the same task. A plain input-required
// pause (a server that knows nothing of the extension) is answered with the
// next line as text on the same task.
//
// Against a Looopy host (its card lists the extension) the chat draws each
// turn from the host's own event stream (GET /events/{contextId}), which
// also carries what A2A has no form for: tool calls with their arguments
// and results, sub-agents and thoughts, all in the log's order; the A2A
// stream still says when the turn ends and how. It never needs it: should
// that stream fail, the conversation goes on with what A2A carries.
//
// An interrupt (Ctrl-C) cancels the running turn (CancelTask); a second one
// before the next line quits. Colours are used only when the output is a
// terminal.
package chat
