// Package wasmtest runs the Go example plugins, built by make plugins-go, in
// the host's own plugin runtime (package plugins): the calls a model, a tool
// or a sub-agent plugin gets from the host, with real grants, a real egress
// broker on loopback and real folders. The plugins' own logic is tested
// natively in each plugin's module.
package wasmtest
