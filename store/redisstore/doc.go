// Package redisstore implements every store interface of loop on Redis
// (7.0 or later), so that several hosts can share one agent service:
// messages, agents, versioned tasks, the event log (Redis Streams),
// checkpoints, the tool-call journal, leases, the atomic turn commit and
// the key-value space of plugins and usage counters.
//
// # Key layout
//
// Every key starts with the configured prefix P (default "looopy:"):
//
//	P m:<contextId>      list    the history, one JSON message per element
//	P a:<contextId>      string  agent metadata (JSON)
//	P ca                 zset    conversations by last activity: member <contextId>, score its Unix ms, set with a:
//	P t:<taskId>         hash    v: version, d: the record (JSON); PEXPIREAT = ExpiresAt
//	P tx:<taskId>        hash    the task's index entry (m), keys (c, o, g), status (s) and update time (u, Unix ns), no TTL
//	P ti:all, P ti:c:<contextId>, P ti:o:<owner>, P ti:g:<agentId>
//	                     zset    task listings: member <created:19>:<taskId>, score 0
//	P e:<stream>         stream  the event log; entry id 0-<seq>, field d; PEXPIRE from Expire
//	P el:<stream>        string  the stream's last seq when it was last set to expire, no TTL: the next append after the stream expired continues after it
//	P cp:<taskId>        string  checkpoint (JSON)
//	P j:<taskId>         hash    journal: b:<callId> the begun entry, e:<callId> its end
//	P jo:<taskId>        list    call ids in the order they began
//	P dur                set     task ids with a checkpoint or a journal
//	P l:<key>            hash    lease: o owner, t token, e expiry (server ms), d data
//	P ls                 set     lease keys
//	P kv:<len(ns)>:<ns>:<key>  string  the key-value space
//	P w:<random>         stream  wake-ups of one process's blocking reader
//
// # Event ids
//
// A stream's entries are added with the explicit id 0-* (Redis 7: the
// millisecond part fixed at 0, the sequence part one above the last), so
// the entry 0-N is the record with Seq N, which is the SSE id a client
// sees. Ids are monotonic per stream and never reused while the stream
// exists; a stream that expired (its task finished long ago) starts again
// at 1, as every backend's does.
//
// # Atomicity and durability
//
// Every write that touches more than one key is one Lua script (versioned
// task saves, the turn commit, leases, journal entries, event appends), so
// it is atomic on the server. Lease expiry is decided by the server's clock
// (TIME inside the script), never by comparing two hosts' clocks. A write
// is durable when the server has it in its append-only file: the promise
// "nothing acknowledged is lost" needs appendonly yes and appendfsync
// always on the server (see docs/ARCHITECTURE.md); with everysec a crash
// of Redis itself may lose the last second.
//
// Redis Cluster is not supported: scripts touch keys they compute, so all
// keys must live on one primary (replicas and Sentinel are fine).
package redisstore
