// Command echo2 is the second version of the echo test plugin: its echo
// answers with a "v2 " prefix, so a test sees which version served.
package main

import (
	"context"

	"github.com/looopy-go/looopy/pdk"
)

type echoArgs struct {
	Text string `json:"text"`
}

func init() {
	pdk.Tool("echo", "Echoes its text, version 2.", func(ctx context.Context, a echoArgs) (string, error) {
		return "v2 " + a.Text, nil
	})
}

func main() {}
