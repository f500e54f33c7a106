//go:build wasip1

// Command scripted-model is a model plugin that plays a script: rules matched
// against the latest user message, each a sequence of text chunks, tool calls
// and errors. Without a configured script it plays the demo (demo.json).
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/looopy-go/looopy/pdk"
)

// sleepSlice bounds one sleep of the guest. The host's clock (WASI
// poll_oneoff) cannot be interrupted while it sleeps, but the guest can be
// between two sleeps, so a cancelled call stops within one slice.
const sleepSlice = 20 * time.Millisecond

// script loads the script named by the config once per instance:
// "script" (the script itself, as an object or a JSON string) or
// "scriptFile" (a path inside a folder the manifest grants).
var script = sync.OnceValues(func() (*Script, error) {
	inline, file := pdk.Config("script"), pdk.Config("scriptFile")
	switch {
	case inline != "" && file != "":
		return nil, fmt.Errorf("config sets both script and scriptFile; set one")
	case inline != "":
		s, err := ParseScript([]byte(inline))
		if err != nil {
			return nil, fmt.Errorf("config script: %w", err)
		}
		return s, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("config scriptFile: %w", err)
		}
		s, err := ParseScript(b)
		if err != nil {
			return nil, fmt.Errorf("config scriptFile %s: %w", file, err)
		}
		return s, nil
	}
	return ParseScript(demoScript)
})

func init() {
	pdk.Info("scripted-model", "1.0.0")
	pdk.Model(generate)
}

func generate(ctx context.Context, req *pdk.ModelRequest, delta func(pdk.Delta) error) (*pdk.ModelResponse, error) {
	s, err := script()
	if err != nil {
		return nil, &pdk.Error{Code: "bad_config", Message: err.Error()}
	}
	return s.Play(req, Runtime{Delta: delta, Sleep: sleep})
}

func sleep(d time.Duration) error {
	for d > 0 {
		step := min(d, sleepSlice)
		time.Sleep(step)
		d -= step
	}
	return nil
}

func main() {}
