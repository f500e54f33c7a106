package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/looopy-go/looopy/host"
)

// signalError is the cause of a context a signal cancelled.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "received " + signalName(e.sig) }

// signalName is the signal's conventional name ("SIGINT").
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// serve runs the host until SIGINT or SIGTERM, then shuts it down
// gracefully (a second signal kills the process at once). A signal while
// the host is starting stops the start (plugin compiles included).
func serve(ctx context.Context, args []string, env Env) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	stop := func() { signal.Stop(sigs) }
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case s := <-sigs:
			cancel(signalError{s})
		case <-ctx.Done():
		}
	}()

	m := host.NewMain()
	m.Stdout = env.Stderr
	if err := m.ParseFlags(args); err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			fmt.Fprintln(env.Stdout, err)
			return 0
		case errors.Is(err, host.ErrVersion):
			fmt.Fprintln(env.Stdout, "looopy", host.Version())
			return 0
		}
		fmt.Fprintln(env.Stderr, "looopy:", err)
		return 2
	}
	if err := m.Run(ctx); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(env.Stderr, "looopy: stopped while starting (%s)\n", causeText(ctx))
			return 1
		}
		fmt.Fprintln(env.Stderr, "looopy:", err)
		return 1
	}
	failed := false
	select {
	case <-ctx.Done():
		attrs := []any{"signal", "none"}
		var se signalError
		if errors.As(context.Cause(ctx), &se) {
			attrs[1] = signalName(se.sig)
		}
		m.Logger().Info("shutting down: finishing running turns", attrs...)
	case err := <-m.Done():
		if err != nil {
			m.Logger().Error("server stopped: the host exits (running turns get the shutdown grace)", "error", err.Error())
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

// causeText says why ctx ended: the signal, or the caller's cancellation.
func causeText(ctx context.Context) string {
	var se signalError
	if errors.As(context.Cause(ctx), &se) {
		return signalName(se.sig)
	}
	return context.Cause(ctx).Error()
}
