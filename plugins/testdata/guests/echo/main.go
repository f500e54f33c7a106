// Command echo is a test plugin: tools that echo, add, fail and misbehave on
// request, so the host's tests can exercise every path of a tool call.
package main

import (
	"context"
	"errors"
	"strings"

	"github.com/looopy-go/looopy/pdk"
)

type echoArgs struct {
	Text string `json:"text" desc:"the text to echo back"`
}

type addArgs struct {
	A  float64 `json:"a" desc:"first operand"`
	B  float64 `json:"b" desc:"second operand"`
	Op string  `json:"op,omitempty" enum:"+,-" desc:"operation, + by default"`
}

type sizeArgs struct {
	Bytes int `json:"bytes" desc:"how many bytes to answer with"`
}

type empty struct{}

func init() {
	pdk.Info("echo", "1.0.0")
	pdk.Tool("echo", "Echoes its text.", func(ctx context.Context, a echoArgs) (string, error) {
		return a.Text, nil
	})
	pdk.Tool("add", "Adds or subtracts two numbers.", func(ctx context.Context, a addArgs) (float64, error) {
		if a.Op == "-" {
			return a.A - a.B, nil
		}
		return a.A + a.B, nil
	})
	pdk.Tool("fail", "Always fails.", func(ctx context.Context, a empty) (string, error) {
		return "", errors.New("this tool always fails")
	})
	pdk.Tool("big", "Answers with many bytes.", func(ctx context.Context, a sizeArgs) (string, error) {
		return strings.Repeat("x", a.Bytes), nil
	})
	pdk.Tool("spin", "Never returns.", func(ctx context.Context, a empty) (string, error) {
		for i := 0; ; i++ {
			if i < 0 {
				return "", nil
			}
		}
	})
	pdk.Tool("hog", "Allocates memory without end.", func(ctx context.Context, a empty) (string, error) {
		var keep [][]byte
		for {
			keep = append(keep, make([]byte, 1<<20))
		}
	})
	pdk.Tool("recurse", "Recurses without end.", func(ctx context.Context, a empty) (string, error) {
		return recurse(0), nil
	})
	pdk.Tool("panic", "Panics.", func(ctx context.Context, a empty) (string, error) {
		panic("deliberate")
	})
}

func recurse(n int) string {
	var pad [64]byte
	pad[n%64] = byte(n)
	return recurse(n+1) + string(pad[:1])
}

func main() {}
