package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Hostile modules made in the test, byte by byte: each has a memory and
// functions of type () -> () only, enough for the compiler (they fail to
// load as plugins, having no looopy exports, if they ever get that far).

func wasmSection(id byte, body []byte) []byte {
	return append(appendU32([]byte{id}, uint32(len(body))), body...)
}

// wasmModule builds a module of one memory (min pages) and the given
// function bodies (each: locals and code, without the size prefix).
func wasmModule(pages uint32, bodies [][]byte) []byte {
	out := []byte("\x00asm\x01\x00\x00\x00")
	out = append(out, wasmSection(1, []byte{1, 0x60, 0, 0})...)
	fs := appendU32(nil, uint32(len(bodies)))
	for range bodies {
		fs = append(fs, 0)
	}
	out = append(out, wasmSection(3, fs)...)
	out = append(out, wasmSection(5, appendU32([]byte{1, 0}, pages))...)
	code := appendU32(nil, uint32(len(bodies)))
	for _, b := range bodies {
		code = append(appendU32(code, uint32(len(b))), b...)
	}
	return append(out, wasmSection(10, code)...)
}

// fillLoopBody is a loop of n memory.fill: one function that took minutes
// to compile.
func fillLoopBody(n int) []byte {
	b := []byte{0, 0x03, 0x40}
	for range n {
		b = append(b, 0x41, 0, 0x41, 0, 0x41, 0, 0xfc, 0x0b, 0)
	}
	return append(b, 0x0c, 0, 0x0b, 0x0b)
}

// ifsBody is n ifs in a row: each function is within the admission limits
// and takes the compiler a while (its time grows with the square of n).
func ifsBody(n int) []byte {
	b := []byte{1, 1, 0x7f}
	for range n {
		b = append(b, 0x20, 0, 0x04, 0x40, 0x41, 1, 0x21, 0, 0x0b)
	}
	return append(b, 0x0b)
}

// slowModule compiles for long, a function at a time: funcs functions of
// ifs ifs each.
func slowModule(funcs, ifs int) []byte {
	body := ifsBody(ifs)
	bodies := make([][]byte, funcs)
	for i := range bodies {
		bodies[i] = body
	}
	return wasmModule(1, bodies)
}

// installBytes writes a module and its manifest into dir/name.
func installBytes(t testing.TB, dir, name string, wasm []byte) string {
	t.Helper()
	pd := filepath.Join(dir, name)
	if err := os.MkdirAll(pd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pd, name+".wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	m, _ := json.Marshal(map[string]any{"name": name, "version": "1.0.0", "kind": "tool", "wasm": name + ".wasm", "sha256": hex.EncodeToString(sum[:])})
	if err := os.WriteFile(filepath.Join(pd, ManifestFile), m, 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(pd, ManifestFile)
}
