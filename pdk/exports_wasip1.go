//go:build wasip1

package pdk

import (
	"errors"
	"unsafe"
)

// The ABI's memory: the input buffer looopy_alloc hands out and the output of
// the last call. Both stay reachable from these globals, so the collector
// keeps them until they are replaced.
var (
	inBuf  []byte
	outBuf []byte
)

//go:wasmexport looopy_abi_v1
func abiV1() {}

//go:wasmexport looopy_alloc
func abiAlloc(size int32) int32 {
	if size < 1 {
		size = 1
	}
	if cap(inBuf) < int(size) {
		inBuf = make([]byte, size)
	}
	inBuf = inBuf[:size]
	return int32(uintptr(unsafe.Pointer(&inBuf[0])))
}

//go:wasmexport looopy_call
func abiCall(op, ptr, n int32) int64 {
	var in []byte
	if n > 0 {
		if len(inBuf) == 0 || ptr != int32(uintptr(unsafe.Pointer(&inBuf[0]))) || int(n) > len(inBuf) {
			return output(nil, &Error{Code: CodeBadInput, Message: "input not in the buffer looopy_alloc returned"})
		}
		in = inBuf[:n]
	}
	out, err := safeDispatch(Op(op), in)
	return output(out, err)
}

func output(out []byte, err error) int64 {
	status := StatusOK
	if err != nil {
		status = StatusError
		var pe *Error
		if !errors.As(err, &pe) {
			pe = &Error{Code: CodeInternal, Message: err.Error()}
		}
		out = appendError(nil, pe)
	}
	if cap(outBuf) < len(out)+1 || cap(outBuf) > 1<<20 && len(out)+1 < cap(outBuf)/4 {
		outBuf = make([]byte, 0, len(out)+1)
	}
	outBuf = append(append(outBuf[:0], status), out...)
	return int64(uintptr(unsafe.Pointer(&outBuf[0])))<<32 | int64(len(outBuf))
}
