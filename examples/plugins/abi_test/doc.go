// Package abitest runs the non-Go example plugins (C, Rust, AssemblyScript,
// WAT, and one built with Extism's AssemblyScript PDK) from their committed
// .wasm fixtures on raw wazero and the Extism Go SDK: it checks each
// manifest against its module, answers the Looopy ABI's host side the way
// docs/PLUGIN_ABI.md specifies, calls describe and the tools, and checks the
// results. Its benchmarks measure cold start, instantiation, memory per
// instance and a warm call per language.
package abitest
