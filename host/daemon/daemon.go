// Package daemon is softirdma's side of the host path: the unix socket the preload library
// (host/preload) connects to, one connection per file it stands in for, and what each carries.
//
// The protocol (SOCK_SEQPACKET, one message a datagram, host byte order):
//   - A connection starts with a hello of 16 bytes: magic 0x44524953 ("SIRD"), version 1,
//     kind (1 uverbs, 2 netlink, 3 rdma_cm) and an argument (uverbs: the N of uverbsN, with
//     bit 31 set where the program is held to its RLIMIT_MEMLOCK; netlink: the socket's port id). The answer is 8 bytes: 0 or an errno, and a word; a
//     uverbs answer carries the command file (a memfd) as SCM_RIGHTS.
//   - uverbs: each message is what the program wrote, with the file it passes in (CREATE_CQ's
//     channel) as SCM_RIGHTS; the answer is write()'s result (>= 0, or -errno), the count of
//     writes and of files (u16 each), then per write its address (u64), length (u32) and file
//     index (s32; >= 0: write that file's number, 4 bytes), then the written bytes in order;
//     the files travel as SCM_RIGHTS.
//   - netlink: each message is a datagram the program sent, answered by the datagrams the
//     kernel's nldev would send back; an 8-byte message of 0xffffffff and a flags word
//     (1: NETLINK_CAP_ACK) sets the socket's options instead.
//   - A uverbs or rdma_cm answer's word is the file's token. attach (kind 5), with the token as
//     its argument, is another connection to the same file: a forked child's, whose commands
//     reach the same objects (and whose MRs are its own memory). The file ends with its last
//     connection, as the kernel's with its last reference.
//   - status (kind 6): the answer's word is, by the argument, how many programs' connections
//     are open (0: idle), the heap in use after a collection in KiB (1), or its open files (2,
//     this connection's among them). softirdma closes the connection after the answer.
//   - capture (softirdma run -pcap): the hello carries the file to write a pcap of the devices'
//     frames into, as SCM_RIGHTS; the capture runs until the client shuts its side down, and
//     softirdma closes the connection once the file holds every frame.
//
// Only the user softirdma runs as may connect (SO_PEERCRED).
package daemon

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softirdma/softirdma/host/nldev"
	"github.com/softirdma/softirdma/host/ucma"
	"github.com/softirdma/softirdma/host/ucontext"
)

// The protocol's numbers; host/preload/preload.h has the same, which a test checks.
const (
	Magic       = 0x44524953
	Version     = 1
	KindUverbs  = 1
	KindNetlink = 2
	KindRdmaCM  = 3
	KindCapture = 4
	KindAttach  = 5
	KindStatus  = 6
	// KindNetlinkKernel is a netlink socket that sees the kernel's own devices beside
	// softirdma's (softirdma run -kernel; Config.Netlink's Kernel).
	KindNetlinkKernel = 8
	// UverbsMemlock, in a uverbs hello's argument, holds the program's MRs to its
	// RLIMIT_MEMLOCK, as the kernel does (softirdma run -memlock).
	UverbsMemlock = 0x80000000
	HelloSize     = 16
	MaxMessage    = 65536
	MaxFiles      = 4
	nlControl     = 0xffffffff
	nlCapAck      = 1
	replyHeader   = 8
	writeHeader   = 16
)

// Config is what the daemon serves.
type Config struct {
	Socket  string             // the path of the socket to listen on
	Devices []*ucontext.Device // uverbsN is Devices[N-UverbsBase]
	// UverbsBase is N of the first device's uverbsN: those before it are the kernel's.
	UverbsBase uint32
	Netlink    *nldev.Table // what RDMA netlink answers
	RdmaCM     *ucma.Server // rdma_cm; nil: /dev/infiniband/rdma_cm is ENODEV
	// Capture starts a capture of the devices' frames into a file (a pcap, which it writes and
	// closes when stop returns); nil: captures are ENODEV.
	Capture func(f *os.File) (stop func(), err error)
	// Memory is how programs' memory is reached: MemoryAuto (""), MemoryService or
	// MemoryProcessVM.
	Memory string
	Log    *slog.Logger          // nil: slog's default
	OnIdle func(connections int) // called as connections come and go, with how many are open
}

// Daemon serves programs on its socket.
type Daemon struct {
	cfg Config
	ln  *net.UnixListener
	log *slog.Logger
	uid int

	mu     sync.Mutex
	conns  map[*net.UnixConn]bool // true: a program's (its hello read), not a status query or a probe
	shared map[uint32]*shared     // by token
	wg     sync.WaitGroup
	pins   pinAccounts  // the pages each process's MRs count against RLIMIT_MEMLOCK
	copies copyServices // the processes that serve their memory themselves

	closing   chan struct{} // closed by Close: what waits on no connection of its own ends
	closeOnce sync.Once
}

