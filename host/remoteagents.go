package host

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/looopy-go/looopy/host/remote"
	"github.com/looopy-go/looopy/plugins"
)

// RemoteAgentConfig is a remote A2A agent (another Looopy host, or any A2A
// 1.0 server) the agent may call as a sub-agent: a tool named Name, described
// by the agent card's skills; each call is a sub-task of the calling task
// whose events stream from the remote task (docs/EVENTS.md, "Sub-agents").
type RemoteAgentConfig struct {
	// Name is the tool the model sees.
	Name string `json:"name"`
	// URL is the agent's base URL (its card is at
	// /.well-known/agent-card.json under it).
	URL string `json:"url"`
	// Headers are sent to the agent with every request: its credentials,
	// from this configuration only (a caller's are never passed on).
	// Values may be "env:NAME".
	Headers map[string]string `json:"headers,omitempty"`
	// AllowPrivateNetwork lets the agent be on a private or loopback
	// address; without it such an address is refused, as for plugins'
	// HTTP.
	AllowPrivateNetwork bool `json:"allowPrivateNetwork,omitempty"`
	// Reconnect is how long a call keeps trying to reach the agent again
	// after its stream broke or this host restarted mid-call (default
	// 60s); an agent silent for longer is an error result.
	Reconnect Duration `json:"reconnect,omitempty"`
	// CardTimeout bounds one fetch of the agent's card (default 5s). The
	// card is fetched in the background: the host's own card and turns
	// never wait for it; a call of the agent waits for the fetch under
	// way and is an error result when it fails.
	CardTimeout Duration `json:"cardTimeout,omitempty"`
	// EventsPerCall and EventBytesPerCall bound what one call forwards
	// from the remote task into the calling task's durable log (1000
	// events, 4 MiB); a call past either ends with an error result and
	// its remote task is canceled. EventBytesPerCall (plus 64 KiB) also
	// bounds each answer that is not a stream (the task read back at the
	// call's end). Negative: no limit.
	EventsPerCall     int   `json:"eventsPerCall,omitempty"`
	EventBytesPerCall int64 `json:"eventBytesPerCall,omitempty"`
	// MaxCardBytes (1 MiB), MaxSkills (128) and MaxDescriptionBytes
	// (64 KiB, the tool description made of the card, shown to the model
	// every turn) bound the agent card; a card past one leaves this agent
	// out with a logged error (tried again later), the rest of the host
	// unaffected. Negative: no limit.
	MaxCardBytes        int64 `json:"maxCardBytes,omitempty"`
	MaxSkills           int   `json:"maxSkills,omitempty"`
	MaxDescriptionBytes int   `json:"maxDescriptionBytes,omitempty"`
	// InterfaceOrigins are other origins ("https://host:port") the card
	// may name as its endpoints; by default only the url's own origin is
	// used and an interface elsewhere is refused.
	InterfaceOrigins []string `json:"interfaceOrigins,omitempty"`
	// BusyRetry is how long a call keeps sending its message (or an
	// answer to the paused remote task) again while the agent's host
	// refuses it for now, HOST_BUSY or QUOTA_EXCEEDED (default 30s); the
	// pause between tries starts at BusyPause (default 500ms), doubles up
	// to 10s, and is never shorter than the host's Retry-After. A refusal
	// asking to wait past what is left, or the last one, is an error
	// result naming it; cancelling the caller's task stops the waiting.
	// "off" (or "0"): never sent again, the first refusal is the error
	// result.
	BusyRetry Budget   `json:"busyRetry,omitempty"`
	BusyPause Duration `json:"busyPause,omitempty"`
	// WatchEvery is how often the task of this agent that a paused task
	// of this host waits on (a request passed up to its client) is read,
	// to see whether it moved on there without that answer (default 2s):
	// then the request is withdrawn and the paused task goes on with the
	// remote task's outcome at once.
	WatchEvery Duration `json:"watchEvery,omitempty"`
}

func validateRemoteAgents(rs []RemoteAgentConfig) error {
	seen := map[string]bool{}
	for i, r := range rs {
		if r.Name == "" {
			return fmt.Errorf("config: remoteAgents[%d]: empty name", i)
		}
		if seen[r.Name] {
			return fmt.Errorf("config: remoteAgents: %q given twice", r.Name)
		}
		seen[r.Name] = true
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("config: remoteAgents %q: url %q is not an http(s) URL", r.Name, r.URL)
		}
		for _, o := range r.InterfaceOrigins {
			ou, err := url.Parse(o)
			if err != nil || (ou.Scheme != "http" && ou.Scheme != "https") || ou.Host == "" || (ou.Path != "" && ou.Path != "/") {
				return fmt.Errorf("config: remoteAgents %q: interfaceOrigins: %q is not an origin (http(s)://host[:port])", r.Name, o)
			}
		}
	}
	return nil
}

// remoteAgents makes the toolsets of the configured remote agents. Their
// requests go through the egress dialer (private addresses refused unless
// allowed) and carry the caller's trace context.
func (m *Main) remoteAgents(cfg Config, chainID string) ([]*remote.Agent, error) {
	if len(cfg.RemoteAgents) == 0 {
		return nil, nil
	}
	eg := plugins.NewEgress(plugins.EgressConfig{Logger: m.log.With("component", "egress"), UserAgent: "looopy"})
	m.closers = append(m.closers, eg.Close)
	cp, hold, err := crashpointFromEnv(os.Getenv(crashpointEnv))
	if err != nil {
		return nil, err
	}
	if hold != nil {
		cp = nil // a stop point is the runtime's (see crashpointFromEnv)
	}
	var out []*remote.Agent
	for _, rc := range cfg.RemoteAgents {
		hdr := make(map[string]string, len(rc.Headers))
		for k, v := range rc.Headers {
			r, err := resolveSecret(v)
			if err != nil {
				return nil, fmt.Errorf("remote agent %q: header %s: %w", rc.Name, k, err)
			}
			hdr[k] = r
		}
		var rt http.RoundTripper = eg.Transport(rc.AllowPrivateNetwork)
		a, err := remote.New(remote.Config{Name: rc.Name, URL: rc.URL, Headers: hdr,
			Reconnect: time.Duration(rc.Reconnect), CardTimeout: time.Duration(rc.CardTimeout), InputTimeout: cfg.Interaction.timeout(), Crashpoint: cp,
			EventsPerCall: rc.EventsPerCall, EventBytesPerCall: rc.EventBytesPerCall, MaxCardBytes: rc.MaxCardBytes,
			MaxSkills: rc.MaxSkills, MaxDescriptionBytes: rc.MaxDescriptionBytes, InterfaceOrigins: rc.InterfaceOrigins, ChainID: chainID,
			BusyRetry: time.Duration(rc.BusyRetry), BusyPause: time.Duration(rc.BusyPause),
			WatchEvery: time.Duration(rc.WatchEvery)},
			rt, m.tel.propagator,
			m.log.With("component", "remote-agent", "agent", rc.Name))
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
