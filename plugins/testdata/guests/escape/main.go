// Command escape is a hostile test plugin: one tool, fs, does any file
// operation a guest can ask of WASI on the paths it is given, so that tests
// can try every way out of a folder grant.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/looopy-go/looopy/pdk"
)

type fsArgs struct {
	Op   string `json:"op" desc:"hold, release, read, write, append, create, truncate, list, stat, lstat, mkdir, rmdir, remove, rename, symlink, link, readlink, chmod, utimes"`
	Path string `json:"path"`
	To   string `json:"to,omitempty" desc:"second path (rename, link) or link target (symlink)"`
	Text string `json:"text,omitempty"`
}

// held are the files "hold" opened.
var held []*os.File

func do(a fsArgs) (string, error) {
	switch a.Op {
	case "read":
		b, err := os.ReadFile(a.Path)
		return string(b), err
	case "write":
		return "ok", os.WriteFile(a.Path, []byte(a.Text), 0o644)
	case "append":
		f, err := os.OpenFile(a.Path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return "", err
		}
		defer f.Close()
		_, err = f.WriteString(a.Text)
		return "ok", err
	case "create":
		f, err := os.OpenFile(a.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return "", err
		}
		return "ok", f.Close()
	case "truncate":
		f, err := os.OpenFile(a.Path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return "", err
		}
		return "ok", f.Close()
	case "list":
		es, err := os.ReadDir(a.Path)
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		return strings.Join(names, ","), err
	case "stat", "lstat":
		st := os.Stat
		if a.Op == "lstat" {
			st = os.Lstat
		}
		fi, err := st(a.Path)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %d %v", fi.Mode(), fi.Size(), fi.ModTime().Unix()), nil
	case "mkdir":
		return "ok", os.Mkdir(a.Path, 0o755)
	case "rmdir", "remove":
		return "ok", os.Remove(a.Path)
	case "rename":
		return "ok", os.Rename(a.Path, a.To)
	case "symlink":
		return "ok", os.Symlink(a.To, a.Path)
	case "link":
		return "ok", os.Link(a.To, a.Path)
	case "hold":
		// Opens the path Text times and keeps every file open (in held,
		// so that no finalizer closes them) across calls.
		n, _ := strconv.Atoi(a.Text)
		for i := 0; i < n; i++ {
			f, err := os.Open(a.Path)
			if err != nil {
				return fmt.Sprintf("held %d, then: %v", len(held), err), nil
			}
			held = append(held, f)
		}
		return fmt.Sprintf("held %d", len(held)), nil
	case "release":
		for _, f := range held {
			_ = f.Close()
		}
		n := len(held)
		held = nil
		return fmt.Sprintf("released %d", n), nil
	case "readlink":
		return os.Readlink(a.Path)
	case "chmod":
		return "ok", os.Chmod(a.Path, 0o777)
	case "utimes":
		t := time.Unix(1, 0)
		return "ok", os.Chtimes(a.Path, t, t)
	}
	return "", fmt.Errorf("unknown op %q", a.Op)
}

func init() {
	pdk.Tool("fs", "Does one file operation.", func(ctx context.Context, a fsArgs) (string, error) {
		return do(a)
	})
}

func main() {}