// memoryOf is pid's memory, reached as Config.Memory says, and whether the process is to serve
// it (the answer to its hello says so).
func (d *Daemon) memoryOf(pid int, pins *pinAccounts) (processMemory, bool) {
	m := processMemory{pid: pid, pins: pins}
	if servesItself(d.cfg.Memory, pid) {
		m.svc = &d.copies
		return m, true
	}
	return m, false
}

// serveBit is the answer's word for a token and a process that is to serve its memory.
func serveBit(token uint32, serve bool) uint32 {
	if serve {
		return token | AnswerServeMemory
	}
	return token
}

// shared is a uverbs or rdma_cm file that processes may hold after a fork: how one of them runs
// a command, and what ends the file once the last connection to it ends.
type shared struct {
	// execute runs a command of a process that holds the file, in that process's memory
	execute func(mem processMemory, buf []byte, in *os.File) ucontext.Reply
	close   func()
	hold    func(pid int)
	pins    *pinAccounts // the owner's hello asked for RLIMIT_MEMLOCK: its children's too
	refs    int
}

// share registers a file and returns its token.
func (d *Daemon) share(s *shared) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		var b [4]byte
		_, _ = crand.Read(b[:])
		// Bit 31 is the answer's AnswerServeMemory, never a token's.
		if t := binary.LittleEndian.Uint32(b[:]) &^ AnswerServeMemory; t != 0 && d.shared[t] == nil {
			s.refs = 1
			d.shared[t] = s
			return t
		}
	}
}

// release drops a connection's hold of a file, which ends with the last.
func (d *Daemon) release(token uint32) {
	d.mu.Lock()
	s := d.shared[token]
	s.refs--
	last := s.refs == 0
	if last {
		delete(d.shared, token)
	}
	d.mu.Unlock()
	if last {
		s.close()
	}
}

// serveAttach serves another process's connection to a shared file.
func (d *Daemon) serveAttach(c *net.UnixConn, p peer, token uint32) {
	d.mu.Lock()
	s := d.shared[token]
	if s != nil {
		s.refs++
	}
	d.mu.Unlock()
	if s == nil {
		_ = hello(c, syscall.ENOENT, nil)
		return
	}
	defer d.release(token)
	s.hold(p.pid)
	// How the child's memory is reached is decided once, as for a process that opens a file.
	mem, serve := d.memoryOf(p.pid, s.pins)
	if helloWith(c, 0, serveBit(0, serve), nil) != nil {
		return
	}
	d.serveCommands(c, func(buf []byte, in *os.File) ucontext.Reply { return s.execute(mem, buf, in) })
}

// Listen makes the socket (mode 0600) and returns the daemon, which serves once Serve runs.
func Listen(cfg Config) (*Daemon, error) {
	if len(cfg.Devices) == 0 || cfg.Netlink == nil {
		return nil, errors.New("daemon: no devices to serve")
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(cfg.Socket, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Daemon{cfg: cfg, ln: ln, log: log, uid: os.Getuid(), conns: map[*net.UnixConn]bool{}, shared: map[uint32]*shared{}, closing: make(chan struct{})}, nil
}

// Serve accepts connections until ctx ends or Close; it returns once every connection ended.
func (d *Daemon) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { d.Close() })
	defer stop()
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			d.closeOnce.Do(func() { close(d.closing) })
			d.closeConns()
			d.wg.Wait()
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		d.track(c, true)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer d.track(c, false)
			defer c.Close()
			d.serveConn(c)
		}()
	}
}

// Close stops accepting and ends every connection.
func (d *Daemon) Close() error {
	err := d.ln.Close()
	d.closeOnce.Do(func() { close(d.closing) })
	d.closeConns()
	return err
}

func (d *Daemon) closeConns() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.conns {
		c.Close()
	}
}

func (d *Daemon) track(c *net.UnixConn, open bool) {
	d.mu.Lock()
	if open {
		d.conns[c] = false
	} else {
		delete(d.conns, c)
	}
	n := len(d.conns)
	d.mu.Unlock()
	if d.cfg.OnIdle != nil {
		d.cfg.OnIdle(n)
	}
}

// peer is the process at the other end of a connection.
type peer struct {
	pid, uid int
}

func peerOf(c *net.UnixConn) (peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{}, err
	}
	if cerr != nil {
		return peer{}, cerr
	}
	return peer{pid: int(cred.Pid), uid: int(cred.Uid)}, nil
}

