package ucontext

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softirdma/softirdma/hw/abi"
)

const pageSize = 4096

// area is the memfd a context's queues live in: the program maps each queue at the offset its
// create command answers (rxe's mmap_info), and the context maps the same pages. The file can
// grow and never shrink (F_SEAL_SHRINK): a program that truncates it cannot take pages from
// under the context.
type area struct {
	file *os.File
	next uint64 // the offset the next queue gets
}

func newArea(name string) (*area, error) {
	fd, err := unix.MemfdCreate("softirdma-uverbs", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd for %s: %w", name, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sealing the memfd: %w", err)
	}
	return &area{file: os.NewFile(uintptr(fd), "softirdma-uverbs"), next: pageSize}, nil
}

func (a *area) close() { a.file.Close() }

// ring is a queue in rxe's layout, mapped from the area.
type ring struct {
	mem     []byte
	off     uint64 // its offset in the area: the program's mmap offset
	logElem uint8
	mask    uint32
}

// maxRingBytes bounds one queue's mapping: mmap_info's size is 32 bits.
const maxRingBytes = 1 << 30

// newRing maps a ring of slots elements of 2^logElem bytes (slots a power of two) at the end of
// the area and writes its header as rxe's kernel does.
func (a *area) newRing(slots uint32, logElem uint8) (*ring, error) {
	n := uint64(abi.QueueHeaderSize) + uint64(slots)<<logElem
	n = (n + pageSize - 1) &^ (pageSize - 1)
	if n > maxRingBytes {
		return nil, errf(syscall.ENOMEM, "a queue of %d bytes", n)
	}
	off := a.next
	if err := a.file.Truncate(int64(off + n)); err != nil {
		return nil, errf(syscall.ENOMEM, "growing the queue file: %v", err)
	}
	mem, err := unix.Mmap(int(a.file.Fd()), int64(off), int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, errf(syscall.ENOMEM, "mapping a queue: %v", err)
	}
	a.next = off + n
	r := &ring{mem: mem, off: off, logElem: logElem, mask: slots - 1}
	putU32(mem[abi.QHLogElemSize:], uint32(logElem))
	putU32(mem[abi.QHIndexMask:], slots-1)
	return r, nil
}

func (r *ring) size() uint32 { return uint32(len(r.mem)) }

func (r *ring) unmap() {
	if r != nil && r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}

func (r *ring) index(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// producer and consumer are read with acquire and written with release order, as the
// provider's rxe_queue.h does on its side.
func (r *ring) producer() uint32     { return atomic.LoadUint32(r.index(abi.QHProducer)) & r.mask }
func (r *ring) consumer() uint32     { return atomic.LoadUint32(r.index(abi.QHConsumer)) & r.mask }
func (r *ring) setProducer(v uint32) { atomic.StoreUint32(r.index(abi.QHProducer), v&r.mask) }
func (r *ring) setConsumer(v uint32) { atomic.StoreUint32(r.index(abi.QHConsumer), v&r.mask) }

// slot is element i's bytes.
func (r *ring) slot(i uint32) []byte {
	o := abi.QueueHeaderSize + int(i&r.mask)<<r.logElem
	return r.mem[o : o+1<<r.logElem : o+1<<r.logElem]
}

// mmapInfo is struct mminfo {offset u64, size u32, pad u32}.
func (r *ring) mmapInfo() []byte {
	b := make([]byte, 16)
	putU64(b, r.off)
	putU32(b[8:], r.size())
	return b
}

// slotsFor is rxe's queue size for n entries: the next power of two above n (one slot stays
// empty), at least 2.
func slotsFor(n uint32) uint32 {
	s := uint32(2)
	for s < n+1 {
		s <<= 1
	}
	return s
}

// logElemFor is log2 of the element size for a bytes: a power of two, at least a cache line.
func logElemFor(n int) uint8 {
	l := uint8(6)
	for 1<<l < n {
		l++
	}
	return l
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func putU64(b []byte, v uint64) { putU32(b, uint32(v)); putU32(b[4:], uint32(v>>32)) }
