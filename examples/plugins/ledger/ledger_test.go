package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestAppendOneLinePerCall(t *testing.T) {
	dir := t.TempDir()
	for i, e := range []string{"first", "two\nlines\tand tab", ""} {
		if err := Append(dir, fmt.Sprintf("call-%d", i), e); err != nil {
			t.Fatal(err)
		}
	}
	if err := Append(dir, "", "no id"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	want := "call-0\tfirst\ncall-1\ttwo lines and tab\ncall-2\t\n-\tno id\n"
	if string(b) != want {
		t.Errorf("ledger:\n%q\nwant\n%q", b, want)
	}
}

func TestAppendConcurrentCallsKeepEveryLine(t *testing.T) {
	dir := t.TempDir()
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := Append(dir, fmt.Sprintf("c%d", i), "entry"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	b, _ := os.ReadFile(filepath.Join(dir, FileName))
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines, want %d", len(lines), n)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		seen[strings.Split(l, "\t")[0]] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct call ids, want %d", len(seen), n)
	}
}

func TestAppendErrors(t *testing.T) {
	if err := Append("", "c", "e"); err == nil || !strings.Contains(err.Error(), "no folder configured") {
		t.Errorf("no dir: %v", err)
	}
	if err := Append(t.TempDir(), "c", strings.Repeat("x", maxEntry+1)); err == nil || !strings.Contains(err.Error(), "the limit is") {
		t.Errorf("long entry: %v", err)
	}
	if err := Append(filepath.Join(t.TempDir(), "missing"), "c", "e"); err == nil {
		t.Error("a missing folder gave no error")
	}
}