// serveConn reads the hello and serves the connection's kind.
func (d *Daemon) serveConn(c *net.UnixConn) {
	p, err := peerOf(c)
	if err != nil || p.uid != d.uid {
		d.log.Warn("connection refused: not this user's", "uid", p.uid, "err", err)
		return
	}
	buf := make([]byte, MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4*MaxFiles))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	files := receivedFiles(oob[:oobn])
	if err != nil || n != HelloSize {
		closeAll(files)
		return
	}
	if kind := binary.LittleEndian.Uint32(buf[8:]); kind != KindCapture {
		closeAll(files) // only a capture's hello carries a file
		files = nil
	}
	le := binary.LittleEndian
	magic, version, kind, arg := le.Uint32(buf), le.Uint32(buf[4:]), le.Uint32(buf[8:]), le.Uint32(buf[12:])
	if magic != Magic || version != Version {
		closeAll(files)
		d.log.Warn("connection refused: not a preload library of this version", "pid", p.pid, "magic", magic, "version", version)
		_ = hello(c, syscall.EPROTO, nil)
		return
	}
	if kind != KindStatus {
		d.mu.Lock()
		d.conns[c] = true
		d.mu.Unlock()
	}
	switch kind {
	case KindUverbs:
		d.serveUverbs(c, p, arg)
	case KindNetlink, KindNetlinkKernel:
		d.serveNetlink(c, nldev.Socket{PortID: arg, Join: kind == KindNetlinkKernel})
	case KindRdmaCM:
		d.serveRdmaCM(c, p)
	case KindCapture:
		d.serveCapture(c, files)
	case KindAttach:
		d.serveAttach(c, p, arg)
	case KindMemory:
		if hello(c, 0, nil) == nil {
			d.copies.serve(p.pid, c, d.closing)
		}
	case KindStatus:
		_ = helloWith(c, 0, d.status(arg), nil)
	default:
		_ = hello(c, syscall.ENODEV, nil)
	}
}

// What a status hello's argument asks for; the answer's word is its value.
const (
	StatusConnections = 0 // the programs' connections open (0: idle); status queries are none
	StatusHeapKiB     = 1 // the heap in use after a collection, in KiB
	StatusFiles       = 2 // the daemon's open file descriptors
)

// status answers a status hello: what arg asks for, 0 for what it does not know.
func (d *Daemon) status(arg uint32) uint32 {
	switch arg {
	case StatusConnections:
		d.mu.Lock()
		defer d.mu.Unlock()
		n := 0
		for _, program := range d.conns {
			if program {
				n++
			}
		}
		return uint32(n)
	case StatusHeapKiB:
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return uint32(min(m.HeapAlloc>>10, math.MaxUint32))
	case StatusFiles:
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return 0
		}
		return uint32(len(fds) - 1) // the directory's own
	}
	return 0
}

// Hello is the hello a client of kind sends, with its argument.
func Hello(kind, arg uint32) []byte {
	b := make([]byte, HelloSize)
	for i, v := range []uint32{Magic, Version, kind, arg} {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// ReadAnswer reads softirdma's answer to a hello: the answer's word, or the errno it refused
// the hello with.
func ReadAnswer(r io.Reader) (uint32, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	if e := binary.LittleEndian.Uint32(b[:]); e != 0 {
		return 0, syscall.Errno(e)
	}
	return binary.LittleEndian.Uint32(b[4:]), nil
}

// hello answers a hello: errno (0: accepted) and the file it hands over, if any.
func hello(c *net.UnixConn, errno syscall.Errno, f *os.File) error {
	return helloWith(c, errno, 0, f)
}

// helloWith is hello with the answer's word (a shared file's token).
func helloWith(c *net.UnixConn, errno syscall.Errno, word uint32, f *os.File) error {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:], uint32(errno))
	binary.LittleEndian.PutUint32(b[4:], word)
	var oob []byte
	if f != nil {
		oob = unix.UnixRights(int(f.Fd()))
	}
	_, _, err := c.WriteMsgUnix(b[:], oob, nil)
	return err
}

func (d *Daemon) serveNetlink(c *net.UnixConn, sock nldev.Socket) {
	if hello(c, 0, nil) != nil {
		return
	}
	buf := make([]byte, MaxMessage)
	for {
		n, _, _, _, err := c.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return
		}
		msg := buf[:n]
		if n == 8 && binary.LittleEndian.Uint32(msg) == nlControl {
			sock.CapAck = binary.LittleEndian.Uint32(msg[4:])&nlCapAck != 0
			continue
		}
		for _, out := range d.cfg.Netlink.Answer(msg, sock) {
			if _, _, err := c.WriteMsgUnix(out, nil, nil); err != nil {
				return
			}
		}
	}
}

