package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/looopy-go/looopy/pdk"
)

// BenchmarkParseStream parses the recorded stream with two parallel tool calls.
func BenchmarkParseStream(b *testing.B) {
	data, err := os.ReadFile("testdata/tools.sse")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseStream(bytes.NewReader(data), func(pdk.Delta) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
