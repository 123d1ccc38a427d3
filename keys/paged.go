package keys

import (
	"math"
	"math/bits"
	"syscall"
)

// Region is a stretch of an address space one slice holds: addresses [Start, Start+len(Mem)).
type Region struct {
	Start uint64
	Mem   []byte
}

// holds says whether addr is one of the region's addresses.
func (r *Region) holds(addr uint64) bool {
	return addr >= r.Start && addr-r.Start < uint64(len(r.Mem))
}

// last is the region's last address; the region is not empty.
func (r *Region) last() uint64 { return r.Start + uint64(len(r.Mem)-1) }

// RegionSpace is an AddressSpace that can name the region holding an address. Paged memory over
// one keeps only the few regions its pages lie in, where over any other address space it keeps
// a slice for every page: a 1 GiB registration of 4 KiB pages is then a handful of regions
// instead of 262,144 slices.
type RegionSpace interface {
	AddressSpace
	// RegionAt returns the mapped region holding addr, or false when addr is not mapped.
	RegionAt(addr uint64) (Region, bool)
}

// paged is memory a page list names: byte i is at address pages[(off+i)>>shift] +
// (off+i)&(1<<shift-1), inside one of regions. Paged checked all of it, so a walk needs no
// check: every registered byte's address lies in a region.
type paged struct {
	shift   uint8
	off     uint64   // of the first registered byte in the first page
	n       uint64   // registered bytes
	pages   []uint64 // the caller's list, kept rather than copied: 8 bytes a page is the whole cost
	regions []Region // sorted by Start, disjoint
}

// Paged is the memory a page list names in as: length bytes starting offset bytes into the
// first page, pages the addresses of the pageSize-byte pages in order (pageSize a power of two,
// each page aligned to it, exactly as many as offset+length bytes need). Every registered byte
// must be mapped; an error then names the first page that is not (EFAULT), or what is wrong with
// the list (EINVAL).
//
// The memory keeps pages itself, not a copy, so the caller must not change it while the memory
// is registered. It holds the slices of as that back the pages, as Scatter holds its slices:
// taking them away when as unmaps them is the caller's (RevokeMRs). Over a RegionSpace it holds
// the regions the pages lie in, a few whatever the number of pages, and finds a byte's slice
// from its page; over any other address space it holds a slice for each run of contiguous pages.
func Paged(as AddressSpace, pageSize, offset, length uint64, pages []uint64) (Memory, error) {
	if as == nil {
		return Memory{}, verbErr("reg_mr", syscall.EINVAL, "page list: no address space")
	}
	// All of the list first, so a misaligned page is reported as such even after an unmapped one.
	if err := CheckPages(pageSize, offset, length, pages); err != nil {
		return Memory{}, err
	}
	pg := paged{shift: uint8(bits.TrailingZeros64(pageSize)), off: offset, n: length, pages: pages}
	if rs, ok := as.(RegionSpace); ok {
		if err := pg.resolve(rs); err != nil {
			return Memory{}, err
		}
		return Memory{scatter: &scatter{pg: pg}}, nil
	}
	return pg.segments(as)
}

// CheckPages checks a page list as Paged takes it, reading no memory: pageSize a power of two,
// offset inside the first page, length at least one byte without overflow, exactly as many
// pages as offset+length bytes need, each aligned to pageSize. The error (EINVAL) names the
// first rule broken.
func CheckPages(pageSize, offset, length uint64, pages []uint64) error {
	bad := func(format string, args ...any) error {
		return verbErr("reg_mr", syscall.EINVAL, "page list: "+format, args...)
	}
	switch {
	case pageSize == 0 || pageSize&(pageSize-1) != 0:
		return bad("page size %d is not a power of two", pageSize)
	case offset >= pageSize:
		return bad("offset %d is not inside the first page of %d bytes", offset, pageSize)
	case length == 0:
		return bad("length 0")
	case length > math.MaxUint64-offset:
		return bad("offset %d + length %d overflows", offset, length)
	}
	// need cannot overflow: offset+length fits, and is at least 1.
	if need := (offset+length-1)/pageSize + 1; uint64(len(pages)) != need {
		return bad("%d pages for offset %d and length %d of %d-byte pages, want %d", len(pages), offset, length, pageSize, need)
	}
	for i, page := range pages {
		if page&(pageSize-1) != 0 {
			return bad("page %d at 0x%x is not aligned to %d", i, page, pageSize)
		}
	}
	return nil
}

func unmappedPage(i int, page uint64) error {
	return verbErr("reg_mr", syscall.EFAULT, "page %d at 0x%x is not mapped", i, page)
}

// piece is the address range of page i's registered bytes: every byte of a page but the
// registration's first and last. It does not wrap: the page is aligned.
func (p *paged) piece(i int) (addr, n uint64) {
	start := uint64(i) << p.shift // of the page in the registration, from the first page's start
	// Last bytes rather than ends: the end of a page at the top of the space is 2^64.
	lo, last := max(start, p.off), min(start+(uint64(1)<<p.shift-1), p.off+p.n-1)
	return p.pages[i] + (lo - start), last - lo + 1
}

