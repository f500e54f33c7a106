package host

import (
	"context"
	"time"

	"github.com/looopy-go/looopy/host/taskrt"
)

// ExpireConversationsAt runs the server's expiry of idle conversations as
// if it were now, for the tests of package host_test.
func ExpireConversationsAt(s *Server, now time.Time) (int, error) {
	return s.tasks.ExpireConversations(context.Background(), now)
}

// ConfigWithDefaults is c with the defaults the host applies.
func ConfigWithDefaults(c Config) Config { return c.withDefaults() }

// UsageOf is what principal p has used, as the server's usage
// limits count it (with the tokens its model calls running now hold).
func UsageOf(s *Server, p string) taskrt.PrincipalUsage {
	return s.usage.Usage(context.Background(), p)
}
