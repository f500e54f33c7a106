package plugins

import (
	"context"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/store/redisstore"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// Two hosts on one Redis share each plugin's key-value quota: keys written
// through either count for both, also for a host that began counting
// before the other wrote (a per-host count would let each host fill the
// quota once).
func TestKVQuotaAcrossHosts(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	budgets := Budgets{KVQuotaBytes: 3 << 20, KVQuotaKeys: 1500}
	host := func() *Registry {
		st, err := redisstore.Open(context.Background(), redisstore.Options{Addr: srv.Addr, Password: srv.Password,
			Prefix: "quota:", SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return loadFlood(t, Config{KV: st, KVUsage: st, KVQuota: st, Policy: Policy{Budgets: budgets}}, nil)
	}
	a, b := host(), host()
	call := func(r *Registry, args string) (bool, string) {
		t.Helper()
		res := mustCall(t, r, "flood", args)
		return res.IsError, res.Content
	}
	// B writes first, so a per-host count would start B from one key.
	if isErr, out := call(b, `{"channel":"kv","n":1,"size":1,"start":9000}`); isErr {
		t.Fatalf("B's first write: %s", out)
	}
	if isErr, out := call(a, `{"channel":"kv","n":1000,"size":1}`); isErr {
		t.Fatalf("A's 1000 keys: %s", out)
	}
	// Overwriting costs no keys, on either host.
	if isErr, out := call(b, `{"channel":"kv","n":1000,"size":1}`); isErr {
		t.Fatalf("B overwriting A's keys: %s", out)
	}
	// 1001 keys are held: 600 more exceed 1500 wherever they are written.
	if isErr, out := call(b, `{"channel":"kv","n":600,"size":1,"start":1000}`); !isErr || !strings.Contains(out, "holds too many keys") {
		t.Fatalf("B past the service-wide quota: error %v, %.300s; want the key quota", isErr, out)
	}
	// The bytes quota holds across hosts too (the keys are full now, so
	// these overwrite): A fills most of it, B is refused past it.
	if isErr, out := call(a, `{"channel":"kv","n":2,"size":1000000}`); isErr {
		t.Fatalf("A's 2 MB: %s", out)
	}
	if isErr, out := call(b, `{"channel":"kv","n":2,"size":1000000,"start":2}`); !isErr || !strings.Contains(out, "space is full") {
		t.Fatalf("B past the service-wide byte quota: error %v, %.300s; want the space full", isErr, out)
	}
}
