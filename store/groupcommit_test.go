package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/looopy-go/looopy/loop"
)

// TestGroupCommit holds the commit goroutine busy while 64 writers (messages
// to 32 contexts, events to 32 streams) queue up, then checks that all of
// them were made durable by one transaction.
func TestGroupCommit(t *testing.T) {
	b, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan struct{})
	blocker := make(chan error, 1)
	go func() {
		blocker <- b.write(ctx, &writeOp{run: func() error {
			close(started)
			<-release
			return nil
		}})
	}()
	<-started
	const writers = 64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs <- b.Append(ctx, fmt.Sprint("ctx-", i), loop.Message{Role: loop.RoleUser, Content: "x"})
			} else {
				_, err := b.Events().Append(ctx, fmt.Sprint("stream-", i), []byte("e"))
				errs <- err
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(b.ops) < writers {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d writes queued", len(b.ops), writers)
		}
		time.Sleep(time.Millisecond)
	}
	before := b.commits.Load()
	close(release)
	if err := <-blocker; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := b.commits.Load() - before; n != 1 {
		t.Fatalf("%d queued writes took %d commits, want 1", writers, n)
	}
	for i := 0; i < writers; i += 2 {
		if n, err := b.Count(ctx, fmt.Sprint("ctx-", i)); err != nil || n != 1 {
			t.Fatalf("ctx-%d: Count = %d, %v", i, n, err)
		}
	}
}
