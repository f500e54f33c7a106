//go:build wasip1

// Command calculator is a tool plugin: calc evaluates an arithmetic expression.
package main

import (
	"context"

	"github.com/looopy-go/looopy/pdk"
)

// CalcArgs are the arguments of calc.
type CalcArgs struct {
	Expression string `json:"expression" desc:"an arithmetic expression: numbers, + - * / % ^, parentheses, unary minus; for example (2 + 3) * 4 ^ 2"`
}

func init() {
	pdk.Info("calculator", "1.0.0")
	pdk.Tool("calc", "Evaluates an arithmetic expression and returns the number.", calc, pdk.Idempotent())
}

func calc(_ context.Context, args CalcArgs) (string, error) {
	v, err := Eval(args.Expression)
	if err != nil {
		return "", err
	}
	return Format(v), nil
}

func main() {}
