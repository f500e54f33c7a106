package main

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/pdk"
)

func TestWriteFileInChunks(t *testing.T) {
	var got []byte
	var writes []pdk.ArtifactWrite
	write := func(w *pdk.ArtifactWrite) (string, error) {
		writes = append(writes, *w)
		b, err := base64.StdEncoding.DecodeString(w.Base64)
		if err != nil {
			return "", err
		}
		got = append(got, b...)
		return "art-1", nil
	}
	size := 2*ChunkBytes + 5
	id, err := WriteFile("blob.bin", size, write)
	if err != nil || id != "art-1" {
		t.Fatalf("id %q, err %v", id, err)
	}
	if !bytes.Equal(got, FileBytes(size)) || len(writes) != 3 {
		t.Fatalf("%d writes, %d bytes, equal %v", len(writes), len(got), bytes.Equal(got, FileBytes(size)))
	}
	if writes[0].Name != "blob.bin" || writes[0].Type != "file" || writes[1].Name != "" || writes[1].ArtifactID != "art-1" ||
		writes[1].Complete || !writes[2].Complete {
		t.Fatalf("writes %+v", writes)
	}
	seen := map[byte]bool{}
	for _, b := range FileBytes(256) {
		seen[b] = true
	}
	if len(seen) != 256 {
		t.Fatalf("a generated file holds %d distinct byte values, want all 256", len(seen))
	}
	for _, bad := range []struct {
		name string
		size int
		want string
	}{{"", 10, "name"}, {"x", 0, "bytes 0"}, {"x", MaxFileBytes + 1, "bytes"}} {
		if _, err := WriteFile(bad.name, bad.size, write); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("WriteFile(%q, %d) = %v, want an error about %s", bad.name, bad.size, err, bad.want)
		}
	}
}
