package engine_test

import (
	"bytes"
	"math"
	"testing"
)

// Read and Write cross adjacent regions, refuse a range with a gap or one that wraps without
// touching a byte, and stop at Unmap.
func TestGuestMemoryReadWrite(t *testing.T) {
	gm, mems := guestRAM(t, [2]uint64{0x1000, 0x1000}, [2]uint64{0x2000, 0x1000}, [2]uint64{0x4000, 0x1000})
	src := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 64)
	if !gm.Write(0x2000-256, src) {
		t.Fatal("a write across two adjacent regions failed")
	}
	if !bytes.Equal(mems[0][0x1000-256:], src[:256]) || !bytes.Equal(mems[1][:256], src[256:]) {
		t.Fatal("the write did not land in both regions")
	}
	got := make([]byte, len(src))
	if !gm.Read(0x2000-256, got) || !bytes.Equal(got, src) {
		t.Fatal("the read did not give back what was written")
	}
	for _, c := range []struct {
		name string
		addr uint64
		n    int
	}{
		{"gap", 0x3000 - 8, 16},
		{"unmapped", 0x8000, 8},
		{"wraps", math.MaxUint64 - 3, 8},
	} {
		p := bytes.Repeat([]byte{0xee}, c.n)
		if gm.Read(c.addr, p) || !bytes.Equal(p, bytes.Repeat([]byte{0xee}, c.n)) {
			t.Errorf("%s: read succeeded or changed its buffer", c.name)
		}
		if gm.Write(c.addr, make([]byte, c.n)) {
			t.Errorf("%s: write succeeded", c.name)
		}
	}
	if !bytes.Equal(mems[1][0x1000-8:], make([]byte, 8)) {
		t.Fatal("a refused write touched the region before the gap")
	}
	must(t, gm.Unmap(0x4000, 0x1000))
	if gm.Read(0x4000, make([]byte, 1)) || gm.Write(0x4000, []byte{9}) || mems[2][0] != 0 {
		t.Fatal("an unmapped region was read or written")
	}
	if !gm.Read(0x1000, nil) || !gm.Write(0x1000, nil) {
		t.Fatal("an empty copy failed")
	}
}

// RegionAt names the region holding an address, whole, also at the top of the address space
// and across adjacent regions, and nothing for an unmapped address; it and Mapped allocate
// nothing, so a registration's lookups cost no garbage.
func TestGuestMemoryRegionAt(t *testing.T) {
	gm, mems := guestRAM(t, [2]uint64{0x1000, 0x1000}, [2]uint64{0x2000, 0x1000})
	top := make([]byte, 4096)
	must(t, gm.Map(math.MaxUint64-4095, top))
	for _, c := range []struct {
		addr  uint64
		start uint64
		mem   []byte
	}{
		{0x1000, 0x1000, mems[0]}, {0x1fff, 0x1000, mems[0]}, {0x2000, 0x2000, mems[1]}, {0x2abc, 0x2000, mems[1]},
		{math.MaxUint64, math.MaxUint64 - 4095, top}, {0xfff, 0, nil}, {0x3000, 0, nil}, {0, 0, nil},
	} {
		r, ok := gm.RegionAt(c.addr)
		if ok != (c.mem != nil) || ok && (r.Start != c.start || len(r.Mem) != len(c.mem) || &r.Mem[0] != &c.mem[0]) {
			t.Errorf("RegionAt(0x%x) = [0x%x, +%d) %v", c.addr, r.Start, len(r.Mem), ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := gm.RegionAt(0x2abc); !ok || !gm.Mapped(0x1800, 0x1000) {
			t.Fatal("lookup failed")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per lookup", n)
	}
}
