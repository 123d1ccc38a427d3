package ucontext

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/host/uverbs"
	"github.com/softirdma/softirdma/keys"
)

// Device is an RDMA device as host programs see it: the engine that runs it and what its
// queries report. Programs share it, as they share a kernel's device.
type Device struct {
	Engine   *engine.Device
	NodeGUID uint64       // in host order
	GIDs     []netip.Addr // port 1's GID table; the zero Addr is an unused entry
	Log      *slog.Logger // nil: slog's default

	owners owners
}

func (d *Device) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

// Reply is what a command gives back: write()'s result and what the kernel would have written
// into the program.
type Reply struct {
	Ret    int32 // the bytes write() returns, or a negative errno
	Writes []Write
	Files  []*os.File // files to install in the program; the carrier closes its copies
}

// Write is bytes to write at Addr in the program, or (File >= 0) the number the program's copy
// of Files[File] gets, as a 4-byte integer.
type Write struct {
	Addr uint64
	Data []byte
	File int
}

// Context is one program's open uverbs device. Its methods are safe for concurrent use.
type Context struct {
	dev  *Device
	mem  keys.Copier
	name string // for the log: the program

	mu     sync.Mutex // the objects' tables, the queue area
	opened bool       // GET_CONTEXT ran
	closed bool
	area   *area
	next   uint32 // the last handle given out
	pds    map[uint32]*pd
	mrs    map[uint32]*mr
	mws    map[uint32]*mw
	ahs    map[uint32]*ah
	cqs    map[uint32]*cq
	qps    map[uint32]*qp
	srqs   map[uint32]*srq
	chans  []*channel
	async  atomic.Pointer[channel]
	// lookups guards mrs, mws and ahs for the send path, which looks them up (a bind's MR and
	// window, a UD send's AH) without mu: a doorbell never waits for a command. Changes to
	// them hold both.
	lookups sync.RWMutex

	// owners are the processes that hold the context (its maker, and children it forked that
	// kept it): rdma_cm finds a program's QPs by them.
	ownersMu sync.Mutex
	holders  map[int]bool

	asyncSentMu sync.Mutex
	asyncSent   map[uint64]uint32 // async events sent, by element
	refused     int
}

// New is a context for a program (owner, its pid) whose memory mem reaches; file is its
// command file, which New makes (a memfd: the queues live there).
func New(dev *Device, mem keys.Copier, name string, owner int) (*Context, *os.File, error) {
	a, err := newArea(name)
	if err != nil {
		return nil, nil, err
	}
	c := &Context{dev: dev, mem: mem, name: name, area: a,
		pds: map[uint32]*pd{}, mrs: map[uint32]*mr{}, mws: map[uint32]*mw{}, ahs: map[uint32]*ah{},
		cqs: map[uint32]*cq{}, qps: map[uint32]*qp{}, srqs: map[uint32]*srq{}, asyncSent: map[uint64]uint32{},
		holders: map[int]bool{owner: true}}
	dev.joined(c, true)
	return c, a.file, nil
}

// errnoOf is the errno a command's error is refused with.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return syscall.EINVAL
}

func errf(errno syscall.Errno, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errno)
}

// Hold records another process that holds the context: a child the program forked, whose
// commands reach the same objects, as the kernel's do after fork.
func (c *Context) Hold(pid int) {
	c.ownersMu.Lock()
	defer c.ownersMu.Unlock()
	c.holders[pid] = true
}

func (c *Context) heldBy(pid int) bool {
	c.ownersMu.Lock()
	defer c.ownersMu.Unlock()
	return c.holders[pid]
}

// request is one command being run: the decoded command and what it answers.
type request struct {
	uverbs.Command
	in     *os.File    // a file the command passed in (CREATE_CQ's channel)
	mem    keys.Copier // the memory of the process that wrote the command: its MRs are there
	resp   []byte      // the core response, Method.Resp bytes
	driver []byte      // the driver's response
	writes []Write     // more writes (MODIFY_SRQ's mmap info)
	files  []fileAt    // fds to install, at offsets of the core response
}

type fileAt struct {
	off  int
	file *os.File
}

// u32 and u64 read the core request; past what the program wrote they read zeros, as the
// kernel's uverbs_request zero-extends a short core.
func (r *request) u32(off int) uint32 {
	if off+4 > len(r.Core) {
		return 0
	}
	return binary.LittleEndian.Uint32(r.Core[off:])
}

func (r *request) u64(off int) uint64 {
	if off+8 > len(r.Core) {
		return 0
	}
	return binary.LittleEndian.Uint64(r.Core[off:])
}

// Execute runs one command the program wrote, with the file it passed in (nil if none).
func (c *Context) Execute(buf []byte, in *os.File) Reply { return c.ExecuteIn(c.mem, buf, in) }

// ExecuteIn is Execute for a command of a process whose memory mem reaches: after a fork, an
// MR a child registers is the child's memory, as the kernel pins the pages of the process
// that registers them.
func (c *Context) ExecuteIn(mem keys.Copier, buf []byte, in *os.File) Reply {
	cmd, errno := uverbs.Decode(buf)
	if errno != 0 {
		return c.refuse(cmd, errno, "malformed")
	}
	r := &request{Command: cmd, in: in, mem: mem, resp: make([]byte, cmd.Method.Resp)}
	if err := c.runGuarded(r); err != nil {
		return c.refuse(cmd, errnoOf(err), err.Error())
	}
	return r.reply(len(buf))
}

func (c *Context) refuse(cmd uverbs.Command, errno syscall.Errno, why string) Reply {
	c.mu.Lock()
	c.refused++
	c.mu.Unlock()
	c.dev.log().Info("uverbs command refused", "program", c.name, "command", cmd.Method.Name, "num", cmd.Num, "errno", errno.Error(), "why", why)
	return Reply{Ret: -int32(errno)}
}

