package host

import (
	"context"
	"errors"

	"github.com/looopy-go/looopy/loop"
)

// loadPlugins builds the model, the toolsets and the admin view of the
// plugin folder.
func (m *Main) loadPlugins(ctx context.Context, cfg Config) (loop.Model, []loop.Toolset, PluginAdmin, error) {
	if m.Model != nil {
		return m.Model, nil, nil, nil
	}
	return nil, nil, nil, errors.New("no model: the plugin runtime is not wired yet")
}
