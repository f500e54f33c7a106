package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/looopy-go/looopy/pdk"
)

// BenchmarkPlay is one scripted model call of a ten-turn conversation: the
// cost the scripted model adds to an end-to-end test or a load test.
func BenchmarkPlay(b *testing.B) {
	sc, err := ParseScript(demoScript)
	if err != nil {
		b.Fatal(err)
	}
	var msgs []pdk.Message
	for range 10 {
		msgs = append(msgs, user("tell me something about the host"), pdk.Message{Role: pdk.RoleAssistant, Content: "You said: something"})
	}
	msgs = append(msgs, user("calc (1+2)*3"))
	req := &pdk.ModelRequest{Messages: msgs}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sc.Play(req, Runtime{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlayHistory is the scripted model's own part of the host's
// BenchmarkModelCall (examples/plugins/wasmtest): one rule echoing the last
// message, a conversation of 20 messages of a paragraph each.
func BenchmarkPlayHistory(b *testing.B) {
	sc, err := ParseScript([]byte(`{"rules":[{"name":"any","match":"(?s)^(.*)$","steps":[{"text":"You said: $1"}]}]}`))
	if err != nil {
		b.Fatal(err)
	}
	answer := strings.Repeat("The host answered with a paragraph of ordinary text. ", 6)
	var msgs []pdk.Message
	for i := range 10 {
		msgs = append(msgs, user(fmt.Sprintf("question %d about the host and its plugins", i)), pdk.Message{Role: pdk.RoleAssistant, Content: answer})
	}
	req := &pdk.ModelRequest{Messages: append(msgs, user("say this back"))}
	var wc WordCounts // as the plugin plays: the same conversation again
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sc.Play(req, Runtime{Words: &wc}); err != nil {
			b.Fatal(err)
		}
	}
}
