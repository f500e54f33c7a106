//go:build wasip1

// Command authed-api is a tool plugin whose tools need credentials: the
// host's credential host function hands them over, and pauses the task for
// the client when they are not there yet.
package main

import (
	"context"

	"github.com/looopy-go/looopy/pdk"
)

type none struct{}

func init() {
	pdk.Info("authed-api", "1.0.0")
	pdk.Tool("profile_read", "Reads the user's profile at example-oauth (needs the user's token; the host asks the client for it).",
		func(ctx context.Context, _ none) (pdk.ToolResult, error) {
			c, err := pdk.GetCredential(ctx, ProfileRequest)
			if err != nil {
				// Not there yet (the task pauses for it and this call runs
				// again), or refused: either way this call ends here.
				return pdk.ToolResult{}, err
			}
			return ProfileAnswer(c), nil
		})
	pdk.Tool("whoami", "Says who the caller is, from the caller's own credentials.",
		func(ctx context.Context, _ none) (pdk.ToolResult, error) {
			c, err := pdk.GetCredential(ctx, pdk.CredentialRequest{Provider: "caller"})
			if err != nil {
				return pdk.ToolResult{}, err
			}
			return WhoamiAnswer(c), nil
		})
}

func main() {}
