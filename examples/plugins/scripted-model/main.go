//go:build wasip1

// Command scripted-model is a model plugin that plays a script: rules matched
// against the latest user message, each a sequence of text chunks, tool calls
// and errors. Without a configured script it plays the demo (demo.json).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
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
			return nil, fmt.Errorf("config scriptFile: %w (is its folder granted in capabilities.allowedPaths?)", err)
		}
		s, err := ParseScript(b)
		if err != nil {
			return nil, fmt.Errorf("config scriptFile %s: %w", file, err)
		}
		return s, nil
	}
	return ParseScript(demoScript)
})

// userRules is the last reading of the rules file (config "rulesFile"),
// read again whenever the file changes, so an edit applies to the next
// model call with no rebuild or reload.
var userRules struct {
	mod  time.Time
	size int64
	read bool
	s    *Script
	err  error
}

// withUserRules puts the rules of the rules file, when there is one, before
// the script's: a user's own rules on top of the demo. A missing file is no
// rules; a broken one fails every call, naming the file and the rule.
func withUserRules(base *Script) (*Script, error) {
	file := pdk.Config("rulesFile")
	if file == "" {
		return base, nil
	}
	fi, err := os.Stat(file)
	if errors.Is(err, os.ErrNotExist) {
		return base, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config rulesFile: %w (is its folder granted in capabilities.allowedPaths?)", err)
	}
	if !userRules.read || !fi.ModTime().Equal(userRules.mod) || fi.Size() != userRules.size {
		userRules.read, userRules.mod, userRules.size = true, fi.ModTime(), fi.Size()
		userRules.s, userRules.err = nil, nil
		b, err := os.ReadFile(file)
		if err == nil {
			userRules.s, err = ParseScript(b)
		}
		if err != nil {
			userRules.err = fmt.Errorf("rules file %s: %w", file, err)
		}
	}
	if userRules.err != nil {
		return nil, userRules.err
	}
	return userRules.s.Over(base), nil
}

// wordCounts are the word counts of the instance's previous call, picks
// the rule it picked.
var (
	wordCounts WordCounts
	picks      PickCache
)

func init() {
	pdk.Info("scripted-model", "1.0.0")
	pdk.Model(generate)
}

func generate(ctx context.Context, req *pdk.ModelRequest, delta func(pdk.Delta) error) (*pdk.ModelResponse, error) {
	s, err := script()
	if err == nil {
		s, err = withUserRules(s)
	}
	if err != nil {
		return nil, &pdk.Error{Code: "bad_config", Message: err.Error()}
	}
	return s.Play(req, Runtime{Delta: delta, Sleep: sleep, Attempt: attempt, Forget: forget, Words: &wordCounts, Picks: &picks})
}

// attempt counts the attempts of one request in the plugin's key-value space,
// for hosts that do not report their retries in the request metadata. Without
// a key-value space every request is attempt 1.
func attempt(key string) int {
	k := "attempt/" + key
	v, ok, err := pdk.KVGet(k)
	if err != nil {
		return 1
	}
	n := 0
	if ok {
		n, _ = strconv.Atoi(string(v))
	}
	n++
	if err := pdk.KVSet(k, []byte(strconv.Itoa(n))); err != nil {
		return 1
	}
	return n
}

// forget drops the count of a request that got through.
func forget(key string) { _ = pdk.KVDelete("attempt/" + key) }

func sleep(d time.Duration) error {
	for d > 0 {
		step := min(d, sleepSlice)
		time.Sleep(step)
		d -= step
	}
	return nil
}

func main() {}
