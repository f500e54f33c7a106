// Command asker is a test tool plugin granted model_call: its tool asks the
// host's model again and again until the host refuses, and answers how
// many calls it made.
package main

import (
	"context"
	"fmt"

	"github.com/looopy-go/looopy/pdk"
)

type askArgs struct {
	Times int `json:"times" desc:"how many model calls to make at most"`
}

func init() {
	pdk.Info("asker", "1.0.0")
	pdk.Tool("ask_model", "Asks the host's model, again and again.", func(ctx context.Context, a askArgs) (string, error) {
		for i := range a.Times {
			if _, err := pdk.CallModel(ctx, &pdk.ModelRequest{MaxTokens: 50,
				Messages: []pdk.Message{{Role: pdk.RoleUser, Content: "from the tool"}}}); err != nil {
				return fmt.Sprintf("%d calls, then: %v", i, err), nil
			}
		}
		return fmt.Sprintf("%d calls", a.Times), nil
	})
}

func main() {}
