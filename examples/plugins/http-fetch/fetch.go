package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"unicode/utf8"
)

// Limits of one fetch.
const (
	DefaultMaxBytes = 64 << 10
	MaxMaxBytes     = 1 << 20
)

// CheckURL accepts an absolute http or https URL with a host.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %q: only http and https can be fetched", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("url %q: no host", raw)
	}
	if u.User != nil {
		return fmt.Errorf("url %q: credentials in the URL are not sent", raw)
	}
	return nil
}

// Limit clamps the maxBytes argument to 1..MaxMaxBytes (0: the default).
func Limit(maxBytes int) int {
	switch {
	case maxBytes <= 0:
		return DefaultMaxBytes
	case maxBytes > MaxMaxBytes:
		return MaxMaxBytes
	}
	return maxBytes
}

// ReadText reads at most limit bytes of body as text. It stops reading as
// soon as it has more than limit bytes, so a huge or endless body costs no
// more than the limit. truncated says there was more; a cut never splits a
// UTF-8 character. A body that is not text is refused.
func ReadText(body io.Reader, limit int) (text string, truncated bool, err error) {
	b, err := io.ReadAll(io.LimitReader(body, int64(limit)+1))
	if err != nil {
		return "", false, fmt.Errorf("read body: %w", err)
	}
	if len(b) > limit {
		b, truncated = b[:limit], true
		for n := 0; n < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); n++ {
			b = b[:len(b)-1]
		}
	}
	if !utf8.Valid(b) {
		return "", false, errors.New("the body is not UTF-8 text")
	}
	return string(b), truncated, nil
}

// Textual reports whether a Content-Type names text worth showing a model.
func Textual(contentType string) bool {
	ct := strings.ToLower(strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0]))
	if ct == "" || strings.HasPrefix(ct, "text/") {
		return true
	}
	for _, s := range []string{"json", "xml", "javascript", "yaml", "x-www-form-urlencoded"} {
		if strings.Contains(ct, s) {
			return true
		}
	}
	return false
}

// Format renders the result the model reads: the status line, then the text.
func Format(status int, contentType, text string, truncated bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", status)
	if contentType != "" {
		fmt.Fprintf(&b, " (%s)", contentType)
	}
	b.WriteString("\n\n")
	b.WriteString(text)
	if truncated {
		b.WriteString("\n[truncated]")
	}
	return b.String()
}

// Header returns the first value of a header, whatever the case of its name.
func Header(h map[string][]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}
