package vfiouser

import "encoding/binary"

// le is the byte order of every field.
var le = binary.LittleEndian

// Views of the messages' fixed parts, as the vfio-user specification lays them out: the one
// place their offsets are written, for the server that reads requests and writes replies and
// the client that does the reverse. A view is a byte slice with accessors; it never copies.
// Whoever makes one has checked the slice holds the fixed part (the server, against the size
// the request must have; the client, making it of that size).

// headerView is the 16-byte header every message starts with.
type headerView []byte

func (v headerView) id() uint16        { return le.Uint16(v[0:]) }
func (v headerView) setID(x uint16)    { le.PutUint16(v[0:], x) }
func (v headerView) cmd() Command      { return Command(le.Uint16(v[2:])) }
func (v headerView) setCmd(x Command)  { le.PutUint16(v[2:], uint16(x)) }
func (v headerView) size() uint32      { return le.Uint32(v[4:]) }
func (v headerView) setSize(x uint32)  { le.PutUint32(v[4:], x) }
func (v headerView) flags() uint32     { return le.Uint32(v[8:]) }
func (v headerView) setFlags(x uint32) { le.PutUint32(v[8:], x) }
func (v headerView) errno() uint32     { return le.Uint32(v[12:]) }
func (v headerView) setErrno(x uint32) { le.PutUint32(v[12:], x) }

// argszView is the argsz and flags that begin most requests (struct vfio_*'s first fields).
type argszView []byte

func (v argszView) argsz() uint32     { return le.Uint32(v[0:]) }
func (v argszView) setArgsz(x uint32) { le.PutUint32(v[0:], x) }
func (v argszView) flags() uint32     { return le.Uint32(v[4:]) }
func (v argszView) setFlags(x uint32) { le.PutUint32(v[4:], x) }

// dmaMapMsg is DMA_MAP's body (dmaMapSize bytes): argsz, flags, then the file offset, the
// client's address and the size.
type dmaMapMsg struct{ argszView }

func (v dmaMapMsg) offset() uint64     { return le.Uint64(v.argszView[8:]) }
func (v dmaMapMsg) setOffset(x uint64) { le.PutUint64(v.argszView[8:], x) }
func (v dmaMapMsg) iova() uint64       { return le.Uint64(v.argszView[16:]) }
func (v dmaMapMsg) setIOVA(x uint64)   { le.PutUint64(v.argszView[16:], x) }
func (v dmaMapMsg) size() uint64       { return le.Uint64(v.argszView[24:]) }
func (v dmaMapMsg) setSize(x uint64)   { le.PutUint64(v.argszView[24:], x) }

// dmaUnmapMsg is DMA_UNMAP's body (dmaUnmapSize bytes): argsz, flags, address, size.
type dmaUnmapMsg struct{ argszView }

func (v dmaUnmapMsg) iova() uint64     { return le.Uint64(v.argszView[8:]) }
func (v dmaUnmapMsg) setIOVA(x uint64) { le.PutUint64(v.argszView[8:], x) }
func (v dmaUnmapMsg) size() uint64     { return le.Uint64(v.argszView[16:]) }
func (v dmaUnmapMsg) setSize(x uint64) { le.PutUint64(v.argszView[16:], x) }

// deviceInfoMsg is DEVICE_GET_INFO's body (deviceInfoSize bytes).
type deviceInfoMsg struct{ argszView }

func (v deviceInfoMsg) numRegions() uint32     { return le.Uint32(v.argszView[8:]) }
func (v deviceInfoMsg) setNumRegions(x uint32) { le.PutUint32(v.argszView[8:], x) }
func (v deviceInfoMsg) numIRQs() uint32        { return le.Uint32(v.argszView[12:]) }
func (v deviceInfoMsg) setNumIRQs(x uint32)    { le.PutUint32(v.argszView[12:], x) }

// regionInfoMsg is DEVICE_GET_REGION_INFO's body (regionInfoSize bytes), its capabilities
// following in a reply.
type regionInfoMsg struct{ argszView }

func (v regionInfoMsg) index() uint32         { return le.Uint32(v.argszView[8:]) }
func (v regionInfoMsg) setIndex(x uint32)     { le.PutUint32(v.argszView[8:], x) }
func (v regionInfoMsg) capOffset() uint32     { return le.Uint32(v.argszView[12:]) }
func (v regionInfoMsg) setCapOffset(x uint32) { le.PutUint32(v.argszView[12:], x) }
func (v regionInfoMsg) size() uint64          { return le.Uint64(v.argszView[16:]) }
func (v regionInfoMsg) setSize(x uint64)      { le.PutUint64(v.argszView[16:], x) }
func (v regionInfoMsg) offset() uint64        { return le.Uint64(v.argszView[24:]) }
func (v regionInfoMsg) setOffset(x uint64)    { le.PutUint64(v.argszView[24:], x) }

