// Package artifacts owns typed artifacts: what an agent hands back besides
// its words. There are three kinds:
//
//   - file: text or binary content built from appended chunks, with a MIME
//     type;
//   - data: a JSON object replaced whole by each write (versioned);
//   - dataset: rows appended in batches and checked against a schema of
//     named, typed columns (string, number, integer, boolean, date, json);
//     a row that does not match is refused with its row and column named.
//
// An artifact belongs to a task and a context and has an owner (the
// principal of the turn). It is building until it is complete or failed;
// nothing can be written to it after that.
//
// Storage: DB keeps records in Badger (Open, sharing the host's database;
// keys under "art/<artifactId>/…" with indexes by context, task and expiry)
// or in memory (NewMemory). Parts over Config.InlineMax (1 MiB) go to a
// BlobStore, a local folder by default (LocalBlobs); the interface is
// shaped so an S3-compatible store can implement it. Reads stream one part
// at a time (Open, Export); no call holds a whole artifact in memory.
// Artifacts of a task expire with it (ExpireTask, then Sweep).
//
// Events: Writer is the layer that makes every change and sends the loop
// event announcing it (file-write, data-write, dataset-write) so a client
// can rebuild each artifact from the stream alone. Tools is the built-in
// toolset the model uses (create_artifact, append_artifact, ...), and
// Writer.ApplyJSON is the plugin runtime's artifact_write host function.
//
// artifacts imports loop and Badger; never plugins, sse or host.
package artifacts
