//go:build lockcheck && !amd64 && !arm64

package engine

import (
	"fmt"
	"runtime"
)

// goroutineID is the number runtime.Stack gives the calling goroutine ("goroutine 18 [running]:").
// Slow (a traceback each time), it serves where goroutine_asm.go does not.
func goroutineID() uint64 {
	const prefix = "goroutine "
	var buf [32]byte
	b := buf[:runtime.Stack(buf[:], false)]
	var id uint64
	for i := len(prefix); i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		id = id*10 + uint64(b[i]-'0')
	}
	if id == 0 || string(b[:len(prefix)]) != prefix {
		panic(fmt.Sprintf("engine lock order: no goroutine number in %q", b))
	}
	return id
}