// resolve finds the regions that hold every registered byte. It asks rs only about addresses
// no region found so far holds, so a registration costs a call per region, not per page.
func (p *paged) resolve(rs RegionSpace) error {
	hint := 0
	for i := range p.pages {
		addr, n := p.piece(i)
		for n > 0 {
			j := findRegion(p.regions, addr, hint)
			if j < 0 {
				r, ok := rs.RegionAt(addr)
				// Checked rather than trusted: a walk relies on it.
				if !ok || !r.holds(addr) || uint64(len(r.Mem)-1) > math.MaxUint64-r.Start {
					return unmappedPage(i, p.pages[i])
				}
				if j = insertRegion(&p.regions, r); j < 0 {
					return verbErr("reg_mr", syscall.EFAULT, "the address space changed while page %d at 0x%x was registered", i, p.pages[i])
				}
			}
			hint = j
			r := &p.regions[j]
			k := min(n, uint64(len(r.Mem))-(addr-r.Start))
			addr += k // wraps to 0 only at the top of the space, when n is used up
			n -= k
		}
	}
	return nil
}

// findRegion is the index of the region of rs holding addr, or -1; hint is tried first, as
// consecutive pages usually share a region.
func findRegion(rs []Region, addr uint64, hint int) int {
	if hint < len(rs) && rs[hint].holds(addr) {
		return hint
	}
	// The last region starting at or before addr, searched by hand: sort.Search's closure
	// would cost an indirect call per step on the data path.
	lo, hi := 0, len(rs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rs[m].Start <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo > 0 && rs[lo-1].holds(addr) {
		return lo - 1
	}
	return -1
}

// insertRegion adds r to the sorted, disjoint rs and returns its index, or -1 if it overlaps a
// region already there: the address space mapped something else over it since.
func insertRegion(rs *[]Region, r Region) int {
	s := *rs
	i := 0
	for i < len(s) && s[i].Start < r.Start {
		i++
	}
	if i > 0 && s[i-1].last() >= r.Start || i < len(s) && r.last() >= s[i].Start {
		return -1
	}
	s = append(s, Region{})
	copy(s[i+1:], s[i:])
	s[i] = r
	*rs = s
	return i
}

// walk is Memory.walk for paged memory: a piece runs on over pages that continue each other
// in one region, so contiguous pages cost one piece, not one each.
func (p *paged) walk(off, n uint64, f func([]byte) bool) {
	mask := uint64(1)<<p.shift - 1
	pos := p.off + off // of the byte in the registration, from the first page's start
	hint := 0
	for n > 0 {
		page := pos >> p.shift
		addr := p.pages[page] + pos&mask
		j := findRegion(p.regions, addr, hint)
		if j < 0 {
			return // Paged saw to it that this cannot happen; stop rather than panic
		}
		hint = j
		r := &p.regions[j]
		rest := uint64(len(r.Mem)) - (addr - r.Start) // of the region from addr
		// While the region goes on past this page and the next page is the one after it,
		// take that page too. addr+run cannot wrap: the region holds it.
		run := mask + 1 - pos&mask
		for run < rest && run < n && p.pages[(pos+run)>>p.shift] == addr+run {
			run += mask + 1
		}
		k := min(run, rest, n)
		at := addr - r.Start
		if !f(r.Mem[at : at+k : at+k]) {
			return
		}
		pos += k
		n -= k
	}
}

// segments is Paged over an address space that cannot name regions: the slices Segments gives
// for each run of contiguous pages.
func (p *paged) segments(as AddressSpace) (Memory, error) {
	segs := make([][]byte, 0, 1)
	start, n := p.piece(0)
	first := 0 // the run's first page
	flush := func(next int) error {
		if !as.Mapped(start, n) {
			for i := first; i < next; i++ {
				if a, k := p.piece(i); !as.Mapped(a, k) {
					return unmappedPage(i, p.pages[i])
				}
			}
			return verbErr("reg_mr", syscall.EFAULT, "[0x%x, +%d) is not mapped", start, n)
		}
		segs = as.Segments(start, n, segs)
		return nil
	}
	for i := 1; i < len(p.pages); i++ {
		a, k := p.piece(i)
		if start+n == a && a != 0 {
			n += k
			continue
		}
		if err := flush(i); err != nil {
			return Memory{}, err
		}
		start, n, first = a, k, i
	}
	if err := flush(len(p.pages)); err != nil {
		return Memory{}, err
	}
	mem := scatterOf(segs)
	if got := mem.Len(); got != p.n {
		return Memory{}, verbErr("reg_mr", syscall.EFAULT, "the address space gave %d bytes for %d", got, p.n)
	}
	return mem, nil
}
