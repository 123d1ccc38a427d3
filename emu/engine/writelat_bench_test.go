//go:build !race

package engine_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/softirdma/softirdma/emu/engine"
)

// BenchmarkWriteLat is ib_write_lat between two devices of one process on serve's switch: each
// side WRITEs into the other's buffer and busy-polls its own for the peer's answer, whose last
// word carries the iteration's number, as ib_write_lat polls the last byte. median-us and p99-us
// are one-way latency, half the round trip. (Not under the race detector: the poll reads memory
// the device writes, as a program's CPU reads what its NIC wrote.)
func BenchmarkWriteLat(b *testing.B) {
	for _, n := range []int{8, 4096} {
		b.Run(sizeName(n), func(b *testing.B) {
			// Each buffer's first half is what its side WRITEs, its second what the peer WRITEs.
			s := newSwitchedHosts(b, 2*n)
			word := func(buf []byte, half int) *uint32 { return (*uint32)(unsafe.Pointer(&buf[half*n+n-4])) }
			outA, inA, outB, inB := word(s.bufA, 0), word(s.bufA, 1), word(s.bufB, 0), word(s.bufB, 1)
			writeTo := func(from *engine.MR, to *engine.MR) engine.SendWR {
				return engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, SGL: sge(from, 0, uint32(n)), RemoteAddr: to.Addr() + uint64(n), RKey: to.RKey()}
			}
			wrA, wrB := writeTo(s.mrA, s.mrB), writeTo(s.mrB, s.mrA)
			wait := func(last *uint32, want uint32, stop <-chan struct{}) bool {
				for deadline := time.Now().Add(10 * time.Second); atomic.LoadUint32(last) != want; runtime.Gosched() {
					select {
					case <-stop:
						return false
					default:
					}
					if time.Now().After(deadline) {
						return false
					}
				}
				return true
			}
			stop, done := make(chan struct{}), make(chan error, 1)
			go func() {
				for i := uint32(1); ; i++ {
					if !wait(inB, i, stop) {
						done <- nil
						return
					}
					atomic.StoreUint32(outB, i) // the answer carries the same number
					if err := s.qb.PostSend(wrB); err != nil {
						done <- err
						return
					}
				}
			}()
			iter := uint32(0)
			pingPong := func() time.Duration {
				iter++
				atomic.StoreUint32(outA, iter)
				start := time.Now()
				must(b, s.qa.PostSend(wrA))
				if !wait(inA, iter, nil) {
					b.Fatalf("no answer to WRITE %d in 10 s", iter)
				}
				return time.Since(start)
			}
			measureLatency(b, pingPong, stop, done)
		})
	}
}