// runGuarded runs a command under the context's lock. A command that crashes its handler is
// a bug of softirdma's, not the program's: it is logged with its stack and refused with
// EINVAL, and the context and the other programs go on.
func (c *Context) runGuarded(r *request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			c.dev.log().Error("uverbs command crashed", "program", c.name, "command", r.Method.Name, "panic", p, "stack", string(debug.Stack()))
			err = errf(syscall.EINVAL, "%s crashed", r.Method.Name)
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run(r)
}

// reply is the command's result: its response written where the program asked (the core part
// zero-filled to the length it gave, as the kernel's uverbs_response does) and its files.
func (r *request) reply(n int) Reply {
	out := Reply{Ret: int32(n)}
	if r.Response != 0 {
		core := make([]byte, r.CoreOut)
		copy(core, r.resp)
		out.Writes = append(out.Writes, Write{Addr: r.Response, Data: core, File: -1})
		if d := min(len(r.driver), r.DriverOut); d > 0 {
			out.Writes = append(out.Writes, Write{Addr: r.Response + uint64(r.CoreOut), Data: r.driver[:d], File: -1})
		}
		for _, f := range r.files {
			if f.off+4 <= r.CoreOut {
				out.Writes = append(out.Writes, Write{Addr: r.Response + uint64(f.off), File: len(out.Files)})
				out.Files = append(out.Files, f.file)
			}
		}
	}
	out.Writes = append(out.Writes, r.writes...)
	return out
}

// run runs a checked command. c.mu is held.
func (c *Context) run(r *request) error {
	if c.closed {
		return errf(syscall.EIO, "the context is closed")
	}
	if r.Num == uverbs.CmdGetContext {
		return c.getContext(r)
	}
	if !c.opened {
		return errf(syscall.EINVAL, "%s before GET_CONTEXT", r.Method.Name)
	}
	h, ok := handlers[r.Num]
	if !ok {
		return errf(syscall.EOPNOTSUPP, "%s is not supported", r.Method.Name)
	}
	return h(c, r)
}

var handlers map[uint32]func(*Context, *request) error

func init() {
	handlers = map[uint32]func(*Context, *request) error{
		uverbs.CmdQueryDevice:       (*Context).queryDevice,
		uverbs.CmdExQueryDevice:     (*Context).queryDeviceEx,
		uverbs.CmdQueryPort:         (*Context).queryPort,
		uverbs.CmdAllocPD:           (*Context).allocPD,
		uverbs.CmdDeallocPD:         (*Context).deallocPD,
		uverbs.CmdRegMR:             (*Context).regMR,
		uverbs.CmdDeregMR:           (*Context).deregMR,
		uverbs.CmdAllocMW:           (*Context).allocMW,
		uverbs.CmdDeallocMW:         (*Context).deallocMW,
		uverbs.CmdCreateAH:          (*Context).createAH,
		uverbs.CmdDestroyAH:         (*Context).destroyAH,
		uverbs.CmdCreateCompChannel: (*Context).createCompChannel,
		uverbs.CmdCreateCQ:          (*Context).createCQ,
		uverbs.CmdExCreateCQ:        (*Context).createCQEx,
		uverbs.CmdResizeCQ:          (*Context).resizeCQ,
		uverbs.CmdDestroyCQ:         (*Context).destroyCQ,
		uverbs.CmdReqNotifyCQ:       (*Context).reqNotifyCQ,
		uverbs.CmdCreateQP:          (*Context).createQP,
		uverbs.CmdExCreateQP:        (*Context).createQPEx,
		uverbs.CmdQueryQP:           (*Context).queryQP,
		uverbs.CmdModifyQP:          (*Context).modifyQP,
		uverbs.CmdDestroyQP:         (*Context).destroyQP,
		uverbs.CmdPostSend:          (*Context).postSend,
		uverbs.CmdAttachMcast:       (*Context).attachMcast,
		uverbs.CmdDetachMcast:       (*Context).detachMcast,
		uverbs.CmdCreateSRQ:         (*Context).createSRQ,
		uverbs.CmdModifySRQ:         (*Context).modifySRQ,
		uverbs.CmdQuerySRQ:          (*Context).querySRQ,
		uverbs.CmdDestroySRQ:        (*Context).destroySRQ,
	}
}

// handle is the next object handle: never 0, never one in use.
func (c *Context) handle() uint32 {
	c.next++
	if c.next == 0 {
		c.next = 1
	}
	return c.next
}

// Close destroys everything the program left, as the kernel does when the last copy of its
// command file closes: QPs first, then what they used.
func (c *Context) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.dev.joined(c, false)
	for h, q := range c.qps {
		q.destroy()
		c.dev.disown(ownQP, q.emu.Num())
		delete(c.qps, h)
	}
	for h, s := range c.srqs {
		s.destroy()
		c.dev.disown(ownSRQ, s.emu.Num())
		delete(c.srqs, h)
	}
	for h, q := range c.cqs {
		_ = q.destroy()
		c.dev.disown(ownCQ, q.emu.Num())
		delete(c.cqs, h)
	}
	c.lookups.Lock()
	for h, w := range c.mws {
		_ = w.mw.Dealloc()
		delete(c.mws, h)
	}
	for h, m := range c.mrs {
		_ = m.mr.Dereg()
		m.unpin()
		delete(c.mrs, h)
	}
	clear(c.ahs)
	c.lookups.Unlock()
	clear(c.pds)
	for _, ch := range c.chans {
		ch.close()
	}
	if a := c.async.Load(); a != nil {
		a.close()
	}
	c.area.close()
}

// Refused is how many commands the context refused.
func (c *Context) Refused() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}
