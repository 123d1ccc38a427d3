package engine

import (
	"fmt"
	"math"
	"sort"
	"syscall"

	"github.com/softirdma/softirdma/keys"
)

// GuestMemory is an address space of regions of Go memory mapped at guest-physical addresses:
// a guest's RAM as a device model sees it, where regions come and go while the guest runs
// (vfio-user's DMA map and unmap). It implements keys.AddressSpace (and keys.RegionSpace) for
// RegGuestMR, RegImplicitMR and RevokeRange, and is safe for concurrent use. Its zero value is
// an empty space, ready to map; a nil *GuestMemory maps nothing and refuses Map and Unmap.
type GuestMemory struct {
	mu      rwMutex[guestMemoryLock]
	regions []guestRegion // sorted by start, disjoint
}

type guestRegion struct {
	start uint64
	mem   []byte // never empty; start+len(mem)-1 does not wrap
}

func (r *guestRegion) last() uint64 { return r.start + uint64(len(r.mem)-1) }

// Map maps mem at start. It fails with EINVAL for empty memory or a region past the top of the
// address space and EEXIST for one overlapping a mapped region.
func (g *GuestMemory) Map(start uint64, mem []byte) error {
	if g == nil {
		return nilObject("map", "guest memory")
	}
	n := uint64(len(mem))
	if n == 0 || n-1 > math.MaxUint64-start {
		return fmt.Errorf("map [0x%x, +%d): %w", start, n, syscall.EINVAL)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := sort.Search(len(g.regions), func(i int) bool { return g.regions[i].start > start })
	if i > 0 && g.regions[i-1].last() >= start || i < len(g.regions) && g.regions[i].start <= start+(n-1) {
		return fmt.Errorf("map [0x%x, +%d): overlaps a mapped region: %w", start, n, syscall.EEXIST)
	}
	g.regions = append(g.regions, guestRegion{})
	copy(g.regions[i+1:], g.regions[i:])
	g.regions[i] = guestRegion{start: start, mem: mem}
	return nil
}

// Unmap removes the region mapped at exactly [start, start+length), as vfio-user unmaps what it
// mapped; ENOENT if there is none. It only stops new lookups: see Device.RevokeRange for what
// must happen before the memory is freed.
func (g *GuestMemory) Unmap(start, length uint64) error {
	if g == nil {
		return nilObject("unmap", "guest memory")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := sort.Search(len(g.regions), func(i int) bool { return g.regions[i].start >= start })
	if i == len(g.regions) || g.regions[i].start != start || uint64(len(g.regions[i].mem)) != length {
		return fmt.Errorf("unmap [0x%x, +%d): no such region: %w", start, length, syscall.ENOENT)
	}
	g.regions = append(g.regions[:i], g.regions[i+1:]...)
	return nil
}

// Mapped says whether every byte of [addr, addr+n) is mapped, by one region or adjacent ones.
func (g *GuestMemory) Mapped(addr, n uint64) bool { return g.whileMapped(addr, n, nil) }

// whileMapped says whether [addr, addr+n) is all mapped and, if it is and then is not nil,
// runs then before the mapping can change.
func (g *GuestMemory) whileMapped(addr, n uint64, then func()) bool {
	if n == 0 {
		return true
	}
	if n-1 > math.MaxUint64-addr || g == nil {
		return false
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !g.walk(addr, n, nil) {
		return false
	}
	if then != nil {
		then()
	}
	return true
}

// Segments appends the slices holding [addr, addr+n) to dst. Each slice's capacity ends where
// the range does. If the range is not all mapped (unmapped since Mapped said it was), it stops
// at the first gap.
func (g *GuestMemory) Segments(addr, n uint64, dst [][]byte) [][]byte {
	if n == 0 || n-1 > math.MaxUint64-addr || g == nil {
		return dst
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	g.walk(addr, n, func(seg []byte) { dst = append(dst, seg) })
	return dst
}

// RegionAt returns the region mapped at addr (keys.RegionSpace): a registration over the
// address space keeps the few regions its pages lie in rather than a slice for each page.
func (g *GuestMemory) RegionAt(addr uint64) (keys.Region, bool) {
	if g == nil {
		return keys.Region{}, false
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	i := g.find(addr)
	if i < 0 || addr > g.regions[i].last() {
		return keys.Region{}, false
	}
	return keys.Region{Start: g.regions[i].start, Mem: g.regions[i].mem}, true
}

// find is the index of the last region starting at or before addr, or -1.
func (g *GuestMemory) find(addr uint64) int {
	lo, hi := 0, len(g.regions)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if g.regions[m].start <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// Read copies [addr, addr+len(p)) into p and says whether it was all mapped (p is then
// untouched). The copy runs under the lock Unmap takes, so once Unmap returns no Read is still
// reading the region.
func (g *GuestMemory) Read(addr uint64, p []byte) bool {
	return g.copyAt(addr, p, func(seg, q []byte) int { return copy(q, seg) })
}

// Write copies p into [addr, addr+len(p)) and says whether it was all mapped (nothing is
// written then), on the terms of Read.
func (g *GuestMemory) Write(addr uint64, p []byte) bool {
	return g.copyAt(addr, p, func(seg, q []byte) int { return copy(seg, q) })
}

func (g *GuestMemory) copyAt(addr uint64, p []byte, move func(seg, q []byte) int) bool {
	return g.whileMapped(addr, uint64(len(p)), func() {
		done := 0
		g.walk(addr, uint64(len(p)), func(seg []byte) { done += move(seg, p[done:]) })
	})
}

// walk hands f (if not nil) the pieces of regions covering [addr, addr+n), in order, and says
// whether they cover all of it. n > 0 and the range does not wrap.
func (g *GuestMemory) walk(addr, n uint64, f func([]byte)) bool {
	i := g.find(addr)
	for ; i >= 0 && i < len(g.regions); i++ {
		r := &g.regions[i]
		if addr < r.start || addr > r.last() {
			return false
		}
		off := addr - r.start
		k := min(uint64(len(r.mem))-off, n)
		if f != nil {
			f(r.mem[off : off+k : off+k])
		}
		n -= k
		if n == 0 {
			return true
		}
		addr += k // cannot wrap: bytes remain past it
	}
	return false
}
