// Package pdk is what plugin authors import: the wire types shared by the host
// and its guests (one definition, used on both sides) and, when built with
// GOOS=wasip1, the Go guest SDK that makes a tool, model or agent plugin a few
// lines. See docs/PLUGIN_ABI.md for the calling convention.
//
// pdk imports only the standard library.
package pdk
