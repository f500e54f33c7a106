package main

import (
	"strings"
	"testing"

	"github.com/looopy-go/looopy/pdk"
)

func TestAnswersNeverCarryTheToken(t *testing.T) {
	tok := "s3cr3t-token-value"
	for _, res := range []pdk.ToolResult{
		ProfileAnswer(&pdk.Credential{Provider: Provider, Token: tok}),
		WhoamiAnswer(&pdk.Credential{Provider: "caller", Principal: "alice", Token: tok}),
	} {
		if strings.Contains(res.Content, tok) {
			t.Fatalf("answer %q carries the token", res.Content)
		}
		if !strings.Contains(res.Content, Digest(tok)) {
			t.Fatalf("answer %q does not name the token's digest %s", res.Content, Digest(tok))
		}
	}
	if got := WhoamiAnswer(&pdk.Credential{Principal: "bob"}).Content; got != "caller bob, no token" {
		t.Fatalf("whoami without a token = %q", got)
	}
}
