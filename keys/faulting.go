package keys

import (
	"fmt"
	"math"
	"syscall"
)

// FaultPageShift sizes the pages of on-demand paged memory: 4 KiB, the page a guest kernel's
// MMU notifiers and hmm_range_fault work in.
const (
	FaultPageShift = 12
	FaultPageSize  = 1 << FaultPageShift
)

// MaxFaultPages bounds the pages one on-demand paged MR may have mapped at once. An MR over a
// range holds at most its own pages; an implicit one could otherwise be given a page for every
// address of 2^64 by a driver that never unmaps, and the table is the device's memory, not the
// driver's.
const MaxFaultPages = 1 << 21

// faulting is the memory of an on-demand MR whose pages a driver supplies when the device asks
// (a NIC's ODP): a table from wire pages (address >> FaultPageShift) to page addresses in as,
// empty at registration. An access that reaches a page the table lacks fails with a *PageFault,
// which its caller turns into a request for the pages; MapPages fills the table and UnmapPages
// empties part of it before the driver lets the pages go. The table is read and written only
// under the key space's serialization: a Span over it holds the slices it resolved to, not the
// table.
type faulting struct {
	as    AddressSpace
	n     uint64
	pages map[uint64]uint64
}

// OnDemandPaged is the memory of an on-demand MR of n bytes whose pages lie in as and are
// mapped one by one (MapPages) as accesses fault. n is math.MaxUint64 for an implicit MR over
// a whole address space (registered with IOVA 0).
func OnDemandPaged(as AddressSpace, n uint64) Memory {
	return Memory{scatter: &scatter{od: &faulting{as: as, n: n, pages: map[uint64]uint64{}}}}
}

func (m Memory) onDemand() *faulting {
	if m.scatter == nil {
		return nil
	}
	return m.od
}

// PageFault is an access to on-demand paged memory that reached pages not mapped: [VA, VA+Len)
// runs, page-aligned, from the first missing page of the access to its last. Every other check
// of the access passed. Write says the access stores into the pages.
type PageFault struct {
	Op      Op
	Key     Key
	VA, Len uint64
	Write   bool
}

func (e *PageFault) Error() string {
	return fmt.Sprintf("%s with key %s: page fault over [0x%x, 0x%x)", e.Op, e.Key, e.VA, e.VA+e.Len)
}

// faultingSpan resolves [va, va+n) of an on-demand MR's wire addresses through its page table:
// the slices of its pages, or a *PageFault naming the pages missing. n is not 0.
func (s *Space) faultingSpan(op Op, od *faulting, k Key, va, n uint64, write bool) (Span, error) {
	first, last := va>>FaultPageShift, (va+n-1)>>FaultPageShift
	var missFirst, missLast uint64
	missing := false
	for p := first; ; p++ {
		if _, ok := od.pages[p]; !ok {
			if !missing {
				missFirst = p
			}
			missing, missLast = true, p
		}
		if p == last {
			break
		}
	}
	if missing {
		return Span{}, &PageFault{Op: op, Key: k, VA: missFirst << FaultPageShift,
			Len: (missLast - missFirst + 1) << FaultPageShift, Write: write}
	}
	var segs [][]byte
	// Runs of pages that are adjacent in as are asked for at once: as gives them as few slices.
	runAddr, runLen := uint64(0), uint64(0)
	for p, at := first, va; ; p++ {
		inPage := at & (FaultPageSize - 1)
		take := min(FaultPageSize-inPage, va+n-at)
		addr := od.pages[p] + inPage
		if runLen > 0 && runAddr+runLen == addr {
			runLen += take
		} else {
			if runLen > 0 {
				segs = od.as.Segments(runAddr, runLen, segs)
			}
			runAddr, runLen = addr, take
		}
		at += take
		if p == last {
			break
		}
	}
	segs = od.as.Segments(runAddr, runLen, segs)
	mem := scatterOf(segs)
	return Span{mem: &mem, n: n}, nil
}

// odpMR is the live on-demand paged MR k names, or the error a page-table change gets.
func (s *Space) odpMR(verb string, k Key) (*mrEntry, *faulting, error) {
	sl := s.liveMR(k)
	if sl == nil || sl.key != k {
		return nil, nil, verbErr(verb, syscall.EINVAL, "key %s names no live MR", k)
	}
	od := sl.e.mem.onDemand()
	if od == nil || sl.e.state != stateValid {
		return nil, nil, verbErr(verb, syscall.EINVAL, "MR %s is not an on-demand paged MR", k)
	}
	return &sl.e, od, nil
}