func (d *Daemon) serveUverbs(c *net.UnixConn, p peer, arg uint32) {
	index := arg &^ UverbsMemlock
	if index < d.cfg.UverbsBase || int(index-d.cfg.UverbsBase) >= len(d.cfg.Devices) {
		_ = hello(c, syscall.ENODEV, nil)
		return
	}
	var pins *pinAccounts
	if arg&UverbsMemlock != 0 {
		pins = &d.pins
	}
	name := fmt.Sprintf("pid %d", p.pid)
	mem, serve := d.memoryOf(p.pid, pins)
	uc, file, err := ucontext.New(d.cfg.Devices[index-d.cfg.UverbsBase], mem, name, p.pid)
	if err != nil {
		d.log.Warn("uverbs context", "program", name, "err", err)
		_ = hello(c, syscall.ENOMEM, nil)
		return
	}
	token := d.share(&shared{close: uc.Close, hold: uc.Hold, pins: pins,
		execute: func(mem processMemory, buf []byte, in *os.File) ucontext.Reply { return uc.ExecuteIn(mem, buf, in) }})
	defer d.release(token)
	if serve {
		d.log.Info("the program serves its memory (copy service)", "program", name)
	}
	if helloWith(c, 0, serveBit(token, serve), file) != nil { // file is the context's own: it stays open
		return
	}
	d.serveCommands(c, uc.Execute)
}

func (d *Daemon) serveCapture(c *net.UnixConn, files []*os.File) {
	if d.cfg.Capture == nil || len(files) != 1 {
		closeAll(files)
		_ = hello(c, syscall.ENODEV, nil)
		return
	}
	stop, err := d.cfg.Capture(files[0])
	if err != nil {
		files[0].Close()
		_ = hello(c, syscall.EIO, nil)
		return
	}
	if hello(c, 0, nil) == nil {
		var b [1]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				break
			}
		}
	}
	stop()
}

func (d *Daemon) serveRdmaCM(c *net.UnixConn, p peer) {
	if d.cfg.RdmaCM == nil {
		_ = hello(c, syscall.ENODEV, nil)
		return
	}
	mem, serve := d.memoryOf(p.pid, nil)
	f, file, err := d.cfg.RdmaCM.Open(p.pid, mem)
	if err != nil {
		d.log.Warn("rdma_cm file", "pid", p.pid, "err", err)
		_ = hello(c, syscall.ENOMEM, nil)
		return
	}
	token := d.share(&shared{close: f.Close, hold: func(int) {},
		execute: func(mem processMemory, buf []byte, in *os.File) ucontext.Reply {
			return f.ExecuteBy(mem.pid, mem, buf, in)
		}})
	defer d.release(token)
	err = helloWith(c, 0, serveBit(token, serve), file)
	file.Close()
	if err != nil {
		return
	}
	d.serveCommands(c, f.Execute)
}

// serveCommands runs the commands that come on a connection until it ends.
func (d *Daemon) serveCommands(c *net.UnixConn, execute func([]byte, *os.File) ucontext.Reply) {
	buf := make([]byte, MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4*MaxFiles))
	for {
		n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		in := receivedFiles(oob[:oobn])
		var reply ucontext.Reply
		if flags&unix.MSG_TRUNC != 0 {
			reply = ucontext.Reply{Ret: -int32(syscall.EINVAL)}
		} else {
			reply = execute(buf[:n], first(in))
		}
		closeAll(in)
		err = sendReply(c, reply)
		closeAll(reply.Files)
		if err != nil {
			return
		}
	}
}

func receivedFiles(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files
}

func first(files []*os.File) *os.File {
	if len(files) == 0 {
		return nil
	}
	return files[0]
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// sendReply encodes a command's reply as the preload library reads it.
func sendReply(c *net.UnixConn, r ucontext.Reply) error {
	le := binary.LittleEndian
	b := make([]byte, replyHeader, replyHeader+len(r.Writes)*writeHeader)
	le.PutUint32(b, uint32(r.Ret))
	le.PutUint16(b[4:], uint16(len(r.Writes)))
	le.PutUint16(b[6:], uint16(len(r.Files)))
	for _, w := range r.Writes {
		var h [writeHeader]byte
		le.PutUint64(h[:], w.Addr)
		n := len(w.Data)
		if w.File >= 0 {
			n = 4
		}
		le.PutUint32(h[8:], uint32(n))
		le.PutUint32(h[12:], uint32(int32(w.File)))
		b = append(b, h[:]...)
	}
	for _, w := range r.Writes {
		if w.File < 0 {
			b = append(b, w.Data...)
		}
	}
	var oob []byte
	if len(r.Files) > 0 {
		fds := make([]int, len(r.Files))
		for i, f := range r.Files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(b, oob, nil)
	return err
}
