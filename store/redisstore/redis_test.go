package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store/redisstore"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
	"github.com/looopy-go/looopy/store/storetest"
)

var prefixes atomic.Int64

// opener returns a function that opens a store on srv under a prefix no
// other test uses, closed when the test ends.
func opener(srv *redistest.Server) func(t *testing.T) *redisstore.Store {
	return func(t *testing.T) *redisstore.Store {
		t.Helper()
		prefix := fmt.Sprintf("test%d:", prefixes.Add(1))
		return openAt(t, srv, prefix)
	}
}

func openAt(t *testing.T, srv *redistest.Server, prefix string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(context.Background(), redisstore.Options{Addr: srv.Addr, Password: srv.Password, Prefix: prefix})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func stores(s *redisstore.Store) storetest.Stores {
	return storetest.Stores{Messages: s, Agents: s, Tasks: s, Events: s.Events(), KV: s,
		Damage: func(t *testing.T, id string) { damageTask(t, s, id) }}
}

// damageTask overwrites the stored record of task id with bytes that do
// not decode (its version is left as it was).
func damageTask(t *testing.T, s *redisstore.Store, id string) {
	t.Helper()
	if err := s.Client().HSet(context.Background(), s.Prefix()+"t:"+id, "d", `{"id":`).Err(); err != nil {
		t.Fatalf("damage task %q: %v", id, err)
	}
}

func TestRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	open := opener(srv)
	storetest.Run(t, func(t *testing.T) storetest.Stores {
		s := open(t)
		st := stores(s)
		var reopen func(t *testing.T, prefix string) storetest.Stores
		reopen = func(t *testing.T, prefix string) storetest.Stores {
			// A restart of the host: a new client on the same data.
			n := openAt(t, srv, prefix)
			r := stores(n)
			r.Reopen = func(t *testing.T) storetest.Stores { return reopen(t, prefix) }
			return r
		}
		st.Reopen = func(t *testing.T) storetest.Stores { return reopen(t, s.Prefix()) }
		return st
	})
}

func TestRedisDurableSuites(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	open := opener(srv)
	t.Run("Checkpoints", func(t *testing.T) {
		storetest.RunCheckpoints(t, func(t *testing.T) loop.CheckpointStore { return open(t) })
	})
	t.Run("Journal", func(t *testing.T) {
		storetest.RunJournal(t, func(t *testing.T) storetest.Durable { return open(t) })
	})
	t.Run("Leases", func(t *testing.T) {
		storetest.RunLeases(t, func(t *testing.T) loop.LeaseStore { return open(t) })
	})
	t.Run("TurnCommit", func(t *testing.T) {
		storetest.RunTurnCommit(t, func(t *testing.T) storetest.CommitStores {
			s := open(t)
			return storetest.CommitStores{Commit: s, Messages: s, Agents: s, Tasks: s, Checkpoints: s, Leases: s}
		})
	})
}
