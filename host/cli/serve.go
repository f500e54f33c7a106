package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/looopy-go/looopy/host"
)

// serve runs the host until SIGINT or SIGTERM, then shuts it down
// gracefully (a second signal kills the process at once).
func serve(ctx context.Context, args []string, env Env) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	m := host.NewMain()
	m.Stdout = env.Stderr
	if err := m.ParseFlags(args); err != nil {
		fmt.Fprintln(env.Stderr, err)
		return 2
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(env.Stderr, "looopy:", err)
		return 1
	}
	failed := false
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
		return 1
	}
	m.Logger().Info("stopped")
	return 0
}
