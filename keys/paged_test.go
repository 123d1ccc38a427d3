package keys

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// regionMap is an address space of disjoint regions, sorted by start: a RegionSpace.
type regionMap struct{ rs []Region }

func (m *regionMap) RegionAt(addr uint64) (Region, bool) {
	for _, r := range m.rs {
		if r.holds(addr) {
			return r, true
		}
	}
	return Region{}, false
}

func (m *regionMap) Mapped(addr, n uint64) bool {
	for n > 0 {
		r, ok := m.RegionAt(addr)
		if !ok {
			return false
		}
		k := min(n, uint64(len(r.Mem))-(addr-r.Start))
		addr, n = addr+k, n-k
	}
	return true
}

func (m *regionMap) Segments(addr, n uint64, dst [][]byte) [][]byte {
	for n > 0 {
		r, ok := m.RegionAt(addr)
		if !ok {
			return dst
		}
		at := addr - r.Start
		k := min(n, uint64(len(r.Mem))-at)
		dst = append(dst, r.Mem[at:at+k:at+k])
		addr, n = addr+k, n-k
	}
	return dst
}

// plainMap is the same address space without RegionAt: Paged's other way.
type plainMap struct{ m *regionMap }

func (p *plainMap) Mapped(addr, n uint64) bool { return p.m.Mapped(addr, n) }
func (p *plainMap) Segments(addr, n uint64, dst [][]byte) [][]byte {
	return p.m.Segments(addr, n, dst)
}

// lyingMap answers RegionAt with whatever it is told to.
type lyingMap struct {
	regionMap
	answer func(addr uint64) (Region, bool)
}

func (l *lyingMap) RegionAt(addr uint64) (Region, bool) { return l.answer(addr) }

func TestPagedChecks(t *testing.T) {
	m := &regionMap{rs: []Region{{0x1000, make([]byte, 0x3000)}, {0x8000, make([]byte, 100)}}}
	for _, c := range []struct {
		name       string
		ps, off, n uint64
		pages      []uint64
		errno      syscall.Errno
		why        string
		as         AddressSpace
	}{
		{"page size 0", 0, 0, 1, []uint64{0x1000}, syscall.EINVAL, "page size 0", m},
		{"page size not a power of two", 3 << 10, 0, 1, []uint64{0x1000}, syscall.EINVAL, "not a power of two", m},
		{"offset outside the first page", 4096, 4096, 1, []uint64{0x1000, 0x2000}, syscall.EINVAL, "offset 4096", m},
		{"length 0", 4096, 0, 0, []uint64{0x1000}, syscall.EINVAL, "length 0", m},
		{"overflow", 4096, 2, math.MaxUint64 - 1, nil, syscall.EINVAL, "overflows", m},
		{"too few pages", 4096, 1, 4096, []uint64{0x1000}, syscall.EINVAL, "want 2", m},
		{"pages of 2^63 bytes", 1 << 63, 1, math.MaxUint64 - 1, []uint64{0}, syscall.EINVAL, "want 2", m},
		{"misaligned after an unmapped page", 4096, 0, 8192, []uint64{0x5000, 0x1001}, syscall.EINVAL, "page 1 at 0x1001 is not aligned", m},
		{"unmapped page", 4096, 0, 3 * 4096, []uint64{0x1000, 0x3000, 0x4000}, syscall.EFAULT, "page 2 at 0x4000 is not mapped", m},
		{"page partly mapped", 4096, 0, 200, []uint64{0x8000}, syscall.EFAULT, "page 0 at 0x8000 is not mapped", m},
		{"no address space", 4096, 0, 1, []uint64{0x1000}, syscall.EINVAL, "no address space", nil},
		{"unmapped page, no regions", 4096, 0, 3 * 4096, []uint64{0x1000, 0x3000, 0x4000}, syscall.EFAULT, "page 2 at 0x4000 is not mapped", &plainMap{m}},
		{"a region not holding the address", 4096, 0, 4096, []uint64{0x1000}, syscall.EFAULT, "page 0 at 0x1000 is not mapped",
			&lyingMap{*m, func(uint64) (Region, bool) { return Region{0x9000, make([]byte, 10)}, true }}},
		{"a region wrapping the space", 4096, 0, 4096, []uint64{0x1000}, syscall.EFAULT, "page 0 at 0x1000 is not mapped",
			&lyingMap{*m, func(uint64) (Region, bool) { return Region{math.MaxUint64 - 5, make([]byte, 10)}, true }}},
		{"regions that overlap", 4096, 0, 8192, []uint64{0x1000, 0x2000}, syscall.EFAULT, "changed while page 0",
			&lyingMap{*m, func(a uint64) (Region, bool) { return Region{a - 0x800, make([]byte, 0x1000)}, true }}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Paged(c.as, c.ps, c.off, c.n, c.pages)
			if !errors.Is(err, c.errno) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("got %v, want %v saying %q", err, c.errno, c.why)
			}
		})
	}
	// The first and the last page need only their registered bytes mapped.
	for _, as := range []AddressSpace{m, &plainMap{m}} {
		if _, err := Paged(as, 4096, 4000, 196, []uint64{0x7000, 0x8000}); !errors.Is(err, syscall.EFAULT) {
			t.Fatalf("%T: page 0x7000 is not mapped, yet: %v", as, err)
		}
		mem, err := Paged(as, 4096, 4000, 196, []uint64{0x3000, 0x8000})
		if err != nil || mem.Len() != 196 {
			t.Fatalf("%T: %v, len %d", as, err, mem.Len())
		}
	}
}

