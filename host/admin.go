package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/gofiber/fiber/v2"
)

// PluginAdmin is what the admin API needs of the plugin runtime.
type PluginAdmin interface {
	// Plugins lists the loaded plugins and their health.
	Plugins(ctx context.Context) ([]PluginStatus, error)
	// Load loads (or reloads) the plugin of that name from the plugin folder.
	Load(ctx context.Context, name string) error
	// Unload removes a plugin; turns that use it keep it until they end.
	Unload(ctx context.Context, name string) error
}

// PluginStatus is one plugin as the admin API shows it.
type PluginStatus struct {
	Name     string   `json:"name"`
	Version  string   `json:"version,omitempty"`
	Kind     string   `json:"kind,omitempty"`
	SHA256   string   `json:"sha256,omitempty"`
	Tools    []string `json:"tools,omitempty"`
	Healthy  bool     `json:"healthy"`
	State    string   `json:"state,omitempty"`  // serving, failed, loading
	Health   string   `json:"health,omitempty"` // ok, degraded, failed, loading
	Error    string   `json:"error,omitempty"`
	Calls    int64    `json:"calls"`
	Failures int64    `json:"failures"`
	// Busy: instances calls hold now; Waiting: calls waiting for one.
	Busy    int `json:"busy"`
	Waiting int `json:"waiting"`
	// Sandboxed is true for Wasm plugins; outside MCP servers are not.
	Sandboxed bool `json:"sandboxed"`
	// Grant is what a Wasm plugin was granted.
	Grant  *GrantView `json:"grant,omitempty"`
	Source string     `json:"source,omitempty"`
	Since  string     `json:"since,omitempty"`
	Note   string     `json:"note,omitempty"`
}

// errNoPlugins: the admin API was asked about plugins with no runtime.
var errNoPlugins = errors.New("no plugin runtime is configured")

// adminRoutes mounts /admin. Every route needs the admin credential; with
// none configured the admin API answers 403 to everyone.
func (s *Server) adminRoutes(r fiber.Router) {
	r.Use(func(c *fiber.Ctx) error {
		if !s.auth.adminOK(credential(c.Get(fiber.HeaderAuthorization), c.Get("X-API-Key"))) {
			if !s.auth.hasAdm {
				return fmt.Errorf("%w: the admin API is off (no admin token configured)", ErrForbidden)
			}
			return fmt.Errorf("%w: admin credential required", ErrUnauthenticated)
		}
		return c.Next()
	})
	s.adminTaskRoutes(r)
	s.adminConversationRoutes(r)
	r.Get("/events/:contextId", s.adminEvents)
	r.Get("/health", func(c *fiber.Ctx) error {
		out := fiber.Map{"status": "ok", "ready": s.ready.Load()}
		if s.plugins != nil {
			ps, err := s.plugins.Plugins(c.UserContext())
			if err != nil {
				return err
			}
			n, unhealthy, loading := 0, 0, 0
			for _, p := range ps {
				switch {
				case p.State == "loading":
					loading++
					continue
				case !p.Healthy:
					unhealthy++
				}
				n++
			}
			out["plugins"], out["unhealthyPlugins"], out["loadingPlugins"] = n, unhealthy, loading
		}
		return c.JSON(out)
	})
	r.Get("/plugins", func(c *fiber.Ctx) error {
		if s.plugins == nil {
			return errNoPlugins
		}
		ps, err := s.plugins.Plugins(c.UserContext())
		if err != nil {
			return err
		}
		return c.JSON(fiber.Map{"plugins": ps})
	})
	r.Post("/plugins/:name/load", func(c *fiber.Ctx) error {
		if s.plugins == nil {
			return errNoPlugins
		}
		if err := s.plugins.Load(c.UserContext(), c.Params("name")); err != nil {
			return err
		}
		return c.JSON(fiber.Map{"loaded": c.Params("name")})
	})
	r.Delete("/plugins/:name", func(c *fiber.Ctx) error {
		if s.plugins == nil {
			return errNoPlugins
		}
		if err := s.plugins.Unload(c.UserContext(), c.Params("name")); err != nil {
			return err
		}
		return c.JSON(fiber.Map{"unloaded": c.Params("name")})
	})
}
