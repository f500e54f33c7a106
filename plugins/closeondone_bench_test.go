package plugins

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/looopy-go/looopy/pdk"
)

// BenchmarkCloseOnContextDone measures what stopping a Go guest costs: with
// wazero's close-on-context-done, an exit to Go at every loop header (a Go
// guest's functions are all loops); with the host's rewrite (interrupt.go),
// a countdown at every loop header and function entry and an exit every
// fuelPerExit of them; "off" cannot stop a runaway guest at all.
func BenchmarkCloseOnContextDone(b *testing.B) {
	ctx := context.Background()
	for _, v := range []string{"off", "on", "on+timeout", "fuel", "fuel+timeout"} {
		b.Run(v, func(b *testing.B) {
			bin, _ := os.ReadFile(guestWasm(b, "echo"))
			rc := wazero.NewRuntimeConfig().WithMemoryLimitPages(512).WithMemoryCapacityFromMax(true)
			switch {
			case strings.HasPrefix(v, "on"):
				rc = rc.WithCloseOnContextDone(true)
			case strings.HasPrefix(v, "fuel"):
				in, err := addInterrupt(bin)
				if err != nil {
					b.Fatal(err)
				}
				bin = in.bin
			}
			rt := wazero.NewRuntimeWithConfig(ctx, rc)
			defer rt.Close(ctx)
			wasi_snapshot_preview1.MustInstantiate(ctx, rt)
			mod, err := rt.InstantiateWithConfig(ctx, bin, wazero.NewModuleConfig().WithStartFunctions("_initialize").WithName("").WithSysNanotime().WithSysWalltime())
			if err != nil {
				b.Fatal(err)
			}
			var stop *guestStop
			if strings.HasPrefix(v, "fuel") {
				stop, _ = guestStopOf(mod)
			}
			alloc, fn, mem := mod.ExportedFunction(pdk.ExportAlloc), mod.ExportedFunction(pdk.ExportCall), mod.Memory()
			in := []byte(echoRequest)
			var stack [3]uint64
			loopCPU(b, func() {
				cctx := ctx
				if strings.HasSuffix(v, "timeout") {
					var cancel func()
					cctx, cancel = context.WithTimeout(ctx, time.Minute)
					defer cancel()
				}
				if stop != nil {
					defer stop.arm(cctx)()
				}
				stack[0] = uint64(len(in))
				alloc.CallWithStack(cctx, stack[:])
				ptr := uint32(stack[0])
				mem.Write(ptr, in)
				stack[0], stack[1], stack[2] = uint64(pdk.OpToolCall), uint64(ptr), uint64(len(in))
				if err := fn.CallWithStack(cctx, stack[:]); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
