package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// maxKept is how much of one artifact the chat keeps in memory to save it
// later; past it the artifact is listed but can not be saved from here.
const maxKept = 64 << 20

// artifact is what the chat received of one artifact.
type artifact struct {
	n       int // its number for /save, 0 for the answer's text
	id      string
	name    string
	parts   []*a2a.Part
	size    int
	dropped bool // larger than maxKept
	last    bool
	listed  bool

	// The answer's text (inline): what is shown of the current response.
	inline bool
	shown  string
	closed bool
}

// inlineText reports whether an artifact is the answer's text rather
// than a file: text parts only (plain text), none of them a named file.
func inlineText(a *a2a.Artifact) bool {
	if len(a.Parts) == 0 {
		return false
	}
	for _, p := range a.Parts {
		if _, ok := p.Content.(a2a.Text); !ok || p.Filename != "" {
			return false
		}
		if p.MediaType != "" && !strings.HasPrefix(p.MediaType, "text/plain") {
			return false
		}
	}
	return true
}

func (s *session) artifact(st *turnState, ev *a2a.TaskArtifactUpdateEvent) {
	if ev.Artifact == nil {
		return
	}
	key := string(ev.TaskID) + "/" + string(ev.Artifact.ID)
	a := s.arts[key]
	if a == nil {
		a = &artifact{id: string(ev.Artifact.ID), inline: inlineText(ev.Artifact)}
		s.arts[key] = a
		if !a.inline {
			s.artList = append(s.artList, a)
			a.n = len(s.artList)
		}
	}
	if ev.Artifact.Name != "" {
		a.name = ev.Artifact.Name
	}
	if a.inline {
		s.inline(st, a, ev)
		return
	}
	if !ev.Append {
		a.parts, a.size, a.dropped, a.listed = nil, 0, false, false
	}
	for _, p := range ev.Artifact.Parts {
		n := partSize(p)
		a.size += n
		if a.dropped || a.size > maxKept {
			a.dropped, a.parts = true, nil
			continue
		}
		a.parts = append(a.parts, p)
	}
	a.last = ev.LastChunk
	if ev.LastChunk {
		s.announce(a, "")
	}
	if failed, _ := ev.Artifact.Metadata["status"].(string); failed == "failed" {
		s.p.line(styleErr, "✗ artifact #%d %s failed: %s", a.n, sanitize(a.label()), sanitize(str(ev.Artifact.Metadata["error"])))
	}
}

// inline streams the answer's text. Looopy sends each model response as
// an artifact of its own: deltas (the first opens it, the next append),
// then an empty appended last chunk. A server that sends the whole text
// again as the last chunk gets only what was not shown yet written.
func (s *session) inline(st *turnState, a *artifact, ev *a2a.TaskArtifactUpdateEvent) {
	var b strings.Builder
	for _, p := range ev.Artifact.Parts {
		b.WriteString(p.Text())
	}
	txt := sanitize(b.String())
	switch {
	case ev.Append:
		s.p.text(txt)
		a.shown += txt
	case ev.LastChunk && !a.closed && a.shown != "" && strings.HasPrefix(txt, a.shown):
		s.p.text(txt[len(a.shown):])
		a.shown = txt
	default:
		if a.shown != "" {
			s.p.endLine()
		}
		s.p.text(txt)
		a.shown = txt
	}
	a.closed = ev.LastChunk
	if txt != "" {
		st.textShown = true
	}
}

func (s *session) announce(a *artifact, note string) {
	if a.listed {
		return
	}
	a.listed = true
	save := fmt.Sprintf(" — /save %d", a.n)
	if a.dropped {
		save = " — too large to keep here"
	}
	s.p.line(styleOK, "📎 artifact #%d %s: %s, %s%s%s", a.n, sanitize(a.label()), a.kind(), humanSize(a.size), note, save)
}

func (a *artifact) label() string {
	if a.name != "" {
		return a.name
	}
	return a.id
}

// kind says what the artifact holds: a media type, "data", "dataset, N
// rows", or a link.
func (a *artifact) kind() string {
	rows, data, url := 0, 0, ""
	for _, p := range a.parts {
		switch c := p.Content.(type) {
		case a2a.Data:
			data++
			if m, ok := c.Value.(map[string]any); ok {
				if r, ok := m["rows"].([]any); ok {
					rows += len(r)
					continue
				}
			}
		case a2a.URL:
			url = string(c)
		}
		if p.MediaType != "" {
			return p.MediaType
		}
	}
	switch {
	case rows > 0:
		return fmt.Sprintf("dataset, %d rows", rows)
	case data > 0:
		return "data (application/json)"
	case url != "":
		return "link " + url
	case len(a.parts) > 0:
		if _, ok := a.parts[0].Content.(a2a.Text); ok {
			return "text/plain"
		}
	}
	return "application/octet-stream"
}

