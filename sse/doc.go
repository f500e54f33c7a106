// Package sse owns the durable event log of each task (monotonic ids), the
// fan-out to subscribers with filters, the Server-Sent Events wire format,
// heartbeats, Last-Event-ID replay, and the mapping of Looopy events to A2A
// events. It writes to an io.Writer and a flush func: no HTTP framework here.
//
// sse imports loop and the standard library (and the A2A wire types).
package sse
