package vfiouser

import (
	"testing"

	"github.com/softirdma/softirdma/internal/sockguard"
)

// loop times op; an error from it fails the benchmark.
func loop(b *testing.B, op func() error) {
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}

// What one register access costs through the socket: a non-posted access waits for the
// server's reply, a posted write does not.
func BenchmarkRegionRead4(b *testing.B) {
	c, _ := serve(b, newServer(b, newFakeDev(b)))
	var v [4]byte
	loop(b, func() error { return c.RegionRead(0, 0x10, v[:]) })
}

func BenchmarkRegionWrite4(b *testing.B) {
	c, _ := serve(b, newServer(b, newFakeDev(b)))
	v := []byte{1, 2, 3, 4}
	loop(b, func() error { return c.RegionWrite(0, 0x10, v, false) })
}

// Posted writes followed by one read, so that the time includes the server handling them.
func BenchmarkRegionWrite4Posted(b *testing.B) {
	c, _ := serve(b, newServer(b, newFakeDev(b)))
	v := []byte{1, 2, 3, 4}
	loop(b, func() error { return c.RegionWrite(0, 0x10, v, true) })
	var r [4]byte
	if err := c.RegionRead(0, 0x10, r[:]); err != nil {
		b.Fatal(err)
	}
}

// An interrupt: Trigger's eventfd write.
func BenchmarkTrigger(b *testing.B) {
	srv := newServer(b, newFakeDev(b))
	c, _ := serve(b, srv)
	fd := eventfd(b)
	defer sockguard.CloseFDs([]int{fd})
	if err := c.SetIRQEventfds(PCIMSIXIRQ, 0, []int{fd}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		srv.Trigger(PCIMSIXIRQ, 0)
	}
}
