package hw

import (
	"bytes"
	"testing"
)

// A ring element may straddle pages (256-byte elements after the 384-byte header: element 14
// spans bytes 3968-4223); access splits it where the page ends, and the pages need not be
// adjacent in guest memory.
func TestRingAccessAcrossPages(t *testing.T) {
	g, ram := guestWith(t)
	r := &ring{mem: g, pages: []uint64{0x150000, 0x130000}, pageSize: 4096, logCount: 4, logElem: 8}
	elem := bytes.Repeat([]byte{0x5a}, 256)
	if err := r.access(r.elemOff(14), elem, true); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ram[0x50000+3968:0x51000], elem[:128]) || !bytes.Equal(ram[0x30000:0x30000+128], elem[128:]) {
		t.Fatal("the element was not split across the two pages")
	}
	back := make([]byte, 256)
	if err := r.access(r.elemOff(14), back, false); err != nil || !bytes.Equal(back, elem) {
		t.Fatalf("read back %v", err)
	}
	if err := r.access(2*4096-4, make([]byte, 8), true); err == nil {
		t.Fatal("an access past the ring's pages succeeded")
	}
	if !r.overlaps(0x130000, 1) || r.overlaps(0x140000, 0x10000) {
		t.Fatal("overlaps")
	}
}
