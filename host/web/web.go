// Package web holds the host's web page: plain HTML, CSS and JavaScript,
// embedded in the binary, served at "/" and "/ui/". The page speaks the
// host's own A2A JSON-RPC and /events endpoints; it fetches nothing from
// anywhere else.
package web

import (
	"embed"
	"io/fs"
	"mime"
	"path"
)

//go:embed static
var static embed.FS

// Asset returns the content and media type of the page's file name
// ("index.html", "app.js", "style.css"), or false when there is none.
func Asset(name string) ([]byte, string, bool) {
	if name == "" || !fs.ValidPath(name) {
		return nil, "", false
	}
	b, err := static.ReadFile(path.Join("static", name))
	if err != nil {
		return nil, "", false
	}
	typ := mime.TypeByExtension(path.Ext(name))
	if typ == "" {
		typ = "application/octet-stream"
	}
	return b, typ, true
}

// ContentSecurityPolicy is sent with the page: scripts, styles and
// connections from the host only, no inline script, no frames.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' blob: data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
