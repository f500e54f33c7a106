package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FileName is the ledger inside its folder.
const FileName = "ledger.log"

// maxEntry bounds one entry, so one call writes one modest line.
const maxEntry = 4096

// Append writes one line, "<callID>\t<entry>\n", at the end of dir/ledger.log
// and syncs it to disk before returning, so that a line exists for every call
// that returned. Tabs and line breaks in the entry become spaces: one call,
// one line.
func Append(dir, callID, entry string) error {
	if dir == "" {
		return errors.New("ledger: no folder configured (config \"dir\")")
	}
	if len(entry) > maxEntry {
		return fmt.Errorf("ledger: entry is %d bytes; the limit is %d", len(entry), maxEntry)
	}
	if callID == "" {
		callID = "-"
	}
	line := oneLine(callID) + "\t" + oneLine(entry) + "\n"
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("ledger: %w (is %s granted read-write in capabilities.allowedPaths?)", err, dir)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("ledger: write: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("ledger: sync: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ledger: close: %w", err)
	}
	return nil
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '\n', '\r', '\t':
			return ' '
		}
		return r
	}, s)
}
