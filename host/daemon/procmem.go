package daemon

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// processMemory is a program's memory as its MRs reach it: copied in and out with
// process_vm_readv and process_vm_writev, which an ordinary user may do to its own processes,
// or by the process itself where softirdma cannot (the copy service).
// Nothing is pinned: memory the program unmaps fails the copy, and the work that needed it.
type processMemory struct {
	pid  int
	pins *pinAccounts  // nil: RLIMIT_MEMLOCK is not held
	svc  *copyServices // non-nil: the process serves its memory itself (copyservice.go)
}

// pinAccounts are the pages each process's MRs count against its RLIMIT_MEMLOCK, where
// softirdma holds programs to it (run -memlock) as the kernel's ib_umem_get holds them: per
// process (the kernel's mm->pinned_vm), an MR past the limit refused with ENOMEM unless the
// process has CAP_IPC_LOCK. Nothing is pinned; the limit is what a program meets on Linux.
type pinAccounts struct {
	mu     sync.Mutex
	pinned map[int]uint64
}

// Pin counts pages against the process's limit.
func (m processMemory) Pin(pages uint64) error {
	a := m.pins
	if a == nil {
		return nil
	}
	var lim unix.Rlimit
	if err := unix.Prlimit(m.pid, unix.RLIMIT_MEMLOCK, nil, &lim); err != nil {
		return fmt.Errorf("pid %d's RLIMIT_MEMLOCK: %w", m.pid, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pinned == nil {
		a.pinned = map[int]uint64{}
	}
	total := a.pinned[m.pid] + pages
	if lim.Cur != unix.RLIM_INFINITY && total > lim.Cur/pageSize && !capIPCLock(m.pid) {
		return fmt.Errorf("pid %d: %d pages locked with these %d, RLIMIT_MEMLOCK allows %d: %w",
			m.pid, total, pages, lim.Cur/pageSize, syscall.ENOMEM)
	}
	a.pinned[m.pid] = total
	return nil
}

// Unpin gives pages back.
func (m processMemory) Unpin(pages uint64) {
	a := m.pins
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if left := a.pinned[m.pid] - min(pages, a.pinned[m.pid]); left > 0 {
		a.pinned[m.pid] = left
	} else {
		delete(a.pinned, m.pid)
	}
}

// pageSize is the kernel's page: RLIMIT_MEMLOCK counts in them.
const pageSize = 4096

// capIPCLock says whether the process's effective capabilities hold CAP_IPC_LOCK, which lifts
// the limit (the kernel's capable(CAP_IPC_LOCK)).
func capIPCLock(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && caps&(1<<unix.CAP_IPC_LOCK) != 0
		}
	}
	return false
}

func (m processMemory) ReadAt(p []byte, addr uint64) error {
	return m.move(p, addr, false)
}

func (m processMemory) WriteAt(p []byte, addr uint64) error {
	return m.move(p, addr, true)
}

func (m processMemory) move(p []byte, addr uint64, write bool) error {
	if m.svc != nil {
		s, err := m.svc.get(m.pid)
		if err != nil {
			return err
		}
		return s.move(p, addr, write)
	}
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
