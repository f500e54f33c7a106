package loop_test

import (
	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// durableStores returns the checkpoint store and journal of db.
func durableStores(db *store.Badger) (loop.CheckpointStore, loop.Journal) { return db, db }
