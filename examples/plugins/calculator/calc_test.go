package main

import (
	"strings"
	"testing"
)

func TestEval(t *testing.T) {
	tests := []struct {
		expr string
		want string
	}{
		{"2+2", "4"},
		{"1 + 2 * 3", "7"},
		{"(1 + 2) * 3", "9"},
		{"10 - 4 - 3", "3"},
		{"100 / 10 / 5", "2"},
		{"7 % 4", "3"},
		{"-7 % 4", "-3"},
		{"2 ^ 3 ^ 2", "512"},
		{"-2 ^ 2", "-4"},
		{"(-2) ^ 2", "4"},
		{"2 ^ -1", "0.5"},
		{"--3", "3"},
		{"+3 - -3", "6"},
		{"1.5 * 4", "6"},
		{".5 + .25", "0.75"},
		{"1e3 + 1E-1", "1000.1"},
		{"0.1 + 0.2", "0.30000000000000004"},
		{"  ( ( 42 ) )  ", "42"},
		{"-0", "0"},
		{"3 * (2 + (4 - 1) ^ 2) / 11", "3"},
		{"1e20 * 10", "1e+21"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			v, err := Eval(tt.expr)
			if err != nil {
				t.Fatalf("Eval(%q): %v", tt.expr, err)
			}
			if got := Format(v); got != tt.want {
				t.Errorf("Eval(%q) = %s, want %s", tt.expr, got, tt.want)
			}
		})
	}
}

func TestEvalErrors(t *testing.T) {
	tests := []struct {
		expr string
		want string // a fragment of the message
	}{
		{"", "empty expression"},
		{"   ", "empty expression"},
		{"1 +", "unexpected end"},
		{"1 / 0", "division by zero at position 3"},
		{"5 % (2 - 2)", "modulo by zero"},
		{"(1 + 2", "missing ')' for the '(' at position 1"},
		{"1 + 2)", "unexpected ')' at position 6"},
		{"2 * x", "unexpected 'x' at position 5"},
		{"1..2", "unexpected '.'"},
		{".", "malformed number at position 1"},
		{"2e", "unexpected 'e' at position 2"},
		{"1e400", "out of range"},
		{"10 ^ 400", "not a finite number"},
		{"(-8) ^ 0.5", "not a finite number"},
		{strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300), "nested deeper"},
		{strings.Repeat("-", 300) + "1", "nested deeper"},
		{strings.Repeat("1", maxExpressionLen+1), "the limit is"},
	}
	for _, tt := range tests {
		name := tt.expr
		if len(name) > 20 {
			name = name[:20]
		}
		t.Run(name, func(t *testing.T) {
			v, err := Eval(tt.expr)
			if err == nil {
				t.Fatalf("Eval(%q) = %v, want an error containing %q", tt.expr, v, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Eval(%q) error = %q, want it to contain %q", tt.expr, err, tt.want)
			}
		})
	}
}

func FuzzEval(f *testing.F) {
	for _, s := range []string{"2+2", "(1+2)*3^-1", "--.5e3%7", "((", "1/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		v, err := Eval(expr) // must neither panic nor hang
		if err == nil && Format(v) == "" {
			t.Errorf("Eval(%q) formatted to an empty string", expr)
		}
	})
}
