package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/looopy-go/looopy/pdk"
)

// Provider is the third party whose token profile_read needs.
const Provider = "example-oauth"

// ProfileRequest is what profile_read asks the host for.
var ProfileRequest = pdk.CredentialRequest{Provider: Provider, Scopes: []string{"profile:read"},
	AuthURL: "https://auth.example.test/authorize?client_id=looopy", AuthType: "oauth2"}

// Digest names a token without showing it: the first 12 hex digits of its
// sha256.
func Digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])[:12]
}

// ProfileAnswer is profile_read's answer once it has its token.
func ProfileAnswer(c *pdk.Credential) pdk.ToolResult {
	return pdk.ToolResult{Content: fmt.Sprintf("profile read with a %s token of %d bytes (sha256 %s)", c.Provider, len(c.Token), Digest(c.Token))}
}

// WhoamiAnswer is whoami's answer.
func WhoamiAnswer(c *pdk.Credential) pdk.ToolResult {
	tok := "no token"
	if c.Token != "" {
		tok = "token sha256 " + Digest(c.Token)
	}
	return pdk.ToolResult{Content: fmt.Sprintf("caller %s, %s", c.Principal, tok)}
}
