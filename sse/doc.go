// Package sse owns the durable event log of each task (monotonic ids), the
// fan-out to subscribers with filters, the Server-Sent Events wire format,
// heartbeats, Last-Event-ID replay, and the mapping of Looopy events to A2A
// events. It writes to an io.Writer and a flush func: no HTTP framework here.
//
// sse imports loop and the standard library (and the A2A wire types).
//
// # Streams and ids
//
// A stream is one append-only log of loop.EventLog. Every task has its own
// (TaskStream: what A2A clients read) and every conversation has one
// (ContextStream: Looopy's GET /events/{contextId}). Hub.PublishTask writes
// an event to both, the task stream first. An event's id is its sequence
// number in the stream's log; it is the SSE id: field and the cursor for
// Last-Event-ID.
//
// The context stream is a log of its own rather than an index into the task
// logs: a reconnecting client then needs one number (its Last-Event-ID) and
// one sequential read, whatever number of tasks the conversation had; the
// task logs can expire one by one without leaving the index dangling; and
// the EventLog interface stays four methods. The price is that each event is
// stored twice, and a crash between the two appends can leave the last
// event of a turn in the task stream only (the task stream, which A2A
// relies on, is written first).
//
// # Publishing and subscribing
//
// Publish appends to the log first and only then wakes the stream's
// subscribers. Each stream has at most one writer goroutine, which appends
// everything queued for the stream in one call to the log, so publishers
// arriving during a synced append share the next one; Hub.Sink, the
// EventSink of a turn, only queues, so a turn never waits for the disk. Subscribers are never handed events: each is woken through a
// channel of size one and reads from its own cursor, from the stream's
// in-memory tail (the recent events of a stream that has subscribers) or,
// when it is further behind, from the log. So replay and the live tail are
// one sequence without gap or duplicate, a slow subscriber never blocks the
// publisher or anyone else (it falls behind and catches up from the log),
// and nothing is buffered per subscriber. The Hub serializes the appends of
// each stream, so ids become visible in order.
//
// Internal events ("internal:…") are stored, and an in-process observer may
// read them (Filter.Internal), but Serve never writes one.
//
// # Serving
//
// Serve writes a subscription as SSE frames through an Encoder: Looopy
// frames (LooopyEncoder), A2A 1.0 (A2AEncoder) or A2A 0.3 (A2A03Encoder),
// whose data are JSON-RPC responses carrying the request's id. It writes a
// comment frame on idle streams (heartbeat), flushes after each burst, and
// stops when the stream is finished, after a final A2A status, when ctx is
// done, or when a write fails, which is how a departed client is noticed. A
// write or flush blocking longer than ServeOptions.WriteTimeout counts as a
// stall: a watchdog timer calls ServeOptions.Abort (the host closes the
// connection there) and Serve returns ErrStalled.
//
// # Retention
//
// Hub.Finish marks a stream finished (its task is over): subscribers end
// once drained, and the log expires after Config.Retention.
//
// # Wiring (the host)
//
//	hub, _ := sse.New(sse.Config{Log: db.Events(), Retention: 24 * time.Hour})
//	sink := hub.Sink(onErr)                  // loop.EventSink for a turn
//	after, err := sse.ParseLastEventID(c.Get("Last-Event-ID"))
//	sub, err := hub.Subscribe(ctx, sse.TaskStream(id), after, sse.Filter{})
//	defer sub.Close()
//	err = sse.Serve(ctx, w, w.Flush, sub, sse.A2AEncoder{RequestID: reqID},
//		sse.ServeOptions{Abort: func() { _ = conn.Close() }})
//	hub.Finish(ctx, sse.TaskStream(id))      // when the task is terminal
package sse
