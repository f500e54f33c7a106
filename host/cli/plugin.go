package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/looopy-go/looopy/plugins"
	"github.com/looopy-go/looopy/plugins/author"
)

const pluginUsage = `usage:
  looopy plugin new [-dir DIR] [-looopy-src CHECKOUT] <go|c|rust|assemblyscript|wat> <name>
  looopy plugin build [DIR]
  looopy plugin test [-compile-timeout D] [-load-timeout D] [-cache-dir DIR] [DIR]
  looopy plugin install [-plugins PLUGIN_FOLDER] [DIR]

DIR is the plugin's folder (default: the current folder; for new, ./<name>).
A walkthrough: docs/PLUGIN_ABI.md, "Writing a plugin with looopy plugin".
`

func runPlugin(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, pluginUsage)
		return 2
	}
	var err error
	switch args[0] {
	case "new":
		err = pluginNew(args[1:], stdout)
	case "build":
		err = withDir(args[1:], func(dir string) error {
			_, err := author.Build(ctx, dir, stderr)
			return err
		})
	case "test":
		err = pluginTest(ctx, args[1:], stdout)
	case "install":
		err = pluginInstall(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, pluginUsage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q\n%s", args[0], pluginUsage)
	}
	if err != nil {
		fmt.Fprintln(stderr, "looopy plugin:", err)
		return 1
	}
	return 0
}

func withDir(args []string, fn func(dir string) error) error {
	switch len(args) {
	case 0:
		return fn(".")
	case 1:
		return fn(args[0])
	}
	return fmt.Errorf("want at most one folder, got %v", args)
}

func pluginNew(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("looopy plugin new", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", "", "the new plugin's folder (default ./<name>)")
	src := fs.String("looopy-src", os.Getenv("LOOOPY_SRC"), "the Looopy checkout a Go plugin builds against (env LOOOPY_SRC; default: the checkout this binary or the current folder is in)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, pluginUsage)
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("want a language and a name\n%s", pluginUsage)
	}
	lang, err := author.ParseLang(fs.Arg(0))
	if err != nil {
		return err
	}
	name := fs.Arg(1)
	if *dir == "" {
		*dir = name
	}
	if lang == author.Go && *src == "" {
		*src = findCheckout()
	}
	if err := author.New(*dir, lang, name, author.NewOptions{LooopySrc: *src}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "new %s plugin %s in %s\nnext: looopy plugin build %s && looopy plugin test %s\n", lang, name, *dir, *dir, *dir)
	return nil
}

// findCheckout looks for the Looopy checkout above this binary, then above
// the current folder.
func findCheckout() string {
	var starts []string
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		starts = append(starts, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, d := range starts {
		for {
			if author.IsLooopySrc(d) {
				return d
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return ""
}

func pluginInstall(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("looopy plugin install", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	to := fs.String("plugins", os.Getenv("LOOOPY_PLUGINS"), "the host's plugin folder (env LOOOPY_PLUGINS)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, pluginUsage)
	}
	if *to == "" {
		return errors.New("no plugin folder: pass -plugins or set LOOOPY_PLUGINS")
	}
	return withDir(fs.Args(), func(dir string) error {
		target, err := author.Install(dir, *to)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "installed in %s\n", target)
		return nil
	})
}

// pluginTest is `looopy plugin test`: the host's default policy, with the
// compile and load timeouts settable (a slow or loaded machine compiles a
// large module for longer than the host's defaults allow; a host sets them
// in plugins.compileTimeout and plugins.loadTimeout), and the compilation
// cache a host uses (plugins.cacheDir), so that it loads the tested module
// without compiling it again.
func pluginTest(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("looopy plugin test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	compile := fs.Duration("compile-timeout", plugins.DefaultCompileTimeout, "bound of compiling the module (plugins.compileTimeout)")
	load := fs.Duration("load-timeout", plugins.DefaultLoadTimeout, "bound of the guest code a load runs: start section, _initialize, describe (plugins.loadTimeout)")
	cache := fs.String("cache-dir", "", "wazero's compilation cache (plugins.cacheDir; default: in memory): a host sharing it reads the compiled code instead of compiling again")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, pluginUsage)
	}
	if *compile <= 0 || *load <= 0 {
		return fmt.Errorf("-compile-timeout and -load-timeout must be positive\n%s", pluginUsage)
	}
	return withDir(fs.Args(), func(dir string) error {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		policy := author.DefaultTestPolicy(abs)
		policy.CompileTimeout, policy.LoadTimeout = *compile, *load
		return author.Test(ctx, abs, stdout, author.TestOptions{Policy: &policy, CacheDir: *cache})
	})
}

// pluginCmd is `looopy plugin`: new, build, test and install.
func pluginCmd(ctx context.Context, args []string, env Env) int {
	return runPlugin(ctx, args, env.Stdout, env.Stderr)
}
