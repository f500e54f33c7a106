package main

import (
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
