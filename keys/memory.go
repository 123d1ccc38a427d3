package keys

import (
	"math"
	"sort"
)

// Memory is what an MR registers: an ordered scatter list of byte slices (one Go slice for the
// verbs API), the pages of a page list in an address space (a guest's MR, Paged), or, for an
// implicit on-demand MR, a whole address space; or memory another process owns, reached by
// copying (Copied). keys keeps references to the slices and never copies them.
type Memory struct {
	one []byte // the contiguous case, kept inline so a plain MR costs no extra allocation
	*scatter
}

type scatter struct {
	segs [][]byte // nil for an address space and for pages
	ends []uint64 // ends[i] = offset just past segs[i]
	as   AddressSpace
	pg   paged // pg.pages is not nil for the memory of a page list
	cp   copied
	od   *faulting // on-demand paged memory; its spans hold the slices they resolved to
}

// Copier is memory the device reaches by copying, not through slices: the memory of another
// process (process_vm_readv and process_vm_writev). A copy either moves every byte or fails;
// it may fail at any time, as the process unmaps what it registered.
type Copier interface {
	ReadAt(p []byte, addr uint64) error
	WriteAt(p []byte, addr uint64) error
}

// copied is the n bytes at addr of a Copier's memory.
type copied struct {
	c    Copier
	addr uint64
	n    uint64
}

// Copied is the n bytes at address addr of c's memory. Its spans have no slices (Segments
// gives none); CopyFrom and CopyTo copy through c, and report 0 bytes when c fails.
func Copied(c Copier, addr, n uint64) Memory {
	return Memory{scatter: &scatter{cp: copied{c: c, addr: addr, n: n}}}
}

func (m Memory) copier() bool { return m.scatter != nil && m.cp.c != nil }

// AddressSpace is memory reached by address rather than registered slice by slice: the whole
// address space an implicit on-demand MR covers (a guest's DMA map, say), and the one a page
// list's pages lie in (Paged), where one that is also a RegionSpace keeps a registration small.
type AddressSpace interface {
	// Mapped says whether every byte of [addr, addr+n) is backed by memory.
	Mapped(addr, n uint64) bool
	// Segments appends the slices holding [addr, addr+n) to dst; the range is Mapped.
	Segments(addr, n uint64, dst [][]byte) [][]byte
}

// Contiguous is memory made of one slice.
func Contiguous(b []byte) Memory { return Memory{one: b} }

// Scatter is memory made of several slices, in order; empty slices are dropped.
func Scatter(segs ...[]byte) Memory {
	// A copy: the caller's list may change after, and it is the size the memory keeps.
	return scatterOf(append(make([][]byte, 0, len(segs)), segs...))
}

// scatterOf is Scatter keeping segs itself, which it compacts in place.
func scatterOf(segs [][]byte) Memory {
	kept := segs[:0]
	for _, s := range segs {
		if len(s) > 0 {
			kept = append(kept, s)
		}
	}
	clear(segs[len(kept):]) // the dropped tail must not keep memory reachable
	switch len(kept) {
	case 0:
		return Memory{}
	case 1:
		return Memory{one: kept[0]}
	}
	sc := &scatter{segs: kept, ends: make([]uint64, len(kept))}
	var end uint64
	for i, s := range kept {
		end += uint64(len(s))
		sc.ends[i] = end
	}
	return Memory{scatter: sc}
}

// Implicit is the memory of an implicit on-demand MR: every address of as, length 2^64-1.
func Implicit(as AddressSpace) Memory { return Memory{scatter: &scatter{as: as}} }

// Len is the number of bytes the memory covers.
func (m Memory) Len() uint64 {
	switch {
	case m.scatter == nil:
		return uint64(len(m.one))
	case m.as != nil:
		return math.MaxUint64
	case m.pg.pages != nil:
		return m.pg.n
	case m.cp.c != nil:
		return m.cp.n
	case m.od != nil:
		return m.od.n
	}
	return m.ends[len(m.ends)-1]
}

func (m Memory) implicit() bool { return m.scatter != nil && m.as != nil }

// segments appends the slices covering [off, off+n) to dst. The caller has range-checked.
func (m *Memory) segments(off, n uint64, dst [][]byte) [][]byte {
	if m.copier() {
		return dst
	}
	if m.implicit() {
		if n == 0 {
			return dst
		}
		return m.as.Segments(off, n, dst)
	}
	m.walk(off, n, func(seg []byte) bool {
		dst = append(dst, seg)
		return true
	})
	return dst
}

