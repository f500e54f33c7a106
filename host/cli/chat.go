package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/looopy-go/looopy/host/chat"
)

const chatUsage = `usage: looopy chat [flags] [url]

A conversation with an A2A agent in the terminal (default url %s).
Flags:
`

// chatCmd is `looopy chat [url]`: a terminal conversation with any A2A
// agent (host/chat). Ctrl-C cancels the running turn, a second one quits.
func chatCmd(ctx context.Context, args []string, env Env) int {
	fs := flag.NewFlagSet("looopy chat", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	contextID := fs.String("context", "", "resume the conversation with this context id")
	apiKey := fs.String("api-key", "", "the API key sent with every request (default: $LOOOPY_API_KEY)")
	keyHeader := fs.String("api-key-header", "", `the header that carries the API key (default "Authorization: Bearer KEY"; e.g. X-API-Key)`)
	color := fs.String("color", "auto", "colours: auto (when the output is a terminal and $NO_COLOR is unset), always or never")
	saveDir := fs.String("save-dir", ".", "where /save writes an artifact given no path")
	noThoughts := fs.Bool("no-thoughts", false, "hide the agent's thoughts")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprintf(env.Stdout, chatUsage, chat.DefaultURL)
			fs.SetOutput(env.Stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(env.Stderr, "looopy chat: %v\n", err)
		return 2
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(env.Stderr, "looopy chat: want at most one url, got %q\n", fs.Args())
		return 2
	}
	opts := chat.Options{URL: fs.Arg(0), APIKey: *apiKey, APIKeyHeader: *keyHeader, ContextID: *contextID,
		SaveDir: *saveDir, NoThoughts: *noThoughts}
	if opts.APIKey == "" {
		opts.APIKey = os.Getenv("LOOOPY_API_KEY")
	}
	switch *color {
	case "always":
		opts.Color = true
	case "never":
	case "auto":
		opts.Color = os.Getenv("NO_COLOR") == "" && isTerminal(env.Stdout)
	default:
		fmt.Fprintf(env.Stderr, "looopy chat: -color %q: want auto, always or never\n", *color)
		return 2
	}

	// Interrupts cancel turns instead of ending the process; SIGTERM ends
	// the chat.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	intr := make(chan struct{}, 4)
	go func() {
		for range sigs {
			select {
			case intr <- struct{}{}:
			default:
			}
		}
	}()
	opts.Interrupts = intr
	opts.Echo = echoSwitch(env.Stdin)
	if err := chat.Run(ctx, opts, env.Stdin, env.Stdout); err != nil {
		fmt.Fprintln(env.Stderr, "looopy chat:", chat.Sanitize(err.Error()))
		return 1
	}
	return 0
}
