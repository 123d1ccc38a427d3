package vfiouser

import "os"

// Device is the function behind the socket: what the server asks of the PCI function model.
//
// The server calls RegionRead, RegionWrite, Reset, MapDMA and UnmapDMA from its connection
// goroutine only, one call at a time, so those never run concurrently with each other. The
// device's own goroutines may run at the same time and may call Server.Trigger at any moment.
type Device interface {
	// Describe returns the device's regions and interrupts. The server calls it once, in New;
	// the description does not change afterwards.
	Describe() Description
	// RegionRead fills data with len(data) bytes of region index from offset. The server has
	// checked that the region is readable and the range lies within it. An error becomes the
	// error reply's errno (EIO unless it wraps a syscall.Errno).
	RegionRead(index uint32, offset uint64, data []byte) error
	// RegionWrite writes data at offset of region index, checked as for RegionRead. data is
	// only valid during the call.
	RegionWrite(index uint32, offset uint64, data []byte) error
	// Reset returns the device to its power-on state (DEVICE_RESET).
	Reset() error
	// MapDMA tells the device that the client's memory [iova, iova+size) is DMA-able. mem is
	// that memory (len size) when the server could map it, nil when it could not (no fd, a
	// read-only ROM section, a file shorter than the range): the device must then treat the
	// range as present but not accessible. writable says whether mem may be written; writing a
	// read-only mem faults the process.
	MapDMA(iova, size uint64, mem []byte, writable bool)
	// UnmapDMA tells the device that [iova, iova+size), given by an earlier MapDMA, goes away.
	// The server unmaps mem right after UnmapDMA returns, so UnmapDMA must return only when
	// nothing of the device touches mem any more (revoke every MR and queue that reaches into it).
	UnmapDMA(iova, size uint64)
}

// Description says what a device offers: DEVICE_GET_INFO, GET_REGION_INFO and GET_IRQ_INFO.
type Description struct {
	Flags   uint32   // DeviceFlagReset, DeviceFlagPCI
	Regions []Region // indexed by region number; an unused index is a zero Region
	IRQs    []IRQ    // indexed by IRQ index
}

// Region is one region of the device.
type Region struct {
	Size  uint64
	Flags uint32 // RegionFlagRead, RegionFlagWrite; the server sets RegionFlagMmap and RegionFlagCaps
	// Mmap, when set, offers parts of the region as shared memory the client may map
	// instead of sending REGION_READ/WRITE for them (the sparse-mmap capability).
	Mmap *RegionMmap
}

// RegionMmap is the memory behind a region's mmappable areas: the client maps
// File at FileOffset+Area.Offset for each area. The device owns File; the server sends a
// duplicate with each GET_REGION_INFO reply and never closes it.
type RegionMmap struct {
	File       *os.File
	FileOffset uint64
	Areas      []SparseArea
}

// SparseArea is a range of a region, relative to the region's start.
type SparseArea struct {
	Offset, Size uint64
}

// IRQ is one interrupt index: how many vectors it has and its GET_IRQ_INFO flags
// (IRQEventfd, IRQMaskable, IRQAutomask, IRQNoResize).
type IRQ struct {
	Count uint32
	Flags uint32
}