// MapPages gives the on-demand MR k the pages at addrs of its address space for the wire pages
// from va on (page-aligned): page i covers wire addresses [va+i*FaultPageSize, ...). Every
// page must overlap the MR's range, be page-aligned and be mapped in the address space; either
// all are taken or, with an error, none (EINVAL, or EFAULT for a page the address space lacks;
// ENOSPC past MaxFaultPages). A page mapped already is replaced. It returns how many pages the
// MR has mapped more than before.
func (s *Space) MapPages(k Key, va uint64, addrs []uint64) (int, error) {
	const verb = "map_pages"
	mr, od, err := s.odpMR(verb, k)
	if err != nil {
		return 0, err
	}
	if len(addrs) == 0 {
		return 0, nil
	}
	n := uint64(len(addrs))
	if va&(FaultPageSize-1) != 0 || n > math.MaxUint64>>FaultPageShift || va>>FaultPageShift > math.MaxUint64>>FaultPageShift-(n-1) {
		return 0, verbErr(verb, syscall.EINVAL, "%d pages at 0x%x: not page-aligned or past the top of the address space", n, va)
	}
	first, last := va>>FaultPageShift, va>>FaultPageShift+n-1
	if first < mr.iova>>FaultPageShift || last > (mr.iova+(mr.length-1))>>FaultPageShift {
		return 0, verbErr(verb, syscall.EINVAL, "pages 0x%x to 0x%x reach outside the MR [0x%x, +0x%x)",
			first<<FaultPageShift, last<<FaultPageShift, mr.iova, mr.length)
	}
	added := 0
	for i, a := range addrs {
		if a&(FaultPageSize-1) != 0 || a > math.MaxUint64-(FaultPageSize-1) {
			return 0, verbErr(verb, syscall.EINVAL, "page %d at 0x%x is not page-aligned", i, a)
		}
		if !od.as.Mapped(a, FaultPageSize) {
			return 0, verbErr(verb, syscall.EFAULT, "page %d at 0x%x is not mapped", i, a)
		}
		if _, ok := od.pages[first+uint64(i)]; !ok {
			added++
		}
	}
	if len(od.pages)+added > MaxFaultPages {
		return 0, verbErr(verb, syscall.ENOSPC, "%d more pages over the %d an MR may have mapped", added, MaxFaultPages)
	}
	for i, a := range addrs {
		od.pages[first+uint64(i)] = a
	}
	return added, nil
}

// UnmapPages takes from the on-demand MR k the pages that hold any of the wire addresses
// [va, va+n) and returns how many it held. Accesses that looked them up before may still be
// copying: the caller waits for those (the engine drains the MR) before the pages may go.
func (s *Space) UnmapPages(k Key, va, n uint64) (int, error) {
	_, od, err := s.odpMR("unmap_pages", k)
	if err != nil || n == 0 {
		return 0, err
	}
	first := va >> FaultPageShift
	last := uint64(math.MaxUint64 >> FaultPageShift)
	if va <= math.MaxUint64-(n-1) {
		last = (va + n - 1) >> FaultPageShift
	}
	if last-first < uint64(len(od.pages)) {
		dropped := 0
		for p := first; ; p++ {
			if _, ok := od.pages[p]; ok {
				delete(od.pages, p)
				dropped++
			}
			if p == last {
				return dropped, nil
			}
		}
	}
	return od.drop(func(p, _ uint64) bool { return p >= first && p <= last }), nil
}

// UnmapBacking takes from the on-demand MR k the pages that lie in [start, start+n) of its
// address space, and returns how many it held: memory leaving the address space (a guest's DMA
// unmap) is then out of reach of new lookups, as RevokeMRs makes it for registered pages. As
// with UnmapPages, the caller waits for the copies that looked them up before.
func (s *Space) UnmapBacking(k Key, start, n uint64) (int, error) {
	_, od, err := s.odpMR("unmap_backing", k)
	if err != nil || n == 0 {
		return 0, err
	}
	end := uint64(math.MaxUint64)
	if start <= math.MaxUint64-(n-1) {
		end = start + n - 1
	}
	return od.drop(func(_, a uint64) bool { return a <= end && a+(FaultPageSize-1) >= start }), nil
}

// drop deletes the pages for which gone is true, and counts them.
func (od *faulting) drop(gone func(page, addr uint64) bool) int {
	dropped := 0
	for p, a := range od.pages {
		if gone(p, a) {
			delete(od.pages, p)
			dropped++
		}
	}
	return dropped
}

// MappedPages is the number of pages the on-demand MR k has mapped, for tests and counters.
func (s *Space) MappedPages(k Key) int {
	_, od, err := s.odpMR("mapped_pages", k)
	if err != nil {
		return 0
	}
	return len(od.pages)
}
