// Package artifacts owns typed artifacts (file, data, dataset): their storage
// (inline in Badger, large parts in blob storage), the built-in artifact
// tools, and the artifact events.
//
// artifacts imports loop, the store interfaces and Badger; never plugins, sse
// or host.
package artifacts
