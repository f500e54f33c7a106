package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// Limits of one call.
const (
	DefaultMaxBytes = 256 << 10
	MaxMaxBytes     = 4 << 20
	maxEntries      = 1000
)

// Folder is the granted folder the tools read from.
type Folder struct {
	Root string // absolute; the manifest grants it read-only
}

// errEscape is the answer to any path that leaves the folder.
var errEscape = errors.New("the path leaves the granted folder")

// rel turns a path argument into a path relative to the root: "" and "."
// name the root, an absolute path must lie inside the root, and no ".."
// element is accepted (even one that would stay inside).
func (f Folder) rel(p string) (string, error) {
	if f.Root == "" {
		return "", errors.New("no folder configured (config \"root\")")
	}
	p = strings.ReplaceAll(p, "\\", "/")
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("%q: %w", p, errEscape)
		}
	}
	if strings.HasPrefix(p, "/") {
		root := path.Clean(filepath.ToSlash(f.Root))
		c := path.Clean(p)
		switch {
		case c == root:
			return ".", nil
		case strings.HasPrefix(c, root+"/"):
			p = strings.TrimPrefix(c, root+"/")
		default:
			return "", fmt.Errorf("%q: %w", p, errEscape)
		}
	}
	p = path.Clean("./" + p)
	if !fs.ValidPath(p) {
		return "", fmt.Errorf("%q: not a valid path", p)
	}
	return p, nil
}

// open opens the folder as an os.Root, which also refuses symbolic links
// that point outside it.
func (f Folder) open() (*os.Root, error) {
	r, err := os.OpenRoot(f.Root)
	if err != nil {
		return nil, fmt.Errorf("open the folder %s: %w (is it granted in capabilities.allowedPaths?)", f.Root, err)
	}
	return r, nil
}

// ReadFile returns the text of a file (at most maxBytes of it; 0: the
// default) and whether it was cut short.
func (f Folder) ReadFile(p string, maxBytes int) (text string, truncated bool, err error) {
	rel, err := f.rel(p)
	if err != nil {
		return "", false, err
	}
	switch {
	case maxBytes <= 0:
		maxBytes = DefaultMaxBytes
	case maxBytes > MaxMaxBytes:
		maxBytes = MaxMaxBytes
	}
	root, err := f.open()
	if err != nil {
		return "", false, err
	}
	defer root.Close()
	file, err := root.Open(rel)
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", p, unwrapPath(err))
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", p, err)
	}
	if fi.IsDir() {
		return "", false, fmt.Errorf("read %s: is a folder; use list_dir", p)
	}
	b, err := io.ReadAll(io.LimitReader(file, int64(maxBytes)+1))
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", p, err)
	}
	if len(b) > maxBytes {
		b, truncated = b[:maxBytes], true
		for len(b) > 0 && !utf8.Valid(b) && len(b) > maxBytes-utf8.UTFMax {
			b = b[:len(b)-1] // do not cut a character in half
		}
	}
	if !utf8.Valid(b) {
		return "", false, fmt.Errorf("read %s: not a text file (%d bytes)", p, fi.Size())
	}
	return string(b), truncated, nil
}

// Entry is one item of a folder listing.
type Entry struct {
	Name string `json:"name"`
	Dir  bool   `json:"dir,omitempty"`
	Link bool   `json:"link,omitempty"`
	Size int64  `json:"size"`
}

// ListDir lists a folder, sorted by name.
func (f Folder) ListDir(p string) ([]Entry, error) {
	rel, err := f.rel(p)
	if err != nil {
		return nil, err
	}
	root, err := f.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	d, err := root.Open(rel)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p, unwrapPath(err))
	}
	defer d.Close()
	des, err := d.ReadDir(maxEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("list %s: %w", p, unwrapPath(err))
	}
	if len(des) > maxEntries {
		return nil, fmt.Errorf("list %s: more than %d entries", p, maxEntries)
	}
	out := make([]Entry, 0, len(des))
	for _, de := range des {
		e := Entry{Name: de.Name(), Dir: de.IsDir(), Link: de.Type()&fs.ModeSymlink != 0}
		if info, err := de.Info(); err == nil && !e.Dir && !e.Link {
			e.Size = info.Size()
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// FormatListing renders a listing as text, folders with a trailing slash,
// symbolic links with a trailing @.
func FormatListing(es []Entry) string {
	if len(es) == 0 {
		return "(empty folder)"
	}
	var b strings.Builder
	for _, e := range es {
		switch {
		case e.Dir:
			fmt.Fprintf(&b, "%s/\n", e.Name)
		case e.Link:
			fmt.Fprintf(&b, "%s@\n", e.Name)
		default:
			fmt.Fprintf(&b, "%s\t%d bytes\n", e.Name, e.Size)
		}
	}
	return b.String()
}

// unwrapPath drops the root-relative path os.Root puts in its errors, so the
// message names the path the caller gave once.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if strings.Contains(pe.Err.Error(), "escapes") {
			return errEscape
		}
		return pe.Err
	}
	return err
}
