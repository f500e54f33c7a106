// Package taskrt is the task runtime: it starts, cancels, pauses and
// resumes the tasks of the host's conversations, one turn per context at a
// time, each turn owned by a lease that the runtime renews while it runs;
// at startup (and periodically) it takes over the tasks whose lease lapsed
// and writes what a process that died left unwritten. It enforces the
// operator's usage limits and removes what finished tasks leave behind.
//
// The runtime is typed on loop: its stores are loop's interfaces, its
// events loop's events, handed to an Events publisher (the host's sse.Hub).
// It knows nothing of HTTP or A2A, and is tested without either.
//
// taskrt imports loop, the OpenTelemetry metric API and the standard
// library; no Fiber, Badger, wazero, Extism, and no other package of ours.
package taskrt
