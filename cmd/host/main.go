// Command looopy serves AI agents over A2A: the host with its plugins,
// Badger store, event streams and web page. Run it from the repository root
// with no arguments to serve the example plugins with the scripted demo
// model. Its subcommands ("looopy help" lists them) live in host/cli.
package main

import (
	"context"
	"os"

	"github.com/looopy-go/looopy/host/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Stdio()))
}
