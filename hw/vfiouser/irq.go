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
			vs[j].reset()
		}
	}
}

// close closes v's eventfd, if it has one. Called with mu held.
func (v *irqVector) close() {
	if v.fd >= 0 {
		unix.Close(v.fd)
	}
	v.fd = -1
}

// reset closes v's eventfd and clears its mask: a vector no client set up. Called with mu held.
func (v *irqVector) reset() {
	v.close()
	*v = irqVector{fd: -1}
}

// isEventfd says whether fd is an eventfd: any other file (a full pipe, a socket) could
// block or misbehave when Trigger writes to it.
func isEventfd(fd int) bool {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err == nil && target == "anon_inode:[eventfd]"
}

// setIRQs handles DEVICE_SET_IRQS, whose body m holds (its data, DATA_BOOL's bytes, after the
// fixed part); fds are the message's descriptors, which setIRQs either keeps in the table or
// leaves to the caller to close (it says whether it kept them: all or none).
func (s *Server) setIRQs(m irqSetMsg, fds []int) (kept bool, err error) {
	flags, index, start, count, data := m.flags(), m.index(), m.start(), m.count(), m.data()
	if err := s.checkSetIRQs(flags, index, start, count, len(data), len(fds)); err != nil {
		return false, err
	}
	t := s.irqs
	switch dataType, action := flags&irqDataMask, flags&irqActionMask; {
	case dataType == IRQDataEventfd:
		if action != IRQActionTrig {
			return false, refuse(syscall.EINVAL, "SET_IRQS eventfds for mask/unmask (resample) are not supported")
		}
		return t.assign(index, start, count, fds)
	case dataType == IRQDataNone && action == IRQActionTrig && count == 0:
		t.disable(index) // start 0 count 0: disable the whole index
		return false, nil
	case count == 0:
		return false, refuse(syscall.EINVAL, "SET_IRQS with no vectors")
	default:
		t.apply(action, index, start, count, data, dataType == IRQDataBool)
		return false, nil
	}
}

// checkSetIRQs checks SET_IRQS's flags, range and what comes with it against the IRQ indices.
func (s *Server) checkSetIRQs(flags, index, start, count uint32, ndata, nfds int) error {
	desc := s.desc.IRQs
	dataType, action := flags&irqDataMask, flags&irqActionMask
	switch {
	case flags&^(irqDataMask|irqActionMask) != 0:
		return refuse(syscall.EINVAL, "SET_IRQS flags 0x%x", flags)
	case dataType != IRQDataNone && dataType != IRQDataBool && dataType != IRQDataEventfd:
		return refuse(syscall.EINVAL, "SET_IRQS flags 0x%x: not one data type", flags)
	case action != IRQActionMask && action != IRQActionUnmask && action != IRQActionTrig:
		return refuse(syscall.EINVAL, "SET_IRQS flags 0x%x: not one action", flags)
	case int(index) >= len(desc) || desc[index].Count == 0:
		return refuse(syscall.EINVAL, "SET_IRQS index %d: no such IRQ", index)
	case uint64(start)+uint64(count) > uint64(desc[index].Count):
		return refuse(syscall.EINVAL, "SET_IRQS index %d vectors [%d, +%d) beyond its %d", index, start, count, desc[index].Count)
	case dataType != IRQDataEventfd && nfds != 0:
		return refuse(syscall.EINVAL, "SET_IRQS without DATA_EVENTFD carries %d fds", nfds)
	case dataType == IRQDataBool && ndata != int(count):
		return refuse(syscall.EINVAL, "SET_IRQS DATA_BOOL with %d bytes for %d vectors", ndata, count)
	case dataType != IRQDataBool && ndata != 0:
		return refuse(syscall.EINVAL, "SET_IRQS carries %d data bytes", ndata)
	case action != IRQActionTrig && desc[index].Flags&IRQMaskable == 0:
		return refuse(syscall.EINVAL, "SET_IRQS mask/unmask of index %d, which is not maskable", index)
	}
	return nil
}

// assign gives vectors [start, +count) of index the eventfds fds, closing those they had; no
// fds deassigns the range. QEMU sends all valid or all invalid fds in one message. It says
// whether it kept fds.
func (t *irqTable) assign(index, start, count uint32, fds []int) (kept bool, err error) {
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
		v.close()
		if len(fds) != 0 {
			v.fd = fds[i]
		}
	}
	return len(fds) != 0, nil
}

// disable closes every eventfd of index and clears its masks.
func (t *irqTable) disable(index uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for j := range t.vectors[index] {
		t.vectors[index][j].reset()
	}
}

// apply masks, unmasks or triggers vectors [start, +count) of index: with DATA_BOOL (bools)
// only those whose byte in data is not 0.
func (t *irqTable) apply(action, index, start, count uint32, data []byte, bools bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range count {
		if bools && data[i] == 0 {
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
}
