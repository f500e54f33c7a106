// Package host is the composition root: configuration, the Fiber routes (A2A
// JSON-RPC 1.0 and 0.3, SSE, health, metrics, admin), auth, the table that
// maps errors to JSON-RPC codes and HTTP statuses, OpenTelemetry, slog, and
// the wiring of everything. It is the only package that imports Fiber or the
// OpenTelemetry SDK.
package host
