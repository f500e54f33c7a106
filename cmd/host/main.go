// Command looopy serves AI agents over A2A: the host with its plugins,
// Badger store and event streams. Run it from the repository root with no
// flags to serve the example plugins with the scripted demo model.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/looopy-go/looopy/host"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	m := host.NewMain()
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "looopy:", err)
		os.Exit(1)
	}
	var failed bool
	select {
	case <-ctx.Done():
		m.Logger().Info("shutting down: finishing running turns", "signal", "received")
	case err := <-m.Done():
		if err != nil {
			m.Logger().Error("server stopped", "error", err.Error())
			failed = true
		}
	}
	stop() // a second signal kills the process at once
	if err := m.Close(); err != nil {
		m.Logger().Error("shutdown", "error", err.Error())
		failed = true
	}
	if failed {
		os.Exit(1)
	}
	m.Logger().Info("stopped")
}
