package main

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	for _, ok := range []string{"https://example.com/", "http://example.com:8080/a?b=c"} {
		if err := CheckURL(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for raw, want := range map[string]string{
		"ftp://example.com/":      "only http and https",
		"file:///etc/passwd":      "only http and https",
		"example.com/page":        "only http and https",
		"https:///path":           "no host",
		"https://u:p@example.com": "credentials",
		"http://[::1":             "missing ']'",
	} {
		if err := CheckURL(raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}

func TestLimit(t *testing.T) {
	for in, want := range map[int]int{0: DefaultMaxBytes, -3: DefaultMaxBytes, 10: 10, MaxMaxBytes + 1: MaxMaxBytes} {
		if got := Limit(in); got != want {
			t.Errorf("Limit(%d) = %d, want %d", in, got, want)
		}
	}
}

// endless is a body that never ends.
type endless struct{ read int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	e.read += len(p)
	return len(p), nil
}

func TestReadText(t *testing.T) {
	text, trunc, err := ReadText(strings.NewReader("hello"), 10)
	if err != nil || text != "hello" || trunc {
		t.Errorf("short: %q %v %v", text, trunc, err)
	}
	text, trunc, err = ReadText(strings.NewReader("hello world"), 5)
	if err != nil || text != "hello" || !trunc {
		t.Errorf("long: %q %v %v", text, trunc, err)
	}
	text, trunc, err = ReadText(strings.NewReader("aé€x"), 4)
	if err != nil || text != "aé" || !trunc {
		t.Errorf("utf-8 cut: %q %v %v", text, trunc, err)
	}
	var e endless
	text, trunc, err = ReadText(&e, 1000)
	if err != nil || len(text) != 1000 || !trunc || e.read > 1000+512*1024 {
		t.Errorf("endless: %d bytes %v %v after reading %d", len(text), trunc, err, e.read)
	}
	if _, _, err := ReadText(strings.NewReader("\xff\xfe"), 10); err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Errorf("binary: %v", err)
	}
	broken := io.MultiReader(strings.NewReader("x"), errReader{})
	if _, _, err := ReadText(broken, 10); err == nil || !strings.Contains(err.Error(), "read body: connection reset") {
		t.Errorf("broken: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestTextualAndFormat(t *testing.T) {
	for ct, want := range map[string]bool{"": true, "text/html; charset=utf-8": true, "application/json": true,
		"application/ld+json": true, "image/png": false, "application/octet-stream": false} {
		if Textual(ct) != want {
			t.Errorf("Textual(%q) = %v", ct, !want)
		}
	}
	if got, want := Format(200, "text/plain", "hi", true), "HTTP 200 (text/plain)\n\nhi\n[truncated]"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
	if got, want := Format(404, "", "", false), "HTTP 404\n\n"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
}

func TestHeader(t *testing.T) {
	h := map[string][]string{"content-type": {"text/plain"}, "X-Empty": {}}
	if got := Header(h, "Content-Type"); got != "text/plain" {
		t.Errorf("Header = %q", got)
	}
	if got := Header(h, "X-Empty"); got != "" {
		t.Errorf("empty header = %q", got)
	}
}
