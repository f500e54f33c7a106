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

// BenchmarkCloseOnContextDone measures what wazero's close-on-context-done
// costs a Go guest: it checks for termination at every loop header, and a Go
// guest's functions are all loops. The host keeps it on regardless (without
// it a runaway guest cannot be stopped).
func BenchmarkCloseOnContextDone(b *testing.B) {
	ctx := context.Background()
	for _, v := range []string{"off", "on", "on+timeout"} {
		b.Run(v, func(b *testing.B) {
			bin, _ := os.ReadFile(guestWasm(b, "echo"))
			rc := wazero.NewRuntimeConfig().WithMemoryLimitPages(512).WithMemoryCapacityFromMax(true)
			if v != "off" {
				rc = rc.WithCloseOnContextDone(true)
			}
			rt := wazero.NewRuntimeWithConfig(ctx, rc)
			defer rt.Close(ctx)
			wasi_snapshot_preview1.MustInstantiate(ctx, rt)
			mod, err := rt.InstantiateWithConfig(ctx, bin, wazero.NewModuleConfig().WithStartFunctions("_initialize").WithName("").WithSysNanotime().WithSysWalltime())
			if err != nil {
				b.Fatal(err)
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
