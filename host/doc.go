// Package host is the composition root: configuration ([Config], read from
// JSON with flags and environment over it by [Main]), the Fiber routes (A2A
// JSON-RPC 1.0 at "/" and 0.3 at "/a2a/v0.3", the agent card, Looopy's event
// stream at /events/{contextId}, artifact downloads, health, and the admin
// API), auth, the table that maps errors to JSON-RPC codes and HTTP statuses
// (errors.go), the task manager that runs turns on contexts the host owns,
// OpenTelemetry, slog, and the wiring of store, sse, plugins and artifacts.
// It is the only package that imports Fiber or the OpenTelemetry SDK.
package host
