// Package plugins runs WebAssembly plugins: manifests and capabilities, the
// compile cache, instance pools, host functions, the egress broker, and hot
// reload. It adapts each plugin to loop's Model and Toolset interfaces.
//
// plugins imports loop, pdk, wazero and Extism; never store, sse, host or
// artifacts.
package plugins
