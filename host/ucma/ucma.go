// Package ucma serves the kernel's rdma_cm user ABI (/dev/infiniband/rdma_cm, ucma.c) in user
// space: the write() commands librdmacm sends and the events it reads back with GET_EVENT, on
// softirdma's connection manager (emu/rdmacm) for programs whose QPs host/ucontext serves. As
// with the kernel, rdma_cm never moves a program's QP: it says where to (INIT_QP_ATTR) and
// librdmacm moves it.
//
// librdmacm's start-up probe of AF_IB (a BIND of a sockaddr_ib) is refused with EAFNOSUPPORT, so
// it speaks the IP family of commands (BIND_IP, RESOLVE_IP, QUERY_ROUTE), which kernels before
// AF_IB spoke too.
package ucma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/host/ucontext"
	"github.com/softirdma/softirdma/keys"
)

// Device is an RDMA device as rdma_cm sees it.
type Device struct {
	Verbs    *ucontext.Device
	Manager  *rdmacm.Manager
	Index    uint32 // its netlink device index, which librdmacm matches
	NodeGUID uint64 // in host order
	// Owns says whether an address is the device's own (its GIDs, 127.0.0.0/8): rdma_cm binds
	// to it, and reaches it from itself.
	Owns func(netip.Addr) bool
	// Reach, if set, says from which of its addresses the device reaches an address it does
	// not own (a peer on its link's subnet); an address neither owned nor reached resolves to
	// ADDR_ERROR, EHOSTUNREACH.
	Reach func(netip.Addr) (src netip.Addr, ok bool)
	Log   *slog.Logger
}

// Server is rdma_cm for the programs of one or more devices: their IDs, whichever file they
// belong to. An ID belongs to the device of the address it is bound to or resolved from; a
// listener on the wildcard address listens on every device, as the kernel's does.
type Server struct {
	devs   []*Device
	logger *slog.Logger

	mu    sync.Mutex
	ids   map[uint32]*cmID
	byCM  map[*rdmacm.ID]*cmID
	next  uint32
	mcs   map[uint32]*mcast
	ports map[boundPort]int // how many IDs hold each
}

// boundPort is a port of a port space that IDs are bound to.
type boundPort struct{ ps, port uint16 }

// The kernel's default ephemeral ports (net.ipv4.ip_local_port_range), which an ID bound to
// port 0 takes one of, as cma_alloc_any_port does.
const ephemeralLow, ephemeralHigh = 32768, 60999

// holdPort makes id hold its source port, taking a free ephemeral one when it has none, so that
// two listeners of programs that asked for any port never share one (a request for the
// port a program was told would otherwise reach the listener of one that just ended). s.mu
// is held.
func (s *Server) holdPort(id *cmID) error {
	if id.held != 0 {
		return nil
	}
	port := id.src.Port()
	if port == 0 {
		span := ephemeralHigh - ephemeralLow + 1
		start := rand.IntN(span)
		for i := range span {
			p := uint16(ephemeralLow + (start+i)%span)
			if s.ports[boundPort{id.ps, p}] == 0 {
				port = p
				break
			}
		}
		if port == 0 {
			return errf(syscall.EADDRNOTAVAIL, "no free port")
		}
		id.src = netip.AddrPortFrom(id.src.Addr(), port)
	}
	s.ports[boundPort{id.ps, port}]++
	id.held = port
	return nil
}

// releasePort gives id's port back. s.mu is held.
func (s *Server) releasePort(id *cmID) {
	if id.held == 0 {
		return
	}
	k := boundPort{id.ps, id.held}
	if s.ports[k]--; s.ports[k] <= 0 {
		delete(s.ports, k)
	}
	id.held = 0
}

// mcast is a multicast group an ID joined (struct ucma_multicast).
type mcast struct {
	num      uint32
	uid      uint64
	id       *cmID
	group    netip.Addr
	reported uint32
}

// NewServer serves rdma_cm on devs, at least one. Each device's Manager is made with
// Events(dev) as its handler and set before the server opens a file.
func NewServer(devs ...*Device) *Server {
	s := &Server{devs: devs, ids: map[uint32]*cmID{}, byCM: map[*rdmacm.ID]*cmID{}, mcs: map[uint32]*mcast{},
		ports: map[boundPort]int{}, logger: slog.Default()}
	if len(devs) > 0 && devs[0].Log != nil {
		s.logger = devs[0].Log
	}
	return s
}