// TestPagedTopOfSpace: pages that end at 2^64, and a page size of 2^63, neither wrap.
func TestPagedTopOfSpace(t *testing.T) {
	top := make([]byte, 8192)
	m := &regionMap{rs: []Region{{math.MaxUint64 - 8191, top}}}
	for _, as := range []AddressSpace{m, &plainMap{m}} {
		mem, err := Paged(as, 4096, 10, 8182, []uint64{math.MaxUint64 - 8191, math.MaxUint64 - 4095})
		if err != nil {
			t.Fatalf("%T: %v", as, err)
		}
		var got [][]byte
		mem.walk(0, mem.Len(), func(b []byte) bool { got = append(got, b); return true })
		if len(got) != 1 || &got[0][0] != &top[10] || len(got[0]) != 8182 {
			t.Fatalf("%T: walk gave %d pieces", as, len(got))
		}
	}
	// Pages of 2^63 bytes: the first ends, the second starts, where two adjacent regions meet.
	lo, hi := make([]byte, 64), make([]byte, 64)
	big := &regionMap{rs: []Region{{1<<63 - 64, lo}, {1 << 63, hi}}}
	mem, err := Paged(big, 1<<63, 1<<63-8, 16, []uint64{0, 1 << 63})
	if err != nil {
		t.Fatal(err)
	}
	if segs := (Span{mem: &mem, n: 16}).Segments(nil); len(segs) != 2 || &segs[0][0] != &lo[56] || len(segs[0]) != 8 || &segs[1][0] != &hi[0] || len(segs[1]) != 8 {
		t.Fatalf("pages of 2^63 bytes: %d segments", len(segs))
	}
}