// sparseCapMsg is the sparse-mmap capability (sparseCapHeader bytes, then its areas).
type sparseCapMsg []byte

func (v sparseCapMsg) id() uint16          { return le.Uint16(v[0:]) }
func (v sparseCapMsg) setID(x uint16)      { le.PutUint16(v[0:], x) }
func (v sparseCapMsg) setVersion(x uint16) { le.PutUint16(v[2:], x) }
func (v sparseCapMsg) setNext(x uint32)    { le.PutUint32(v[4:], x) }
func (v sparseCapMsg) nrAreas() uint32     { return le.Uint32(v[8:]) }
func (v sparseCapMsg) setNrAreas(x uint32) { le.PutUint32(v[8:], x) }

// area is area i, which the caller has checked lies inside v.
func (v sparseCapMsg) area(i int) SparseArea {
	a := v[sparseCapHeader+i*sparseAreaSize:]
	return SparseArea{Offset: le.Uint64(a), Size: le.Uint64(a[8:])}
}

func (v sparseCapMsg) setArea(i int, x SparseArea) {
	a := v[sparseCapHeader+i*sparseAreaSize:]
	le.PutUint64(a, x.Offset)
	le.PutUint64(a[8:], x.Size)
}

// irqInfoMsg is DEVICE_GET_IRQ_INFO's body (irqInfoSize bytes).
type irqInfoMsg struct{ argszView }

func (v irqInfoMsg) index() uint32     { return le.Uint32(v.argszView[8:]) }
func (v irqInfoMsg) setIndex(x uint32) { le.PutUint32(v.argszView[8:], x) }
func (v irqInfoMsg) count() uint32     { return le.Uint32(v.argszView[12:]) }
func (v irqInfoMsg) setCount(x uint32) { le.PutUint32(v.argszView[12:], x) }

// irqSetMsg is DEVICE_SET_IRQS's body: irqSetSize bytes, then DATA_BOOL's bytes.
type irqSetMsg struct{ argszView }

func (v irqSetMsg) index() uint32     { return le.Uint32(v.argszView[8:]) }
func (v irqSetMsg) setIndex(x uint32) { le.PutUint32(v.argszView[8:], x) }
func (v irqSetMsg) start() uint32     { return le.Uint32(v.argszView[12:]) }
func (v irqSetMsg) setStart(x uint32) { le.PutUint32(v.argszView[12:], x) }
func (v irqSetMsg) count() uint32     { return le.Uint32(v.argszView[16:]) }
func (v irqSetMsg) setCount(x uint32) { le.PutUint32(v.argszView[16:], x) }
func (v irqSetMsg) data() []byte      { return v.argszView[irqSetSize:] }

// regionRWMsg is REGION_READ's and REGION_WRITE's body (regionRWSize bytes, then the data),
// and one REGION_WRITE_MULTI entry (multiWrEntry bytes, the data in its last 8).
type regionRWMsg []byte

func (v regionRWMsg) offset() uint64     { return le.Uint64(v[0:]) }
func (v regionRWMsg) setOffset(x uint64) { le.PutUint64(v[0:], x) }
func (v regionRWMsg) region() uint32     { return le.Uint32(v[8:]) }
func (v regionRWMsg) setRegion(x uint32) { le.PutUint32(v[8:], x) }
func (v regionRWMsg) count() uint32      { return le.Uint32(v[12:]) }
func (v regionRWMsg) setCount(x uint32)  { le.PutUint32(v[12:], x) }
func (v regionRWMsg) data() []byte       { return v[regionRWSize:] }

// versionMsg is VERSION's body: major, minor, then the capabilities JSON, NUL-terminated.
type versionMsg []byte

func (v versionMsg) major() uint16 { return le.Uint16(v[0:]) }
func (v versionMsg) minor() uint16 { return le.Uint16(v[2:]) }
func (v versionMsg) json() []byte  { return v[4:] }

// writeMultiMsg is REGION_WRITE_MULTI's body: the count of writes, then that many entries.
type writeMultiMsg []byte

func (v writeMultiMsg) count() uint64     { return le.Uint64(v[0:]) }
func (v writeMultiMsg) setCount(x uint64) { le.PutUint64(v[0:], x) }

// entry is write i, which the caller has checked lies inside v.
func (v writeMultiMsg) entry(i int) regionRWMsg {
	return regionRWMsg(v[8+i*multiWrEntry : 8+(i+1)*multiWrEntry])
}
