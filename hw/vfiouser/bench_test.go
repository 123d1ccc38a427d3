package vfiouser

import (
	"testing"

	"github.com/softirdma/softirdma/internal/sockguard"
)

// What one register access costs through the socket: a non-posted access waits for the
// server's reply, a posted write does not.
func BenchmarkRegionRead4(b *testing.B) {
	c, _ := serve(b, newServer(b, newFakeDev(b)))
	var v [4]byte
	for b.Loop() {
		if err := c.RegionRead(0, 0x10, v[:]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRegionWrite4(b *testing.B) {
	c, _ := serve(b, newServer(b, newFakeDev(b)))
	v := []byte{1, 2, 3, 4}
	for b.Loop() {
		if err := c.RegionWrite(0, 0x10, v, false); err != nil {
			b.Fatal(err)
		}
	}
}

// Posted writes followed by one read, so that the time includes the server handling them.
func BenchmarkRegionWrite4Posted(b *testing.B) {
	c, _ := serve(b, newServer(b, newFakeDev(b)))
	v := []byte{1, 2, 3, 4}
	for b.Loop() {
		if err := c.RegionWrite(0, 0x10, v, true); err != nil {
			b.Fatal(err)
		}
	}
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
