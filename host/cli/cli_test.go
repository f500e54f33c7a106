package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
)

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

func TestUnknownCommandListsTheCommands(t *testing.T) {
	code, _, stderr := run("frobnicate")
	if code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	for _, want := range []string{`unknown command "frobnicate"`, "serve", "help"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestHelpListsEveryCommand(t *testing.T) {
	code, stdout, _ := run("help")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(stdout, c.Name+" ") || !strings.Contains(stdout, c.Summary) {
			t.Errorf("help lacks %s:\n%s", c.Name, stdout)
		}
	}
}

func TestServeRefusesBadFlagsWithUsageCode(t *testing.T) {
	// Flags first means serve, as before subcommands existed.
	code, _, stderr := run("-no-such-flag")
	if code != 2 || !strings.Contains(stderr, "no-such-flag") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = run("serve", "stray")
	if code != 2 || !strings.Contains(stderr, `unexpected argument "stray"`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestEveryCommandAnswersHelp(t *testing.T) {
	for _, c := range commands() {
		var out, errb bytes.Buffer
		c.Run(context.Background(), []string{"-h"}, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		if out.Len()+errb.Len() == 0 {
			t.Errorf("%s -h printed nothing", c.Name)
		}
	}
}

func TestServeFlagsHelpVersionAndHints(t *testing.T) {
	code, stdout, stderr := run("-h")
	if code != 0 || !strings.Contains(stdout, "-plugins") || !strings.Contains(stdout, "-version") || stderr != "" {
		t.Fatalf("-h: exit %d, stdout %q, stderr %q; want exit 0 and the flags on stdout", code, stdout, stderr)
	}
	code, stdout, _ = run("-version")
	if code != 0 || !strings.HasPrefix(stdout, "looopy ") || len(strings.TrimSpace(stdout)) <= len("looopy") {
		t.Fatalf("-version: exit %d, stdout %q", code, stdout)
	}
	code, _, stderr = run("-plugin", "x")
	if code != 2 || !strings.Contains(stderr, "did you mean -plugins?") || !strings.Contains(stderr, `"looopy -h" lists the flags`) {
		t.Fatalf("-plugin: exit %d, stderr %q; want a hint naming -plugins", code, stderr)
	}
	code, _, stderr = run("-frobnicate")
	if code != 2 || strings.Contains(stderr, "did you mean") || !strings.Contains(stderr, `"looopy -h" lists the flags`) {
		t.Fatalf("-frobnicate: exit %d, stderr %q", code, stderr)
	}
}

// A host stopped while it starts says so, not that some plugin is missing.
func TestServeStoppedWhileStarting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := Main(ctx, []string{"-addr", "127.0.0.1:0", "-data", t.TempDir(), "-plugins", "../../examples/plugins", "-log-format", "json"},
		Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	if code != 1 || !strings.Contains(errb.String(), "looopy: stopped while starting (context canceled)") || strings.Contains(errb.String(), "not found") {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
}

func TestSignalNames(t *testing.T) {
	if signalName(syscall.SIGINT) != "SIGINT" || signalName(os.Interrupt) != "SIGINT" || signalName(syscall.SIGTERM) != "SIGTERM" {
		t.Fatalf("signal names: %s %s %s", signalName(syscall.SIGINT), signalName(os.Interrupt), signalName(syscall.SIGTERM))
	}
}
