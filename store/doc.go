// Package store implements loop's store interfaces: Badger (on disk by
// default, in memory on request) and a plain in-memory version for embedding
// and tests. Package store/storetest is the conformance suite both pass.
//
// store imports loop and Badger; never plugins, sse, host or artifacts.
package store
