package artifacts_test

import (
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/looopy-go/looopy/artifacts"
	"github.com/looopy-go/looopy/artifacts/artifactstest"
)

func TestConformanceBadger(t *testing.T) {
	artifactstest.Run(t, func(t *testing.T) artifacts.Store {
		dir := t.TempDir()
		db, err := badger.Open(badger.DefaultOptions(dir + "/badger").WithLogger(nil).WithMemTableSize(16 << 20).WithValueThreshold(1 << 10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		s, err := artifacts.Open(db, nil, artifacts.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestConformanceMemory(t *testing.T) {
	artifactstest.Run(t, func(t *testing.T) artifacts.Store { return artifacts.NewMemory(nil, artifacts.Config{}) })
}
