package vfiouser

import (
	"math"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

const pageSize = 4096

// maxDMAMaps is what VERSION advertises as max_dma_maps and what the table holds at most.
const maxDMAMaps = 65535

// dmaRegion is one DMA_MAP the client made.
type dmaRegion struct {
	iova, size uint64
	mem        []byte // the mmap; nil when not accessible
	writable   bool
}

func (r *dmaRegion) last() uint64 { return r.iova + r.size - 1 }

// dmaTable is a connection's DMA maps, sorted by iova and disjoint. Only the connection
// goroutine touches it.
type dmaTable struct {
	regions []*dmaRegion
	// warnedNoFD: the connection was told once that its RAM comes without a file descriptor.
	warnedNoFD bool
}

// find is the index of the first region with iova >= addr.
func (t *dmaTable) find(addr uint64) int {
	return sort.Search(len(t.regions), func(i int) bool { return t.regions[i].iova >= addr })
}

func (t *dmaTable) overlaps(iova, size uint64) bool {
	i := t.find(iova)
	if i > 0 && t.regions[i-1].last() >= iova {
		return true
	}
	return i < len(t.regions) && t.regions[i].iova <= iova+(size-1)
}

// mapDMA handles a DMA_MAP whose fields were decoded. It takes ownership of fd (-1 for none)
// and closes it: an mmap keeps its own reference to the file.
func (s *Server) mapDMA(t *dmaTable, iova, size, offset uint64, flags uint32, fd int) error {
	if fd >= 0 {
		defer unix.Close(fd)
	}
	switch {
	case flags&^(DMARead|DMAWrite) != 0:
		return refuse(syscall.EINVAL, "DMA_MAP flags 0x%x", flags)
	case size == 0 || size-1 > math.MaxUint64-iova:
		return refuse(syscall.EINVAL, "DMA_MAP [0x%x, +0x%x) is empty or wraps", iova, size)
	case t.overlaps(iova, size):
		return refuse(syscall.EEXIST, "DMA_MAP [0x%x, +0x%x) overlaps a mapped range", iova, size)
	case len(t.regions) >= maxDMAMaps:
		return refuse(syscall.ENOSPC, "DMA_MAP beyond max_dma_maps %d", maxDMAMaps)
	}
	r := &dmaRegion{iova: iova, size: size, writable: flags&DMAWrite != 0}
	// Never fail a map QEMU sends (it treats that as fatal): memory the server cannot map
	// safely is recorded as present but not accessible.
	if why := s.mmapDMA(r, fd, offset, flags); why != "" {
		r.writable = false
		s.log.Info("DMA region not accessible", "iova", iova, "size", size, "flags", flags, "why", why)
		// Writable memory without a descriptor is guest RAM QEMU keeps private: the commonest
		// mistake in a QEMU command line for this device, and the guest's driver only sees a
		// function that cannot reach its memory. Say once what to change.
		if fd < 0 && flags&DMAWrite != 0 && !t.warnedNoFD {
			t.warnedNoFD = true
			s.log.Warn("guest RAM comes without a file descriptor, so the device cannot reach it: " +
				"give QEMU a shared memory backend, -object memory-backend-memfd,id=mem,size=<as -m>,share=on -machine memory-backend=mem")
		}
	}
	i := t.find(iova)
	t.regions = append(t.regions, nil)
	copy(t.regions[i+1:], t.regions[i:])
	t.regions[i] = r
	s.dev.MapDMA(iova, size, r.mem, r.writable)
	return nil
}

// mmapDMA maps the file range for r, or says why not.
func (s *Server) mmapDMA(r *dmaRegion, fd int, offset uint64, flags uint32) string {
	if fd < 0 {
		return "no fd"
	}
	if flags&DMARead == 0 {
		return "not readable"
	}
	if offset%pageSize != 0 {
		return "file offset not page-aligned"
	}
	if r.size > math.MaxInt || offset > math.MaxInt64-r.size {
		return "range too large"
	}
	// Touching a page the client has truncated away later raises SIGBUS in the server: the file
	// must be sealed against shrinking. QEMU seals its memfd backends (seal=on); a file that
	// allows sealing but is not sealed yet gets the seal from us.
	if why := sealShrink(fd); why != "" {
		return why
	}
	// Touching a MAP_SHARED page past the end of its file raises SIGBUS, so the file must
	// hold the whole range now (and, sealed, always will).
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "fstat: " + err.Error()
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Size) < offset+r.size {
		return "not a regular file holding the range"
	}
	prot := unix.PROT_READ
	if flags&DMAWrite != 0 {
		prot |= unix.PROT_WRITE
	}
	mem, err := unix.Mmap(fd, int64(offset), int(r.size), prot, unix.MAP_SHARED)
	if err != nil {
		return "mmap: " + err.Error()
	}
	r.mem = mem
	return ""
}

// sealShrink makes sure the file behind fd cannot shrink, or says why it cannot.
func sealShrink(fd int) string {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return "the file cannot be sealed against shrinking (not a memfd?): " + err.Error()
	}
	if seals&unix.F_SEAL_SHRINK != 0 {
		return ""
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		return "the file may shrink and refuses F_SEAL_SHRINK: " + err.Error()
	}
	return ""
}

// unmapDMA handles a DMA_UNMAP: an exact match of an earlier map, or all of them.
func (s *Server) unmapDMA(t *dmaTable, iova, size uint64, flags uint32) error {
	switch {
	case flags&dmaDirty != 0:
		return refuse(syscall.ENOTSUP, "DMA_UNMAP with a dirty bitmap")
	case flags&^DMAUnmapAll != 0:
		return refuse(syscall.EINVAL, "DMA_UNMAP flags 0x%x", flags)
	case flags&DMAUnmapAll != 0:
		if iova != 0 || size != 0 {
			return refuse(syscall.EINVAL, "DMA_UNMAP all with iova 0x%x size 0x%x", iova, size)
		}
		s.unmapAll(t)
		return nil
	}
	i := t.find(iova)
	if i == len(t.regions) || t.regions[i].iova != iova || t.regions[i].size != size {
		return refuse(syscall.ENOENT, "DMA_UNMAP [0x%x, +0x%x) matches no map", iova, size)
	}
	r := t.regions[i]
	t.regions = append(t.regions[:i], t.regions[i+1:]...)
	s.release(r)
	return nil
}

func (s *Server) unmapAll(t *dmaTable) {
	for _, r := range t.regions {
		s.release(r)
	}
	t.regions = nil
}

// release tells the device first, so that it stops touching the memory, and only then unmaps it.
func (s *Server) release(r *dmaRegion) {
	s.dev.UnmapDMA(r.iova, r.size)
	if r.mem != nil {
		if err := unix.Munmap(r.mem); err != nil {
			s.log.Error("munmap of a DMA region", "iova", r.iova, "size", r.size, "err", err)
		}
		r.mem = nil
	}
	s.log.Debug("DMA unmapped", "iova", r.iova, "size", r.size)
}
