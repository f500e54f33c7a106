// Package store implements loop's store interfaces: Badger (on disk by
// default, in memory on request) and a plain in-memory version for embedding
// and tests. Package store/storetest is the conformance suite both pass.
//
// # What is here
//
//   - Memory (NewMemory) and Badger (Open) implement loop.MessageStore,
//     loop.AgentStore, loop.TaskStore and KV (a key-value space split in
//     namespaces, one per plugin). Their event logs (loop.EventLog) are
//     Memory.Events and Badger.Events: a separate value, since the event
//     log's Append and the history's Append share a name.
//   - Unknown ids give an error matching loop.ErrNotFound (a
//     *loop.NotFoundError naming the id); a stored record that does not
//     decode gives a *loop.CorruptError naming its key; bad input (an empty
//     or oversized id, a message without role, a KV value over the limit)
//     gives an error matching loop.ErrInvalid that says what is wrong.
//
// # Badger
//
// The key layout is readable text (see keys.go for the full table):
//
//	msg/<contextId>/<seq:20>   msgh/<contextId>   agent/<contextId>
//	task/<taskId>   tidx/{all,ctx,agent,owner,id}/…   evt/<stream>/<seq:20>
//	evth/<stream>   kv/<namespace>/<key>
//
// Sequence numbers are fixed-width decimal, so key order is numeric order;
// a head key per history and per stream holds the live range, so Append
// never scans and Recent seeks straight to the first wanted message: both
// cost the same at 10 or 100,000 messages.
//
// Writes are synced before they are acknowledged. One goroutine owned by the
// store applies all pending writes (of every context and stream) in one
// transaction and syncs once: concurrent writers share the sync (group
// commit), and sequence numbers are assigned in that single writer, so they
// are never lost or duplicated. Reads run concurrently on snapshots.
//
// TaskRecord.ExpiresAt becomes the Badger TTL of the record and of its index
// entries. EventLog.Expire writes the stream's deadline into its head alone
// (readers find the stream's records gone from then on; the head itself
// stays, with the stream's last seq, so its seqs never go back) and an
// entry of an expiry index ordered by deadline; a sweeper goroutine deletes
// the records of the streams whose deadline passed, in bounded writes, many
// streams at a time (badger_sweep.go), so that an expiry costs two keys
// whatever the stream's length. Badger drops expired entries itself; a
// goroutine owned by the store runs value-log garbage collection
// periodically. Close stops both.
//
// # Memory
//
// Memory keeps copies of what it is given and hands out copies. Expired
// tasks and streams are hidden from reads at once and removed by a sweeper
// goroutine that Close stops.
//
// store imports loop and Badger; never plugins, sse, host or artifacts.
package store
