package main

import _ "embed"

// demoScript is played when the plugin's config names no script: the demo a
// fresh clone runs without any API key (see README.md).
//
//go:embed demo.json
var demoScript []byte
