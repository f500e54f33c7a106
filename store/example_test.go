package store_test

import (
	"context"
	"fmt"
	"log"

	"github.com/looopy-go/looopy/loop"
	"github.com/looopy-go/looopy/store"
)

// A Badger store holds the history of each conversation; the event log of
// each stream numbers its records from 1.
func ExampleOpen() {
	ctx := context.Background()
	s, err := store.Open(store.Options{InMemory: true}) // Dir: "/var/lib/looopy" on disk
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	_ = s.Append(ctx, "ctx-1",
		loop.Message{Role: loop.RoleUser, Content: "Hi"},
		loop.Message{Role: loop.RoleAssistant, Content: "Hello!"},
		loop.Message{Role: loop.RoleUser, Content: "Weather?"})
	recent, _ := s.Recent(ctx, "ctx-1", 2)
	for _, m := range recent {
		fmt.Println(m.Role, m.Content)
	}

	first, _ := s.Events().Append(ctx, "ctx-1", []byte(`{"kind":"task-created"}`), []byte(`{"kind":"task-status"}`))
	last, _ := s.Events().Last(ctx, "ctx-1")
	fmt.Println("events", first, "to", last)

	_, err = s.LoadTask(ctx, "no-such-task")
	fmt.Println(err)
	// Output:
	// assistant Hello!
	// user Weather?
	// events 1 to 2
	// load task: task "no-such-task" not found
}
