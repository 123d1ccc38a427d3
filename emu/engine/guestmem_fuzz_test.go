package engine

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/keys"
)

// FuzzGuestPageList: a page list is outside input. Whatever it holds, checking it never panics
// and either fails with EINVAL or passes a list whose pages' pieces cover exactly Length bytes,
// in order, each inside its page, none empty or wrapping; and overlaps agrees with them.
func FuzzGuestPageList(f *testing.F) {
	f.Add(uint64(4096), uint64(100), uint64(8000), []byte{0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0})
	f.Add(uint64(1<<30), uint64(0), uint64(math.MaxUint64), []byte{})
	f.Add(uint64(4096), uint64(4095), uint64(math.MaxUint64-4095), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint64(8192), uint64(1), uint64(8191), []byte{0, 0x20, 0, 0, 0, 0, 0, 0})
	f.Add(uint64(4096), uint64(1), uint64(4096), []byte{0, 0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, ps, off, length uint64, raw []byte) {
		pl := PageList{PageSize: ps, Offset: off, Length: length}
		for len(raw) >= 8 {
			pl.Pages = append(pl.Pages, binary.LittleEndian.Uint64(raw))
			raw = raw[8:]
		}
		err := pl.checkSize()
		if err == nil {
			err = keys.CheckPages(pl.PageSize, pl.Offset, pl.Length, pl.Pages)
		}
		if err != nil {
			if !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("error %v is not EINVAL", err)
			}
			return
		}
		var ranges []guestRange
		pl.pieces(func(r guestRange) bool {
			ranges = append(ranges, r)
			return true
		})
		var total uint64
		for i, r := range ranges {
			if r.n == 0 || r.start+(r.n-1) < r.start {
				t.Fatalf("range %+v is empty or wraps", r)
			}
			if r.start&^(ps-1) != pl.Pages[i] || (r.start+r.n-1)&^(ps-1) != pl.Pages[i] {
				t.Fatalf("range %+v is not inside its page 0x%x", r, pl.Pages[i])
			}
			if i > 0 && r.start != pl.Pages[i] {
				t.Fatalf("range %+v of page %d does not start the page", r, i)
			}
			total += r.n
		}
		if len(ranges) != len(pl.Pages) || total != length || ranges[0].start != pl.Pages[0]+off {
			t.Fatalf("ranges %+v of %+v cover %d bytes", ranges, pl, total)
		}
		// overlaps sees each piece's first and last byte and nothing just outside all of them.
		for _, r := range ranges {
			for _, a := range []uint64{r.start, r.start + r.n - 1} {
				if !pl.overlaps(a, 1) {
					t.Fatalf("overlaps misses byte 0x%x of %+v", a, r)
				}
			}
			for _, a := range []uint64{r.start - 1, r.start + r.n} {
				in := slices.ContainsFunc(ranges, func(q guestRange) bool { return q.overlaps(a, 1) })
				if pl.overlaps(a, 1) != in {
					t.Fatalf("overlaps(0x%x) = %v, want %v", a, !in, in)
				}
			}
		}
	})
}

