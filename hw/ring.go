package hw

import (
	"encoding/binary"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
)

// ring is a queue in guest memory in the rxe layout (abi.QueueHeaderSize bytes of header,
// then 2^logCount elements of 2^logElem bytes) over the pages of a page list. Elements may
// straddle pages; every access is split where a page ends and fails with EFAULT if the page is
// gone.
type ring struct {
	mem      *engine.GuestMemory
	pages    []uint64
	pageSize uint64
	logCount uint8
	logElem  uint8
}

func (r *ring) count() uint32 { return 1 << r.logCount }
func (r *ring) mask() uint32  { return r.count() - 1 }

// bytes is the ring's length, header included.
func (r *ring) bytes() uint64 {
	return abi.QueueHeaderSize + uint64(r.count())<<r.logElem
}

// newRing checks a queue's arguments and resolves its pages. minElem is the least element the
// queue's entries need, maxLog the most slots it may have (log2).
func newRing(mem *engine.GuestMemory, args abi.QueueArgs, minElem int, maxLog uint8) (*ring, error) {
	logCount, logElem := args.LogCount(), args.LogElem()
	switch {
	case logCount == 0 || logCount > min(maxLog, abi.QueueMaxLog):
		return nil, errf(syscall.EINVAL, "queue of 2^%d elements, 2^1 to 2^%d", logCount, min(maxLog, abi.QueueMaxLog))
	case logElem > abi.ElemMaxLog || 1<<logElem < minElem:
		return nil, errf(syscall.EINVAL, "queue elements of 2^%d bytes, %d to 2^%d", logElem, minElem, abi.ElemMaxLog)
	}
	r := &ring{mem: mem, logCount: logCount, logElem: logElem}
	pl := decodePageList(args.Pages())
	pageSize, err := checkPageList(pl, abi.MaxMRPages)
	if err != nil {
		return nil, err
	}
	// A ring's list names exactly the pages it needs: a count the ring does not imply is
	// refused before it sizes anything.
	if need := (r.bytes() + pageSize - 1) / pageSize; uint64(pl.pages) != need {
		return nil, errf(syscall.EINVAL, "a queue of %d bytes in %d pages of %d, want %d", r.bytes(), pl.pages, pageSize, need)
	}
	_, pages, err := resolvePages(mem, pl, abi.MaxMRPages)
	if err != nil {
		return nil, err
	}
	r.pages, r.pageSize = pages, pageSize // resolvePages found every one mapped
	return r, nil
}

// access reads (write false) or writes p at byte off of the ring, page by page.
func (r *ring) access(off uint64, p []byte, write bool) error {
	for len(p) > 0 {
		page := off / r.pageSize
		if page >= uint64(len(r.pages)) {
			return errf(syscall.EFAULT, "queue offset %d past its pages", off)
		}
		in := off % r.pageSize
		n := min(uint64(len(p)), r.pageSize-in)
		addr := r.pages[page] + in
		var err error
		if write {
			err = writeGuest(r.mem, addr, p[:n])
		} else {
			err = readGuest(r.mem, addr, p[:n])
		}
		if err != nil {
			return err
		}
		p, off = p[n:], off+n
	}
	return nil
}

// ringLog is log2 of the most slots a ring for limit work requests may have: one slot always
// stays empty, so limit+1 slots, rounded down to a power of two.
func ringLog(limit int) uint8 {
	l := uint8(0)
	for uint64(2)<<l <= uint64(limit)+1 {
		l++
	}
	return l
}

func (r *ring) elemOff(i uint32) uint64 {
	return abi.QueueHeaderSize + uint64(i&r.mask())<<r.logElem
}

func (r *ring) readU32(off uint64) (uint32, error) {
	var b [4]byte
	err := r.access(off, b[:], false)
	return binary.LittleEndian.Uint32(b[:]), err
}

func (r *ring) writeU32(off uint64, v uint32) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return r.access(off, b[:], true)
}

// overlaps says whether any page of the ring lies in [start, start+n).
func (r *ring) overlaps(start, n uint64) bool {
	for _, p := range r.pages {
		if p < start+n && start < p+r.pageSize {
			return true
		}
	}
	return false
}
