package cli

import (
	"bytes"
	"context"
	"strings"
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