// FuzzGuestMemory runs random maps and unmaps over a small address space against a byte-by-byte
// model: Mapped, Segments and RegionAt agree with it, and Map refuses overlaps.
func FuzzGuestMemory(f *testing.F) {
	f.Add([]byte{0, 10, 20, 0, 30, 10, 2, 5, 50, 1, 10, 20})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const space = 256
		var gm GuestMemory
		var owner [space + 64]int // the region id mapping each address, 0 if none
		var regions [][3]int      // start, length, id
		id := 0
		for len(ops) >= 3 {
			op, a, n := ops[0]%3, int(ops[1]), int(ops[2])%64+1
			ops = ops[3:]
			switch op {
			case 0, 1: // map
				free := true
				for i := a; free && i < a+n; i++ {
					free = owner[i] == 0
				}
				id++
				mem := make([]byte, n)
				for i := range mem {
					mem[i] = byte(id)
				}
				err := gm.Map(uint64(a), mem)
				if (err == nil) != free {
					t.Fatalf("Map(%d, %d) = %v, model free %v", a, n, err, free)
				}
				if err == nil {
					for i := a; i < a+n; i++ {
						owner[i] = id
					}
					regions = append(regions, [3]int{a, n, id})
				}
			case 2: // unmap a region, or something that may not be one
				start, length := a, n
				if len(regions) > 0 && a%4 != 0 {
					r := regions[a%len(regions)]
					start, length = r[0], r[1]
				}
				err := gm.Unmap(uint64(start), uint64(length))
				k := slices.IndexFunc(regions, func(r [3]int) bool { return r[0] == start && r[1] == length })
				if (err == nil) != (k >= 0) {
					t.Fatalf("Unmap(%d, %d) = %v, model has the region: %v", start, length, err, k >= 0)
				}
				if k >= 0 {
					for i := start; i < start+length; i++ {
						owner[i] = 0
					}
					regions = slices.Delete(regions, k, k+1)
				}
			}
		}
		for a := range space {
			r, ok := gm.RegionAt(uint64(a))
			if ok != (owner[a] != 0) {
				t.Fatalf("RegionAt(%d) = %v, model mapped %v", a, ok, owner[a] != 0)
			}
			if k := slices.IndexFunc(regions, func(m [3]int) bool { return m[2] == owner[a] }); ok &&
				(k < 0 || r.Start != uint64(regions[k][0]) || len(r.Mem) != regions[k][1] || int(r.Mem[0]) != owner[a]%256) {
				t.Fatalf("RegionAt(%d) = [%d, +%d), model's region %d", a, r.Start, len(r.Mem), owner[a])
			}
		}
		for a := 0; a < space; a += 7 {
			for _, n := range []int{1, 5, 40} {
				if a+n > space {
					continue
				}
				want := true
				for i := a; i < a+n; i++ {
					want = want && owner[i] != 0
				}
				if got := gm.Mapped(uint64(a), uint64(n)); got != want {
					t.Fatalf("Mapped(%d, %d) = %v, want %v", a, n, got, want)
				}
				if !want {
					continue
				}
				var flat []byte
				for _, s := range gm.Segments(uint64(a), uint64(n), nil) {
					flat = append(flat, s...)
				}
				for i, b := range flat {
					if int(b) != owner[a+i]%256 {
						t.Fatalf("Segments(%d, %d) byte %d from region %d, want %d", a, n, i, b, owner[a+i])
					}
				}
				if len(flat) != n {
					t.Fatalf("Segments(%d, %d) gave %d bytes", a, n, len(flat))
				}
			}
		}
	})
}

func TestGuestMemoryEdges(t *testing.T) {
	var gm GuestMemory
	top := make([]byte, 4096)
	if err := gm.Map(math.MaxUint64-4095, top); err != nil { // ends exactly at the top
		t.Fatal(err)
	}
	for _, c := range []struct {
		start uint64
		n     int
		errno syscall.Errno
	}{{0, 0, syscall.EINVAL}, {math.MaxUint64 - 4094, 4096, syscall.EINVAL}, {math.MaxUint64 - 8191, 4097, syscall.EEXIST}} {
		if err := gm.Map(c.start, make([]byte, c.n)); !errors.Is(err, c.errno) {
			t.Fatalf("Map(0x%x, %d) = %v, want %v", c.start, c.n, err, c.errno)
		}
	}
	if !gm.Mapped(math.MaxUint64, 1) || gm.Mapped(math.MaxUint64, 2) || gm.Mapped(math.MaxUint64-4096, 2) {
		t.Fatal("Mapped at the top of the address space")
	}
	if segs := gm.Segments(math.MaxUint64-1, 2, nil); len(segs) != 1 || &segs[0][1] != &top[4095] || cap(segs[0]) != 2 {
		t.Fatal("Segments at the top of the address space")
	}
	if err := gm.Unmap(math.MaxUint64-4095, 4095); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("Unmap of part of a region: %v", err)
	}
	if err := gm.Unmap(math.MaxUint64-4095, 4096); err != nil {
		t.Fatal(err)
	}
	if gm.Mapped(math.MaxUint64, 1) {
		t.Fatal("still mapped after Unmap")
	}
}
