//go:build long

package cli_test

import "testing"

// The other languages' templates, each built with its toolchain (clang-14
// and wasi-libc, Debian's rustc with the wasm32 standard library, npm for
// AssemblyScript: what .ci/run installs). In make test-long.

func TestLongPluginAuthorPathC(t *testing.T) {
	authorPath(t, "c", "hello-c", "hello-c.c", `Hello from`, `Howdy from`, nil, "Hello from hello-c", "Howdy from hello-c")
}

func TestLongPluginAuthorPathRust(t *testing.T) {
	authorPath(t, "rust", "hello-rust", "hello-rust.rs", `Hello from`, `Howdy from`, nil, "Hello from hello-rust", "Howdy from hello-rust")
}

func TestLongPluginAuthorPathAssemblyScript(t *testing.T) {
	authorPath(t, "assemblyscript", "hello-as", "assembly/index.ts", `Hello from`, `Howdy from`, nil, "Hello from hello-as", "Howdy from hello-as")
}