// TestPagedWalkAllocates: a lookup and a copy through paged memory allocate nothing, like
// through any registered memory, so the data path stays allocation-free.
func TestPagedWalkAllocates(t *testing.T) {
	var rs []Region
	var pages []uint64
	for r := range 8 {
		rs = append(rs, Region{uint64(r) << 24, make([]byte, 1<<20)})
	}
	for i := range 512 {
		pages = append(pages, uint64(i%8)<<24+uint64(i/8)*8192)
	}
	mem, err := Paged(&regionMap{rs: rs}, 4096, 0, 512*4096, pages)
	if err != nil {
		t.Fatal(err)
	}
	s := newSpace(t)
	k, err := s.RegMR(MRSpec{PD: pdA, Mem: mem, IOVA: 0x10000, Access: LocalWrite | RemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	if n := testing.AllocsPerRun(100, func() {
		sp, err := s.Remote(RemoteAccess{Key: k, PD: pdA, VA: 0x10000 + 1000, Len: uint64(len(buf)), Rights: RemoteWrite})
		if err != nil || sp.CopyFrom(buf) != len(buf) || sp.CopyTo(buf) != len(buf) {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per access", n)
	}
}

// TestPagedProperty runs pagedProperty on random page lists.
func TestPagedProperty(t *testing.T) { rapid.Check(t, pagedProperty) }

// FuzzPaged is pagedProperty under the fuzzer.
func FuzzPaged(f *testing.F) { f.Fuzz(rapid.MakeFuzz(pagedProperty)) }

// pagedProperty: paged memory over random regions and a random page list (pages of 1 to 64
// bytes that run on, jump, repeat, straddle two adjacent regions or miss every region, near
// the bottom or the top of the address space) holds exactly the bytes a straightforward
// reading of the list names. Paged refuses the list exactly when a registered byte is not
// mapped, naming the first page that has one; otherwise every walk of every window yields,
// byte by byte, the very bytes of the regions the list names, in pieces whose capacity ends
// with them, and, over a RegionSpace, in as few pieces as the regions allow.
func pagedProperty(t *rapid.T) {
	const space = 2048
	base := rapid.SampledFrom([]uint64{0, 1 << 40, math.MaxUint64 - space + 1}).Draw(t, "base")
	shift := rapid.IntRange(0, 6).Draw(t, "shift")
	ps := uint64(1) << shift
	var regions []Region
	for at := uint64(0); ; {
		at += uint64(rapid.IntRange(0, 200).Draw(t, "gap")) // 0: adjacent to the one before
		if at >= space {
			break
		}
		n := min(uint64(rapid.IntRange(1, 400).Draw(t, "len")), space-at)
		regions = append(regions, Region{base + at, make([]byte, n)})
		at += n
	}
	npages := rapid.IntRange(1, 40).Draw(t, "pages")
	pages := make([]uint64, npages)
	for i := range pages {
		switch how := rapid.IntRange(0, 3).Draw(t, "how"); {
		case i > 0 && how == 0 && pages[i-1]+ps-base < space:
			pages[i] = pages[i-1] + ps
		case i > 0 && how == 1:
			pages[i] = pages[rapid.IntRange(0, i-1).Draw(t, "repeat")]
		default:
			pages[i] = base + uint64(rapid.IntRange(0, space/int(ps)-1).Draw(t, "page"))*ps
		}
	}
	off := uint64(rapid.IntRange(0, int(ps)-1).Draw(t, "offset"))
	// Length needs exactly npages pages: its last byte lies in the last one.
	lo, hi := uint64(npages-1)*ps-off+1, uint64(npages)*ps-off
	if npages == 1 {
		lo = 1
	}
	length := lo + uint64(rapid.IntRange(0, int(hi-lo)).Draw(t, "length"))

	// The reference: each registered byte's address, region and place in it.
	type place struct {
		region int // -1 if unmapped
		at     int
	}
	want := make([]place, length)
	badPage := -1
	for i := range want {
		pos := off + uint64(i)
		page := int(pos >> shift)
		addr := pages[page] + pos&(ps-1)
		want[i] = place{-1, 0}
		for j, r := range regions {
			if r.holds(addr) {
				want[i] = place{j, int(addr - r.Start)}
			}
		}
		if want[i].region < 0 && badPage < 0 {
			badPage = page
		}
	}

	m := &regionMap{rs: regions}
	var as AddressSpace = m
	withRegions := rapid.Bool().Draw(t, "withRegions")
	if !withRegions {
		as = &plainMap{m}
	}
	mem, err := Paged(as, ps, off, length, pages)
	if badPage >= 0 {
		why := fmt.Sprintf("page %d at 0x%x is not mapped", badPage, pages[badPage])
		if !errors.Is(err, syscall.EFAULT) || !strings.Contains(err.Error(), why) {
			t.Fatalf("got %v, want EFAULT saying %q", err, why)
		}
		return
	}
	if err != nil {
		t.Fatalf("every byte is mapped, yet: %v", err)
	}
	if mem.Len() != length {
		t.Fatalf("Len %d, want %d", mem.Len(), length)
	}
	ptr := func(p place) *byte { return &regions[p.region].Mem[p.at] }
	for range 8 {
		wo := uint64(rapid.IntRange(0, int(length)-1).Draw(t, "windowOffset"))
		wn := uint64(rapid.IntRange(1, int(length-wo)).Draw(t, "windowLength"))
		var pieces [][]byte
		mem.walk(wo, wn, func(b []byte) bool { pieces = append(pieces, b); return true })
		i := wo
		for k, b := range pieces {
			if len(b) == 0 || cap(b) != len(b) {
				t.Fatalf("piece %d of window [%d, +%d): len %d cap %d", k, wo, wn, len(b), cap(b))
			}
			for j := range b {
				if i >= wo+wn {
					t.Fatalf("window [%d, +%d) walked past its end", wo, wn)
				}
				if &b[j] != ptr(want[i]) {
					t.Fatalf("byte %d of window [%d, +%d) is not the byte the page list names", i, wo, wn)
				}
				i++
			}
			if k > 0 && withRegions {
				prev := pieces[k-1]
				end := want[i-uint64(len(b))-1]
				if start := want[i-uint64(len(b))]; start.region == end.region && start.at == end.at+1 {
					t.Fatalf("pieces %d and %d of window [%d, +%d) continue each other (%d bytes)", k-1, k, wo, wn, len(prev))
				}
			}
		}
		if i != wo+wn {
			t.Fatalf("window [%d, +%d) walked %d bytes", wo, wn, i-wo)
		}
		// A walk stops when told to.
		calls := 0
		mem.walk(wo, wn, func([]byte) bool { calls++; return false })
		if calls != 1 {
			t.Fatalf("walk went on after false: %d calls", calls)
		}
		// Segments is the walk collected.
		segs := (Span{mem: &mem, off: wo, n: wn}).Segments(nil)
		if len(segs) != len(pieces) || len(segs) > 0 && unsafe.SliceData(segs[0]) != unsafe.SliceData(pieces[0]) {
			t.Fatalf("Segments gave %d slices, walk %d", len(segs), len(pieces))
		}
	}
}