func partSize(p *a2a.Part) int {
	switch c := p.Content.(type) {
	case a2a.Text:
		return len(c)
	case a2a.Raw:
		return len(c)
	case a2a.Data:
		b, _ := json.Marshal(c.Value)
		return len(b)
	}
	return 0
}

func humanSize(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

func (s *session) listArtifacts() {
	if len(s.artList) == 0 {
		s.p.line(styleDim, "no artifacts yet")
		return
	}
	for _, a := range s.artList {
		note := ""
		if !a.last {
			note = " (incomplete)"
		}
		a.listed = false
		s.announce(a, note)
	}
}

// save writes artifact N: its bytes or text as they are, its data as
// JSON (a dataset's batches as one {"rows": [...]}). It never replaces an
// existing file.
func (s *session) save(args []string) {
	if len(args) == 0 {
		s.p.line(styleErr, "usage: /save N [path]")
		return
	}
	n, ok := atoi(args[0])
	if !ok || n > len(s.artList) {
		s.p.line(styleErr, "no artifact #%s (/artifacts lists them)", args[0])
		return
	}
	a := s.artList[n-1]
	if a.dropped {
		s.p.line(styleErr, "artifact #%d is too large to keep in the chat (%s)", n, humanSize(a.size))
		return
	}
	body, ext, err := a.content()
	if err != nil {
		s.p.line(styleErr, "artifact #%d: %s", n, err.Error())
		return
	}
	path := ""
	if len(args) > 1 {
		path = strings.Join(args[1:], " ")
	} else {
		path = filepath.Join(s.opts.SaveDir, saveName(n, a.label(), ext))
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			s.p.line(styleErr, "%s exists: give another path (/save %d PATH)", path, n)
			return
		}
		s.p.line(styleErr, "save: %s", err.Error())
		return
	}
	_, werr := f.Write(body)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		s.p.line(styleErr, "save %s: %v", path, errors.Join(werr, cerr))
		return
	}
	s.p.line(styleOK, "saved artifact #%d to %s (%s)", n, path, humanSize(len(body)))
}

// content is what /save writes, and the file extension that fits it.
func (a *artifact) content() ([]byte, string, error) {
	var raw []byte
	var data []any
	var rows []any
	for _, p := range a.parts {
		switch c := p.Content.(type) {
		case a2a.Text:
			raw = append(raw, c...)
		case a2a.Raw:
			raw = append(raw, c...)
		case a2a.Data:
			if m, ok := c.Value.(map[string]any); ok {
				if r, ok := m["rows"].([]any); ok {
					rows = append(rows, r...)
					continue
				}
			}
			data = append(data, c.Value)
		case a2a.URL:
			return nil, "", fmt.Errorf("it is a link, not content: %s", string(c))
		}
	}
	switch {
	case rows != nil:
		b, err := json.MarshalIndent(map[string]any{"rows": rows}, "", "  ")
		return append(b, '\n'), ".json", err
	case len(data) == 1:
		b, err := json.MarshalIndent(data[0], "", "  ")
		return append(b, '\n'), ".json", err
	case len(data) > 1:
		b, err := json.MarshalIndent(data, "", "  ")
		return append(b, '\n'), ".json", err
	}
	if raw == nil {
		return nil, "", fmt.Errorf("it holds nothing to save")
	}
	return raw, ".txt", nil
}

// saveName is the file name /save gives artifact n when no path is typed:
// "artifact-N-" and the agent's name for it, its folders, leading dots and
// control characters removed, at most 100 bytes: the agent chooses no
// dotfile (.bash_login, .envrc) and no name a tool reads (Makefile), and
// the name stays within what a file system takes.
func saveName(n int, label, ext string) string {
	name := filepath.Base(filepath.Clean("/" + oneLine(sanitize(label))))
	name = strings.TrimLeft(name, ". ")
	if name == "/" || name == "" {
		name = "artifact"
	}
	if filepath.Ext(name) == "" {
		name += ext
	}
	if len(name) > 100 {
		e := filepath.Ext(name)
		if len(e) > 20 {
			e = ""
		}
		name = strings.ToValidUTF8(name[:100-len(e)], "") + e
	}
	return fmt.Sprintf("artifact-%d-%s", n, name)
}
