package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
)

// Env is what a command may use of its process: standard streams and the
// environment. Tests give their own.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Stdio is the process's own streams and environment.
func Stdio() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
}

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string // one line, for "looopy help"
	// Run runs the command with the arguments after its name and returns
	// the process's exit code: 0 success, 1 failure, 2 bad usage. ctx is
	// never cancelled by Main: a command that handles signals sets them up
	// itself.
	Run func(ctx context.Context, args []string, env Env) int
}

// Main runs the command args name; with no command (no arguments, or
// flags first) it serves, as looopy always did. It returns the exit code.
func Main(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return serve(ctx, args, env)
	}
	name := args[0]
	for _, c := range commands() {
		if c.Name == name {
			return c.Run(ctx, args[1:], env)
		}
	}
	fmt.Fprintf(env.Stderr, "looopy: unknown command %q\n\n", name)
	usage(env.Stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: looopy [command] [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `With no command, looopy serves. "looopy <command> -h" lists a command's flags.`)
}

func help(_ context.Context, args []string, env Env) int {
	if len(args) > 0 {
		for _, c := range commands() {
			if c.Name == args[0] {
				c.Run(context.Background(), []string{"-h"}, env)
				return 0
			}
		}
		fmt.Fprintf(env.Stderr, "looopy help: unknown command %q\n", args[0])
		return 2
	}
	usage(env.Stdout)
	return 0
}