// walk calls f on each registered slice piece covering [off, off+n) until f returns false.
// The caller has range-checked; each piece's capacity ends where the range does.
func (m *Memory) walk(off, n uint64, f func([]byte) bool) {
	if n == 0 || m.copier() || m.onDemand() != nil {
		return
	}
	if m.scatter == nil {
		f(m.one[off : off+n : off+n])
		return
	}
	if m.pg.pages != nil {
		m.pg.walk(off, n, f)
		return
	}
	i := sort.Search(len(m.ends), func(i int) bool { return m.ends[i] > off })
	for ; n > 0; i++ {
		start := m.ends[i] - uint64(len(m.segs[i]))
		seg := m.segs[i][off-start:]
		if uint64(len(seg)) > n {
			seg = seg[:n:n]
		}
		if !f(seg) {
			return
		}
		off += uint64(len(seg))
		n -= uint64(len(seg))
	}
}

// Span is where an access lands: n bytes from offset off of registered memory. It holds the
// memory itself, not the key space's entry, so it may be used after the lock that serializes the
// key space is released: a change of the key space then (a dereg, a revocation) does not touch
// it, and does not take the memory from under a copy (the engine waits for its copies before
// such a change returns). The engine looks a key up again for every packet, as hardware does, so
// an invalidation takes effect mid-message.
type Span struct {
	mem *Memory // the entry's memory at the lookup, which no change of the key space writes
	off uint64
	n   uint64
}

// noMemory is the memory of an entry that has none; it is never written.
var noMemory Memory

// newMemory gives an MR entry memory of its own, which the key space replaces whole rather than
// rewrites, so that a Span taken before a change keeps what it had.
func newMemory(m Memory) *Memory { return &m }

// Len is the number of bytes the span covers.
func (s Span) Len() uint64 { return s.n }

// Slice is the n bytes of the span from off on, as far as the span goes.
func (s Span) Slice(off, n uint64) Span {
	off = min(off, s.n)
	return Span{mem: s.mem, off: s.off + off, n: min(n, s.n-off)}
}

// Segments appends to dst the byte slices that hold the span, in order, and returns it. With a
// dst of enough capacity it does not allocate. Each slice's capacity ends at the span's end, so
// an append through it cannot reach memory outside the access.
func (s Span) Segments(dst [][]byte) [][]byte {
	if s.n == 0 {
		return dst
	}
	return s.mem.segments(s.off, s.n, dst)
}

// CopyFrom copies src into the span (a WRITE or a SEND landing) and returns the bytes copied.
func (s Span) CopyFrom(src []byte) int { return s.copy(src, true) }

// CopyTo copies the span into dst (a READ response or a SEND being built) and returns the bytes
// copied.
func (s Span) CopyTo(dst []byte) int { return s.copy(dst, false) }

// copy copies b into the span (in) or the span into b, as far as the shorter goes, and returns
// the bytes copied.
func (s Span) copy(b []byte, in bool) int {
	if s.n == 0 {
		return 0 // a zero-length access: its span has no memory at all
	}
	if s.mem.scatter == nil {
		// One slice: the copy itself, without the walk's call per segment. Most packets are
		// this case, and for a small one the walk cost more than the copy.
		seg := s.mem.one[s.off : s.off+s.n : s.off+s.n]
		if in {
			return copy(seg, b)
		}
		return copy(b, seg)
	}
	if s.mem.copier() {
		return s.copyThrough(b, in)
	}
	total := 0
	s.each(func(seg []byte) bool {
		var n int
		if in {
			n = copy(seg, b)
		} else {
			n = copy(b, seg)
		}
		b = b[n:]
		total += n
		return len(b) > 0
	})
	return total
}

// copyThrough is copy for a Copier's memory: all of it or nothing.
func (s Span) copyThrough(b []byte, in bool) int {
	b = b[:min(uint64(len(b)), s.n)]
	if len(b) == 0 {
		return 0
	}
	cp := &s.mem.cp
	var err error
	if in {
		err = cp.c.WriteAt(b, cp.addr+s.off)
	} else {
		err = cp.c.ReadAt(b, cp.addr+s.off)
	}
	if err != nil {
		return 0
	}
	return len(b)
}

// each walks the span's slices without collecting them, so the copy helpers do not allocate
// for registered memory.
func (s Span) each(f func([]byte) bool) {
	if s.n == 0 {
		return
	}
	if !s.mem.implicit() {
		s.mem.walk(s.off, s.n, f)
		return
	}
	var buf [8][]byte
	segs := s.mem.segments(s.off, s.n, buf[:0])
	for _, seg := range segs {
		if !f(seg) {
			return
		}
	}
}
