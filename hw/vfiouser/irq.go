package vfiouser

import (
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// irqTable holds the eventfds the client assigned, per IRQ index and vector. Trigger reads
// it from any goroutine; the connection goroutine changes it; both under mu, so an eventfd
// is never closed (and its number reused) while a Trigger writes to it.
type irqTable struct {
	mu      sync.Mutex
	vectors [][]irqVector // [index][vector]
}

type irqVector struct {
	fd      int // -1: none assigned
	masked  bool
	pending bool // triggered while masked
}

func newIRQTable(irqs []IRQ) *irqTable {
	t := &irqTable{vectors: make([][]irqVector, len(irqs))}
	for i, irq := range irqs {
		t.vectors[i] = make([]irqVector, irq.Count)
		for j := range t.vectors[i] {
			t.vectors[i][j].fd = -1
		}
	}
	return t
}

var one = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// signal adds 1 to v's eventfd, or remembers it when v is masked. Called with mu held.
func (v *irqVector) signal() {
	if v.masked {
		v.pending = true
		return
	}
	if v.fd >= 0 {
		// The eventfd is non-blocking (set when it was assigned): a counter the client
		// drove to its maximum loses this signal instead of stalling the device.
		unix.Write(v.fd, one)
	}
}

// Trigger raises vector of IRQ index: it writes to the eventfd the client assigned to it, or
// does nothing when none is assigned (or the index or vector does not exist). While the vector
// is masked (SET_IRQS mask) it is held pending and delivered at unmask. Safe from any goroutine.
func (s *Server) Trigger(index, vector uint32) {
	t := s.irqs
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(index) < len(t.vectors) && int(vector) < len(t.vectors[index]) {
		t.vectors[index][vector].signal()
	}
}

// closeAll closes every eventfd and clears masks: the state of a device with no client.
func (t *irqTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, vs := range t.vectors {
		for j := range vs {
			if vs[j].fd >= 0 {
				unix.Close(vs[j].fd)
			}
			vs[j] = irqVector{fd: -1}
		}
	}
}

// isEventfd says whether fd is an eventfd: any other file (a full pipe, a socket) could
// block or misbehave when Trigger writes to it.
func isEventfd(fd int) bool {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err == nil && target == "anon_inode:[eventfd]"
}

// setIRQs handles DEVICE_SET_IRQS. data is what follows the 20-byte struct; fds are the
// message's descriptors, which setIRQs either keeps in the table or leaves to the caller to
// close (it returns how many it kept: all or none).
func (s *Server) setIRQs(flags, index, start, count uint32, data []byte, fds []int) (kept bool, err error) {
	desc := s.desc.IRQs
	dataType, action := flags&irqDataMask, flags&irqActionMask
	switch {
	case flags&^(irqDataMask|irqActionMask) != 0:
		return false, refuse(syscall.EINVAL, "SET_IRQS flags 0x%x", flags)
	case dataType != IRQDataNone && dataType != IRQDataBool && dataType != IRQDataEventfd:
		return false, refuse(syscall.EINVAL, "SET_IRQS flags 0x%x: not one data type", flags)
	case action != IRQActionMask && action != IRQActionUnmask && action != IRQActionTrig:
		return false, refuse(syscall.EINVAL, "SET_IRQS flags 0x%x: not one action", flags)
	case int(index) >= len(desc) || desc[index].Count == 0:
		return false, refuse(syscall.EINVAL, "SET_IRQS index %d: no such IRQ", index)
	case uint64(start)+uint64(count) > uint64(desc[index].Count):
		return false, refuse(syscall.EINVAL, "SET_IRQS index %d vectors [%d, +%d) beyond its %d", index, start, count, desc[index].Count)
	case dataType != IRQDataEventfd && len(fds) != 0:
		return false, refuse(syscall.EINVAL, "SET_IRQS without DATA_EVENTFD carries %d fds", len(fds))
	case dataType == IRQDataBool && len(data) != int(count):
		return false, refuse(syscall.EINVAL, "SET_IRQS DATA_BOOL with %d bytes for %d vectors", len(data), count)
	case dataType != IRQDataBool && len(data) != 0:
		return false, refuse(syscall.EINVAL, "SET_IRQS carries %d data bytes", len(data))
	case action != IRQActionTrig && desc[index].Flags&IRQMaskable == 0:
		return false, refuse(syscall.EINVAL, "SET_IRQS mask/unmask of index %d, which is not maskable", index)
	}
	t := s.irqs
	if dataType == IRQDataEventfd {
		if action != IRQActionTrig {
			return false, refuse(syscall.EINVAL, "SET_IRQS eventfds for mask/unmask (resample) are not supported")
		}
		// QEMU sends all valid or all invalid fds in one message: none deassigns the range.
		if len(fds) != 0 && len(fds) != int(count) {
			return false, refuse(syscall.EINVAL, "SET_IRQS %d fds for %d vectors", len(fds), count)
		}
		for _, fd := range fds {
			if !isEventfd(fd) {
				return false, refuse(syscall.EINVAL, "SET_IRQS fd %d is not an eventfd", fd)
			}
			if err := unix.SetNonblock(fd, true); err != nil {
				return false, refuse(syscall.EINVAL, "SET_IRQS fd %d: %v", fd, err)
			}
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		for i := range count {
			v := &t.vectors[index][start+i]
			if v.fd >= 0 {
				unix.Close(v.fd)
			}
			v.fd = -1
			if len(fds) != 0 {
				v.fd = fds[i]
			}
		}
		return len(fds) != 0, nil
	}
	if dataType == IRQDataNone && action == IRQActionTrig && count == 0 {
		// start 0 count 0: disable the whole index.
		t.mu.Lock()
		defer t.mu.Unlock()
		for j := range t.vectors[index] {
			v := &t.vectors[index][j]
			if v.fd >= 0 {
				unix.Close(v.fd)
			}
			*v = irqVector{fd: -1}
		}
		return false, nil
	}
	if count == 0 {
		return false, refuse(syscall.EINVAL, "SET_IRQS with no vectors")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range count {
		if dataType == IRQDataBool && data[i] == 0 {
			continue
		}
		v := &t.vectors[index][start+i]
		switch action {
		case IRQActionMask:
			v.masked = true
		case IRQActionUnmask:
			v.masked = false
			if v.pending {
				v.pending = false
				v.signal()
			}
		case IRQActionTrig:
			v.signal()
		}
	}
	return false, nil
}