func (s *Server) log() *slog.Logger { return s.logger }

// owner is the device whose address a is, or nil.
func (s *Server) owner(a netip.Addr) *Device {
	for _, d := range s.devs {
		if d.Owns(a) {
			return d
		}
	}
	return nil
}

// route is the device that reaches dst and the address it sends from: the first device that
// owns dst (from dst itself), else the first that reaches it; from, if it is valid, is the
// device's and the only one tried. ok is false where no device reaches dst.
func (s *Server) route(from, dst netip.Addr) (dev *Device, src netip.Addr, ok bool) {
	devs := s.devs
	if from.IsValid() {
		d := s.owner(from)
		if d == nil {
			return nil, netip.Addr{}, false
		}
		devs = []*Device{d}
	}
	for _, d := range devs {
		if d.Owns(dst) {
			return d, dst, true
		}
	}
	for _, d := range devs {
		if d.Reach != nil {
			if a, ok := d.Reach(dst); ok {
				return d, a, true
			}
		}
	}
	return nil, netip.Addr{}, false
}

// cmID is an rdma_cm ID (struct rdma_cm_id as the kernel's ucma keeps it).
type cmID struct {
	num      uint32
	uid      uint64
	ps       uint16
	qpType   uint8
	f        *File
	dev      *Device // bound to an address of it (not the wildcard), resolved or requested
	src, dst netip.AddrPort
	held     uint16 // the port of the server's ports the ID holds (holdPort), 0 for none
	resolved bool   // ADDR_RESOLVED: the device is known
	routed   bool
	listen   []*rdmacm.ID // one per device it listens on
	cm       *rdmacm.ID
	reported uint32 // events GET_EVENT returned
	// What SET_OPTION set: the type of service (the traffic class of its QP's path) and the
	// ACK timeout of its QP (-1: the path's).
	tos        uint8
	ackTimeout int
}

// The port spaces (enum rdma_ucm_port_space).
const (
	psIPoIB = 0x0002
	psTCP   = 0x0106
	psUDP   = 0x0111
	psIB    = 0x013f
)

// alloc gives an ID the next free number: librdmacm keeps IDs in a table of 65536.
func (s *Server) alloc(id *cmID) error {
	n, ok := free(s.ids, s.next)
	if !ok {
		return errf(syscall.ENOMEM, "all rdma_cm IDs in use")
	}
	id.num, s.ids[n], s.next = n, id, n+1
	return nil
}

// free is the first number from next on (round a table of 65536) that m does not hold.
func free[T any](m map[uint32]T, next uint32) (uint32, bool) {
	for n := uint32(0); n < 1<<16; n++ {
		k := (next + n) % (1 << 16)
		if _, used := m[k]; !used {
			return k, true
		}
	}
	return 0, false
}

func errf(errno syscall.Errno, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errno)
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return syscall.EINVAL
}

// File is one open /dev/infiniband/rdma_cm: its IDs' events, queued for GET_EVENT. The
// program's file is a socket that holds a byte per queued event, so that poll and epoll see it
// readable while events wait.
type File struct {
	s     *Server
	owner int
	mem   keys.Copier // the program's memory: an option's value is read from it

	mu     sync.Mutex
	fd     int // softirdma's end of the socket
	peer   int // a copy of the program's end: GET_EVENT takes an event's byte back
	ino    uint64
	events []*event
	closed bool
}

// event is a queued event: its ID, and the ID it counts for (the listener's, for a
// CONNECT_REQUEST, as the kernel's ucma counts it and librdmacm acknowledges it).
type event struct {
	id, acct *cmID
	mc       *mcast // a multicast event counts for its group too
	data     [eventSize]byte
}

// eventSize is struct rdma_ucm_event_resp.
const eventSize = 336

