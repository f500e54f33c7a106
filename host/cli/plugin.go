package cli

import (
	"context"
	"fmt"
	"io"
)

func runPlugin(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "looopy plugin: not yet")
	return 2
}
