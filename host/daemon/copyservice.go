package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// How softirdma reaches programs' memory (Config.Memory).
const (
	// MemoryAuto tries process_vm_readv on each program when it opens a device, and has the
	// programs it cannot reach that way serve their memory themselves (the copy service).
	MemoryAuto = "auto"
	// MemoryService has every program serve its memory.
	MemoryService = "service"
	// MemoryProcessVM reaches every program with process_vm_readv and process_vm_writev.
	MemoryProcessVM = "process_vm"
)

// The copy service's numbers (host/preload/memory.c has the same, which a test checks).
const (
	// KindMemory is the connection a process serves its memory on.
	KindMemory = 7
	// AnswerServeMemory, in the answer to a uverbs, rdma_cm or attach hello, asks the process
	// to serve its memory: softirdma cannot reach it itself.
	AnswerServeMemory = 0x80000000
	memRead           = 1
	memWrite          = 2
	memReqHeader      = 16 // op u32, len u32, addr u64
	memReplyHeader    = 8  // err s32, len u32
	// memChunk is the most one request moves: a message of MaxMessage with its header.
	memChunk = MaxMessage - memReqHeader
	// memTimeoutDefault bounds one request: a program that does not answer (stopped, or gone
	// without closing) fails the copy, and the work that needed it, rather than holding up
	// the device for every other program.
	memTimeoutDefault = 2 * time.Second
)

// memTimeout is memTimeoutDefault; tests shorten it.
var memTimeout = memTimeoutDefault

// errNoService is a copy that found no copy service for its process.
var errNoService = errors.New("the program serves no copy service")

// copyServices are the connections of the processes that serve their own memory, by pid.
type copyServices struct {
	mu   sync.Mutex
	by   map[int]*copyService
	wait map[int]chan struct{} // closed when the pid's service connects
}

// copyService is one process's: one request at a time.
type copyService struct {
	mu   sync.Mutex
	c    *net.UnixConn
	buf  []byte
	done chan struct{} // closed when the connection is given up
	once sync.Once
}

func (s *copyService) close() {
	s.once.Do(func() {
		close(s.done)
		// Closing waits for the watcher's poll to return (up to 200 ms): the copy that failed
		// and gives the service up need not.
		go s.c.Close()
	})
}

// serve registers pid's service on c and returns once it ends: softirdma gave it up, the
// process closed it (or ended), or the daemon closes (closing).
func (cs *copyServices) serve(pid int, c *net.UnixConn, closing <-chan struct{}) {
	s := &copyService{c: c, buf: make([]byte, MaxMessage), done: make(chan struct{})}
	go s.watch(closing)
	cs.mu.Lock()
	if cs.by == nil {
		cs.by, cs.wait = map[int]*copyService{}, map[int]chan struct{}{}
	}
	if old := cs.by[pid]; old != nil {
		old.close()
	}
	cs.by[pid] = s
	if w := cs.wait[pid]; w != nil {
		close(w)
		delete(cs.wait, pid)
	}
	cs.mu.Unlock()
	<-s.done
	cs.mu.Lock()
	if cs.by[pid] == s {
		delete(cs.by, pid)
	}
	cs.mu.Unlock()
}

// watch gives the service up when its process hangs up or the daemon closes. It looks for the
// hang-up with poll's POLLRDHUP, which answers in flight do not raise: reading would take them
// from the copy that waits for them.
func (s *copyService) watch(closing <-chan struct{}) {
	raw, err := s.c.SyscallConn()
	if err != nil {
		s.close()
		return
	}
	for {
		select {
		case <-s.done:
			return
		case <-closing:
			s.close()
			return
		default:
		}
		hup := false
		cerr := raw.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
			if n, err := unix.Poll(fds, 200); err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				hup = true
			}
		})
		if cerr != nil || hup {
			s.close()
			return
		}
	}
}

// get is pid's service, waited for up to memTimeout: the library starts it as the device's
// hello is answered, and the first copy may come before it has connected.
func (cs *copyServices) get(pid int) (*copyService, error) {
	deadline := time.NewTimer(memTimeout)
	defer deadline.Stop()
	for {
		cs.mu.Lock()
		if cs.by == nil {
			cs.by, cs.wait = map[int]*copyService{}, map[int]chan struct{}{}
		}
		s := cs.by[pid]
		w := cs.wait[pid]
		if s == nil && w == nil {
			w = make(chan struct{})
			cs.wait[pid] = w
		}
		cs.mu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-w:
		case <-deadline.C:
			return nil, fmt.Errorf("pid %d: %w", pid, errNoService)
		}
	}
}

// move copies p from (write: to) the process's memory at addr, in chunks of a message each.
func (s *copyService) move(p []byte, addr uint64, write bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(p) > 0 {
		n := min(len(p), memChunk)
		req := s.buf[:memReqHeader]
		op := uint32(memRead)
		if write {
			op = memWrite
		}
		binary.LittleEndian.PutUint32(req, op)
		binary.LittleEndian.PutUint32(req[4:], uint32(n))
		binary.LittleEndian.PutUint64(req[8:], addr)
		msg := req
		if write {
			msg = append(req, p[:n]...)
		}
		_ = s.c.SetDeadline(time.Now().Add(memTimeout))
		if _, err := s.c.Write(msg); err != nil {
			s.close()
			return fmt.Errorf("copy service: %w", err)
		}
		got, err := s.c.Read(s.buf)
		if err != nil || got < memReplyHeader {
			s.close()
			return fmt.Errorf("copy service: answer of %d bytes: %v", got, err)
		}
		if e := int32(binary.LittleEndian.Uint32(s.buf)); e != 0 {
			return fmt.Errorf("copy service at 0x%x: %w", addr, syscall.Errno(e))
		}
		moved := int(binary.LittleEndian.Uint32(s.buf[4:]))
		if !write {
			moved = min(moved, got-memReplyHeader, n)
			copy(p, s.buf[memReplyHeader:memReplyHeader+moved])
		}
		if moved <= 0 || moved > n {
			return fmt.Errorf("copy service at 0x%x: %d of %d bytes: %w", addr, moved, n, syscall.EFAULT)
		}
		p = p[moved:]
		addr += uint64(moved)
	}
	return nil
}

// servesItself says whether pid must serve its own memory: always (MemoryService), never
// (MemoryProcessVM), or when process_vm_readv cannot reach it (MemoryAuto): a seccomp filter
// that denies the call (EPERM, as Docker's default profile does), a process softirdma cannot
// see (ESRCH: another pid namespace) or may not read (EPERM: Yama). The probe reads address
// 0: EFAULT says the process is reachable.
func servesItself(mode string, pid int) bool {
	switch mode {
	case MemoryService:
		return true
	case MemoryProcessVM:
		return false
	}
	var b [1]byte
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(1)
	_, err := unix.ProcessVMReadv(pid, local, []unix.RemoteIovec{{Base: 0, Len: 1}}, 0)
	return !errors.Is(err, syscall.EFAULT)
}
