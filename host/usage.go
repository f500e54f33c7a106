package host

import (
	"errors"
	"fmt"

	"github.com/looopy-go/looopy/host/taskrt"
)

// ObservabilityConfig configures metrics access and usage limits.
type ObservabilityConfig struct {
	// MetricsToken, when set, is the bearer token GET /metrics requires
	// (or "env:NAME"). Empty: /metrics is open with auth off, and needs the
	// admin token with auth on (the metrics name principals).
	MetricsToken string `json:"metricsToken,omitempty"`
	// UsageLimits bound what each principal may use, over the life of the
	// data directory. The key "*" applies to every principal without its
	// own entry. A turn that reaches a limit ends as failed, saying which.
	UsageLimits map[string]UsageLimit `json:"usageLimits,omitempty"`
}

// UsageLimit bounds a principal's usage; zero fields are unbounded.
type UsageLimit = taskrt.UsageLimit

// PrincipalUsage is what a principal has used.
type PrincipalUsage = taskrt.PrincipalUsage

// validate reports a limit that cannot be meant.
func (o ObservabilityConfig) validate() error {
	for p, l := range o.UsageLimits {
		if p == "" {
			return errors.New("config: observability.usageLimits: empty principal")
		}
		if l.Tokens < 0 || l.ToolCalls < 0 {
			return fmt.Errorf("config: observability.usageLimits[%q]: limits must not be negative", p)
		}
	}
	return nil
}
