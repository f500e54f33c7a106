package host

import (
	"context"
	"time"
)

// ExpireConversationsAt runs the server's expiry of idle conversations as
// if it were now, for the tests of package host_test.
func ExpireConversationsAt(s *Server, now time.Time) (int, error) {
	return s.tasks.ExpireConversations(context.Background(), now)
}

// ConfigWithDefaults is c with the defaults the host applies.
func ConfigWithDefaults(c Config) Config { return c.withDefaults() }
