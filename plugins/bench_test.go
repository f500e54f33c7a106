package plugins

import (
	"context"
	"testing"

	"github.com/looopy-go/looopy/loop"
)

func BenchmarkToolCall(b *testing.B) {
	dir := b.TempDir()
	r := newRegistry(b, Config{})
	if _, err := r.Load(context.Background(), install(b, dir, "echo", guestWasm(b, "echo"), nil)); err != nil {
		b.Fatal(err)
	}
	env := &loop.ToolEnv{ContextID: "ctx", TaskID: "task"}
	c := call("echo", `{"text":"hello, world"}`)
	b.Run("host", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			res, err := r.Call(context.Background(), c, env)
			if err != nil || res.Content != "hello, world" {
				b.Fatal(res, err)
			}
		}
	})
}

func BenchmarkBareWazero(b *testing.B) {
	dir := b.TempDir()
	r := newRegistry(b, Config{})
	if _, err := r.Load(context.Background(), install(b, dir, "echo", guestWasm(b, "echo"), nil)); err != nil {
		b.Fatal(err)
	}
	p, _ := r.Plugin("echo")
	inst, err := p.drv.newInstance(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	in := []byte(`{"call":{"id":"c","name":"echo","arguments":{"text":"hello, world"}}}`)
	li := inst.(*looopyInstance)
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		if _, err := li.call(ctx, 1, in); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("memory %d bytes", li.mem.Size())
}

func BenchmarkBareAlloc(b *testing.B) {
	dir := b.TempDir()
	r := newRegistry(b, Config{})
	if _, err := r.Load(context.Background(), install(b, dir, "echo", guestWasm(b, "echo"), nil)); err != nil {
		b.Fatal(err)
	}
	p, _ := r.Plugin("echo")
	inst, err := p.drv.newInstance(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	li := inst.(*looopyInstance)
	ctx := context.Background()
	b.Run("alloc", func(b *testing.B) {
		for b.Loop() {
			li.stack[0] = 10
			if err := li.alloc.CallWithStack(ctx, li.stack[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("describe", func(b *testing.B) {
		for b.Loop() {
			if _, err := li.call(ctx, 0, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
