package host

import (
	"slices"
	"time"

	"github.com/looopy-go/looopy/host/mcp"
	"github.com/looopy-go/looopy/plugins"
)

// GrantView is what a plugin was granted, as the admin API shows it:
// requested ∩ allowed, with the defaults filled in. Secrets are named,
// never shown.
type GrantView struct {
	MemoryPages         uint32              `json:"memoryPages"`
	CallTimeout         string              `json:"callTimeout"`
	OutputLimit         int64               `json:"outputLimit"`
	Instances           int                 `json:"instances"`
	AllowedHosts        []string            `json:"allowedHosts,omitempty"`
	AllowPrivateNetwork bool                `json:"allowPrivateNetwork,omitempty"`
	Paths               []plugins.PathGrant `json:"paths,omitempty"`
	HostFunctions       []string            `json:"hostFunctions,omitempty"`
	Secrets             []string            `json:"secrets,omitempty"`
	// CallerAuth: the plugin receives the caller's credentials when it
	// asks (plugins.callerAuth in the config).
	CallerAuth bool `json:"callerAuth,omitempty"`
	// Refused lists what the manifest asked for and did not get, and the
	// limits capped by the host's policy.
	Refused []string `json:"refused,omitempty"`
}

func grantView(g plugins.Grant) *GrantView {
	v := &GrantView{MemoryPages: g.MemoryPages, CallTimeout: g.CallTimeout.String(), OutputLimit: g.OutputLimit,
		Instances: g.Instances, AllowedHosts: g.AllowedHosts, AllowPrivateNetwork: g.AllowPrivate,
		Paths: g.Paths, Refused: g.Refused, CallerAuth: g.CallerAuth}
	for f := range g.HostFunctions {
		v.HostFunctions = append(v.HostFunctions, f)
	}
	slices.Sort(v.HostFunctions)
	for name := range g.Secrets {
		v.Secrets = append(v.Secrets, name)
	}
	slices.Sort(v.Secrets)
	return v
}

// mcpStatus lists an outside MCP server among the plugins: kind
// "mcp-server", never sandboxed.
func mcpStatus(st mcp.Status) PluginStatus {
	ps := PluginStatus{Name: st.Name, Kind: "mcp-server", Tools: st.Tools, State: st.State,
		Healthy: st.State == "serving", Health: "ok", Error: st.LastError, Sandboxed: false,
		Source: st.Transport + ": " + st.Target,
		Note:   "not sandboxed: an outside MCP server's tools run with the rights of its process or service"}
	if !ps.Healthy {
		ps.Health = "failed"
	}
	if !st.Since.IsZero() {
		ps.Since = st.Since.UTC().Format(time.RFC3339)
	}
	return ps
}
