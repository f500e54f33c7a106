package host

import (
	"github.com/gofiber/fiber/v2"

	"github.com/looopy-go/looopy/host/web"
)

// handlePage serves the web page (GET /) and its files (GET /ui/*). They
// are public: the page asks for the API key and sends it itself.
func (s *Server) handlePage(c *fiber.Ctx) error { return servePageFile(c, "index.html") }

func (s *Server) handlePageFile(c *fiber.Ctx) error { return servePageFile(c, c.Params("*")) }

func servePageFile(c *fiber.Ctx, name string) error {
	b, typ, ok := web.Asset(name)
	if !ok {
		return fiber.NewError(fiber.StatusNotFound, "no such file of the web page: "+name)
	}
	c.Set(fiber.HeaderContentType, typ)
	c.Set(fiber.HeaderContentSecurityPolicy, web.ContentSecurityPolicy)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	return c.Send(b)
}
