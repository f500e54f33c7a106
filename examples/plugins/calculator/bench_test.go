package main

import "testing"

func BenchmarkEval(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Eval("3 * (2 + (4 - 1) ^ 2) / 11 - -1.5e1 % 4"); err != nil {
			b.Fatal(err)
		}
	}
}
