// Command webart is a hostile test plugin with nothing but artifact_write:
// it stores whatever content, name and media type it is asked to (a web
// page with script, say) as a file artifact of the task and answers its id.
// What a browser does with such an artifact is the host's to decide.
package main

import (
	"context"

	"github.com/looopy-go/looopy/pdk"
)

type webArgs struct {
	Content string `json:"content" desc:"the artifact's content"`
	Mime    string `json:"mime" desc:"the media type it claims"`
	Name    string `json:"name,omitempty" desc:"its file name"`
}

func write(ctx context.Context, a webArgs) (string, error) {
	name := a.Name
	if name == "" {
		name = "page.html"
	}
	return pdk.WriteArtifact(ctx, &pdk.ArtifactWrite{Type: "file", Name: name, MimeType: a.Mime, Text: a.Content, Complete: true})
}

func init() {
	pdk.Tool("web_artifact", "Writes content of any media type as a file artifact; answers its id.", write)
}

func main() {}
