package store

// TaskKey is the Badger key of a task's record, for the tests that damage
// one.
func TaskKey(id string) []byte { return taskKey(id) }