// Open is a new open file of a program (owner, its pid, whose memory mem reaches), and the
// program's end of it.
func (s *Server) Open(owner int, mem keys.Copier) (*File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	peer, err := unix.FcntlInt(uintptr(fds[1]), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.Fstat(fds[1], &st)
	}
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	_ = unix.Shutdown(fds[1], unix.SHUT_WR)
	f := &File{s: s, owner: owner, mem: mem, fd: fds[0], peer: peer, ino: st.Ino}
	return f, os.NewFile(uintptr(fds[1]), "softirdma-rdma_cm"), nil
}

// Close destroys the file's IDs, as the kernel's ucma_close does.
func (f *File) Close() {
	s := f.s
	s.mu.Lock()
	var gone []*cmID
	for _, id := range s.ids {
		if id.f == f {
			gone = append(gone, id)
		}
	}
	for _, id := range gone {
		s.forget(id)
	}
	s.mu.Unlock()
	for _, id := range gone {
		id.release()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		unix.Close(f.fd)
		unix.Close(f.peer)
	}
}

// forget takes an ID out of the tables. s.mu is held.
func (s *Server) forget(id *cmID) {
	delete(s.ids, id.num)
	s.releasePort(id)
	for n, mc := range s.mcs {
		if mc.id == id {
			delete(s.mcs, n)
		}
	}
	if id.cm != nil {
		delete(s.byCM, id.cm)
	}
	for _, l := range id.listen {
		delete(s.byCM, l)
	}
}

// release ends an ID's connection or listener. No lock is held: the manager may call back.
func (id *cmID) release() {
	if id.cm != nil {
		_ = id.cm.Destroy()
	}
	for _, l := range id.listen {
		_ = l.Destroy()
	}
}

// queue adds an event and its byte.
func (f *File) queue(ev *event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.events = append(f.events, ev)
	_ = unix.Sendmsg(f.fd, []byte{1}, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
}

// take removes the first event (counting for id, if id is not nil) and its byte.
func (f *File) take(id *cmID) *event {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, ev := range f.events {
		if id != nil && ev.acct != id {
			continue
		}
		f.events = append(f.events[:i], f.events[i+1:]...)
		var b [1]byte
		_, _, _ = unix.Recvfrom(f.peer, b[:], unix.MSG_DONTWAIT)
		return ev
	}
	return nil
}

// dropMcast takes back a group's queued events.
func (f *File) dropMcast(mc *mcast) {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := f.events[:0]
	for _, ev := range f.events {
		if ev.mc == mc {
			var b [1]byte
			_, _, _ = unix.Recvfrom(f.peer, b[:], unix.MSG_DONTWAIT)
			continue
		}
		kept = append(kept, ev)
	}
	f.events = kept
}

// Is says whether a file the program passed in is its end of this one.
func (f *File) Is(in *os.File) bool {
	var st unix.Stat_t
	return in != nil && unix.Fstat(int(in.Fd()), &st) == nil && st.Ino == f.ino
}

// le reads the command's fields.
var le = binary.LittleEndian

// addrPort reads a 28-byte sockaddr slot (sockaddr_in or sockaddr_in6); family 0 is none.
func addrPort(b []byte) (netip.AddrPort, bool, error) {
	switch binary.LittleEndian.Uint16(b) {
	case 0:
		return netip.AddrPort{}, false, nil
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:])), true, nil
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), binary.BigEndian.Uint16(b[2:])), true, nil
	}
	return netip.AddrPort{}, false, errf(syscall.EAFNOSUPPORT, "address family %d", binary.LittleEndian.Uint16(b))
}

// putAddrPort writes a sockaddr (sockaddr_in for IPv4) into a 28-byte slot.
func putAddrPort(b []byte, ap netip.AddrPort) {
	clear(b[:28])
	a := ap.Addr()
	if !a.IsValid() {
		return
	}
	binary.BigEndian.PutUint16(b[2:], ap.Port())
	if a.Is4() {
		binary.LittleEndian.PutUint16(b, unix.AF_INET)
		v := a.As4()
		copy(b[4:8], v[:])
		return
	}
	binary.LittleEndian.PutUint16(b, unix.AF_INET6)
	v := a.As16()
	copy(b[8:24], v[:])
}

// gid is the GID of an address: IPv4 mapped.
func gid(a netip.Addr) [16]byte { return a.As16() }

var _ = engine.QPSInit
