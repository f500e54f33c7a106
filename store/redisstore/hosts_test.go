package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store/redisstore"
	"github.com/looopy-go/looopy/store/redisstore/redistest"
)

// guard bounds every wait of these tests: a wake-up that never comes
// fails the test instead of hanging it.
const guard = 30 * time.Second

// Two handles on one prefix are two hosts: a reader waiting on one is
// woken by appends made through the other, for many streams at once.
func TestWaitWokenByAnotherHost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := openAt(t, srv, "hosts:")
	b := openAt(t, srv, "hosts:")
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	const streams, each = 20, 5
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("task/%d", i)
			var after uint64
			for after < each {
				last, err := a.Events().Wait(ctx, name, after)
				if err != nil {
					errs <- fmt.Errorf("%s: Wait after %d: %w", name, after, err)
					return
				}
				if last <= after {
					errs <- fmt.Errorf("%s: Wait after %d returned %d", name, after, last)
					return
				}
				recs, err := a.Events().Read(ctx, name, after, 0)
				if err != nil || len(recs) == 0 || recs[0].Seq != after+1 {
					errs <- fmt.Errorf("%s: Read after %d = %v, %v", name, after, recs, err)
					return
				}
				after = recs[len(recs)-1].Seq
			}
		}()
	}
	for k := range each {
		for i := range streams {
			if _, err := b.Events().Append(ctx, fmt.Sprintf("task/%d", i), []byte(fmt.Sprint(k))); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The SSE ids are the stream entries' ids: record N is entry 0-N.
func TestEventIDsAreStreamIDs(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := openAt(t, srv, "ids:")
	ctx := context.Background()
	if _, err := s.Events().Append(ctx, "task/x", []byte("a"), []byte("b"), []byte("c")); err != nil {
		t.Fatal(err)
	}
	msgs, err := s.Client().XRange(ctx, "ids:e:task/x", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		if want := fmt.Sprintf("0-%d", i+1); m.ID != want || m.Values["d"] != string(rune('a'+i)) {
			t.Fatalf("entry %d = %s %v, want id %s", i, m.ID, m.Values, want)
		}
	}
	// An entry someone wrote by hand with another id is reported, not
	// misread as a sequence number.
	if err := s.Client().XAdd(ctx, &redis.XAddArgs{Stream: "ids:e:task/x", ID: "99-1", Values: []any{"d", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Last(ctx, "task/x"); !errors.Is(err, loop.ErrCorrupt) {
		t.Fatalf("Last over a foreign entry id: err = %v, want ErrCorrupt", err)
	}
}

// What Redis acknowledged survives a SIGKILL of redis-server (append-only
// file, fsync on every write), and a waiting reader carries on once the
// server is back.
func TestKillRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s, err := redisstore.Open(context.Background(), redisstore.Options{Addr: srv.Addr, Prefix: "kill:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	tr := loop.TaskRecord{ID: "t1", ContextID: "c1", Status: loop.TaskWorking, CreatedAt: time.Now()}
	if err := s.SaveTask(ctx, tr); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, "c1", loop.Message{Role: loop.RoleUser, Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Append(ctx, "task/t1", []byte("e1"), []byte("e2")); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(ctx, "t1", "host-a", "c1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		last, err := s.Events().Wait(ctx, "task/t1", 2)
		if err == nil && last != 3 {
			err = fmt.Errorf("Wait returned %d, want 3", last)
		}
		waited <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it block (not needed for correctness)

	srv2, err := srv.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Stop)

	got, err := loadEventually(ctx, s, "t1")
	if err != nil || got.Version != 1 || got.Status != loop.TaskWorking {
		t.Fatalf("task after Redis was killed = %+v, %v", got, err)
	}
	if n, err := s.Count(ctx, "c1"); err != nil || n != 1 {
		t.Fatalf("history after Redis was killed: %d, %v", n, err)
	}
	if n, err := s.Events().Last(ctx, "task/t1"); err != nil || n != 2 {
		t.Fatalf("event log after Redis was killed: last %d, %v", n, err)
	}
	if _, err := s.AcquireLease(ctx, "t1", "host-b", "c1", time.Minute); !errors.Is(err, loop.ErrLeaseHeld) {
		t.Fatalf("lease after Redis was killed: err = %v, want ErrLeaseHeld", err)
	}
	if _, err := s.RenewLease(ctx, l, time.Hour); err != nil {
		t.Fatalf("renew after Redis was killed: %v", err)
	}
	if _, err := s.Events().Append(ctx, "task/t1", []byte("e3")); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("reader waiting across the restart: %v", err)
	}
}

// loadEventually retries while the client reconnects.
func loadEventually(ctx context.Context, s *redisstore.Store, id string) (loop.TaskRecord, error) {
	for {
		t, err := s.LoadTask(ctx, id)
		if err == nil || errors.Is(err, loop.ErrNotFound) || ctx.Err() != nil {
			return t, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A server without append-only persistence is reported, so the host can
// warn that a crash of Redis would lose acknowledged work.
func TestDurabilityReported(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := openAt(t, srv, "dur:")
	ao, fsync, err := s.Durability(context.Background())
	if err != nil || ao != "yes" || fsync != "always" {
		t.Fatalf("Durability = %q, %q, %v; want yes, always", ao, fsync, err)
	}
}

// A wrong password is refused when the store opens, with the reason.
func TestOpenRefusesBadPassword(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: "s3cret"})
	if _, err := redisstore.Open(context.Background(), redisstore.Options{Addr: srv.Addr, Password: "wrong"}); err == nil {
		t.Fatal("Open with a wrong password succeeded")
	}
	s, err := redisstore.Open(context.Background(), redisstore.Options{Addr: srv.Addr, Password: "s3cret"})
	if err != nil {
		t.Fatalf("Open with the password: %v", err)
	}
	s.Close()
}

// After Redis restarts, the wake-ups come back: the blocking read of the
// event log is made again over a new connection (a failed dedicated
// connection stays failed in go-redis, and waiters on this host would
// otherwise fall back to polling, a second or two behind, for good).
func TestWakeupsComeBackAfterRedisRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := openAt(t, srv, "rs:")
	b := openAt(t, srv, "rs:")
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if _, err := b.Events().Append(ctx, "task/r", []byte("e1")); err != nil {
		t.Fatal(err)
	}
	waitFor := func(after uint64) {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			last, err := a.Events().Wait(ctx, "task/r", after)
			if err == nil && last <= after {
				err = fmt.Errorf("Wait after %d returned %d", after, last)
			}
			done <- err
		}()
		blockedReader(t, ctx, b) // a's blocking read is under way
		if _, err := b.Events().Append(ctx, "task/r", []byte("e")); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	waitFor(1)

	srv2, err := srv.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Stop)
	if _, err := loadEventually(ctx, b, "none"); err != nil && !errors.Is(err, loop.ErrNotFound) {
		t.Fatal(err)
	}
	// Without a new connection the reader never blocks in XREAD again.
	waitFor(2)
}

// blockedReader waits until some client of the server is blocked in
// XREAD (the wake-up reader); it fails at the guard.
func blockedReader(t *testing.T, ctx context.Context, s *redisstore.Store) {
	t.Helper()
	for {
		list, err := s.Client().ClientList(ctx).Result()
		if err == nil {
			for _, line := range strings.Split(list, "\n") {
				if strings.Contains(line, " cmd=xread") && strings.Contains(line, " flags=b") {
					return
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no client blocked in XREAD: the wake-up reader is not reading (last client list: %q, %v)", list, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
