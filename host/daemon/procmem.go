package daemon

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// processMemory is a program's memory as its MRs reach it: copied in and out with
// process_vm_readv and process_vm_writev, which an ordinary user may do to its own processes.
// Nothing is pinned: memory the program unmaps fails the copy, and the work that needed it.
type processMemory struct {
	pid int
}

func (m processMemory) ReadAt(p []byte, addr uint64) error {
	return m.move(p, addr, false)
}

func (m processMemory) WriteAt(p []byte, addr uint64) error {
	return m.move(p, addr, true)
}

func (m processMemory) move(p []byte, addr uint64, write bool) error {
	for len(p) > 0 {
		local := []unix.Iovec{{Base: &p[0]}}
		local[0].SetLen(len(p))
		remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}
		var n int
		var err error
		if write {
			n, err = unix.ProcessVMWritev(m.pid, local, remote, 0)
		} else {
			n, err = unix.ProcessVMReadv(m.pid, local, remote, 0)
		}
		if err != nil {
			return fmt.Errorf("pid %d memory at 0x%x: %w", m.pid, addr, err)
		}
		if n == 0 {
			return fmt.Errorf("pid %d memory at 0x%x: %w", m.pid, addr, syscall.EFAULT)
		}
		p = p[n:]
		addr += uint64(n)
	}
	return nil
}
