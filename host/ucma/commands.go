package ucma

import (
	"net/netip"
	"os"
	"runtime/debug"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/host/ucontext"
	"github.com/softirdma/softirdma/keys"
)

// The commands (RDMA_USER_CM_CMD_*).
const (
	cmdCreateID     = 0
	cmdDestroyID    = 1
	cmdBindIP       = 2
	cmdResolveIP    = 3
	cmdResolveRoute = 4
	cmdQueryRoute   = 5
	cmdConnect      = 6
	cmdListen       = 7
	cmdAccept       = 8
	cmdReject       = 9
	cmdDisconnect   = 10
	cmdInitQPAttr   = 11
	cmdGetEvent     = 12
	cmdGetOption    = 13
	cmdSetOption    = 14
	cmdNotify       = 15
	cmdJoinIPMcast  = 16
	cmdLeaveMcast   = 17
	cmdMigrateID    = 18
	cmdQuery        = 19
	cmdBind         = 20
	cmdResolveAddr  = 21
	cmdJoinMcast    = 22
	numCommands     = 23
)

// cmdSize is each command's whole length, header included: the kernel reads that much whatever
// the header says (a shorter write reads zeros here).
var cmdSize = [numCommands]int{32, 24, 48, 72, 16, 24, 296, 16, 304, 272, 12, 24, 16, 0, 32, 16, 56, 24, 24, 24, 144, 280, 160}

// minOut is the response each command needs (ENOSPC below it).
var minOut = map[uint32]int{cmdCreateID: 4, cmdDestroyID: 4, cmdQueryRoute: 200, cmdInitQPAttr: 144, cmdGetEvent: eventSize - 12,
	cmdJoinIPMcast: 4, cmdLeaveMcast: 4, cmdJoinMcast: 4}

// request is a command being run.
type request struct {
	f      *File
	owner  int         // the process that wrote the command
	mem    keys.Copier // its memory
	b      []byte      // the command, header included, cmdSize long
	out    int
	in     *os.File
	writes []ucontext.Write
	n      int // what write() returns
}

func (r *request) u32(off int) uint32 { return le.Uint32(r.b[off:]) }
func (r *request) u64(off int) uint64 { return le.Uint64(r.b[off:]) }

// respond writes data at the response address at off in the command.
func (r *request) respond(off int, data []byte) {
	if addr := r.u64(off); addr != 0 {
		r.writes = append(r.writes, ucontext.Write{Addr: addr, Data: data[:min(len(data), r.out)], File: -1})
	}
}

// Execute runs one command the program wrote, with the file it passed in (MIGRATE_ID's), and
// returns what the kernel would: write()'s result and the response.
func (f *File) Execute(buf []byte, in *os.File) ucontext.Reply {
	return f.ExecuteBy(f.owner, f.mem, buf, in)
}

// ExecuteBy is Execute for a command of process owner, whose memory mem reaches (a child that
// kept the file after a fork).
func (f *File) ExecuteBy(owner int, mem keys.Copier, buf []byte, in *os.File) ucontext.Reply {
	if len(buf) < 8 {
		return ucontext.Reply{Ret: -int32(syscall.EINVAL)}
	}
	cmd, inLen, out := le.Uint32(buf), int(le.Uint16(buf[4:])), int(le.Uint16(buf[6:]))
	switch {
	case cmd >= numCommands || inLen+8 > len(buf):
		return ucontext.Reply{Ret: -int32(syscall.EINVAL)}
	case cmd == cmdGetOption:
		return ucontext.Reply{Ret: -int32(syscall.ENOSYS)}
	case out < minOut[cmd]:
		return ucontext.Reply{Ret: -int32(syscall.ENOSPC)}
	}
	b := make([]byte, max(cmdSize[cmd], len(buf)))
	copy(b, buf)
	r := &request{f: f, b: b, out: out, in: in, n: len(buf), owner: owner, mem: mem}
	if err := r.runGuarded(cmd); err != nil {
		if errnoOf(err) == syscall.EAGAIN || errnoOf(err) == syscall.EAFNOSUPPORT {
			// A GET_EVENT with none waiting, librdmacm's AF_IB probe: the way of things.
			return ucontext.Reply{Ret: -int32(errnoOf(err))}
		}
		f.s.log().Info("rdma_cm command refused", "owner", f.owner, "command", cmd, "errno", errnoOf(err).Error(), "why", err.Error())
		return ucontext.Reply{Ret: -int32(errnoOf(err))}
	}
	return ucontext.Reply{Ret: int32(r.n), Writes: r.writes}
}

// runGuarded runs a command; one that crashes its handler (softirdma's bug) is logged with its
// stack and refused with EINVAL, and the file and the other programs go on.
func (r *request) runGuarded(cmd uint32) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.f.s.log().Error("rdma_cm command crashed", "owner", r.f.owner, "command", cmd, "panic", p, "stack", string(debug.Stack()))
			err = errf(syscall.EINVAL, "command %d crashed", cmd)
		}
	}()
	return handlers[cmd](r)
}

var handlers [numCommands]func(*request) error

func init() {
	handlers = [numCommands]func(*request) error{
		cmdCreateID: createID, cmdDestroyID: destroyID, cmdBindIP: bindIP, cmdResolveIP: resolveIP,
		cmdResolveRoute: resolveRoute, cmdQueryRoute: queryRoute, cmdConnect: connect, cmdListen: listen,
		cmdAccept: accept, cmdReject: reject, cmdDisconnect: disconnect, cmdInitQPAttr: initQPAttr,
		cmdGetEvent: getEvent, cmdSetOption: setOption, cmdNotify: notify, cmdJoinIPMcast: joinIPMcast,
		cmdLeaveMcast: leaveMcast, cmdMigrateID: migrateID, cmdQuery: unsupported,
		cmdBind: bindAFIB, cmdResolveAddr: unsupported, cmdJoinMcast: unsupported,
	}
}

func unsupported(r *request) error {
	return errf(syscall.ENOSYS, "rdma_cm command %d is not served", r.u32(0))
}

// bindAFIB refuses BIND (librdmacm's AF_IB probe and family): librdmacm then speaks BIND_IP.
func bindAFIB(*request) error { return errf(syscall.EAFNOSUPPORT, "AF_IB") }

// id finds the ID a command names: ENOENT for none, EINVAL for another file's.
func (r *request) id(off int) (*cmID, error) {
	s := r.f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[r.u32(off)]
	switch {
	case !ok:
		return nil, errf(syscall.ENOENT, "no rdma_cm ID %d", r.u32(off))
	case id.f != r.f:
		return nil, errf(syscall.EINVAL, "rdma_cm ID %d is another file's", r.u32(off))
	}
	return id, nil
}

// CREATE_ID: uid (8), response (16), ps (24), qp_type (26).
func createID(r *request) error {
	ps := uint16(le.Uint16(r.b[24:]))
	id := &cmID{uid: r.u64(8), ps: ps, f: r.f, ackTimeout: -1}
	switch ps {
	case psTCP:
		id.qpType = 2
	case psUDP, psIPoIB:
		id.qpType = 4
	case psIB:
		id.qpType = r.b[26]
	default:
		return errf(syscall.EINVAL, "port space 0x%x", ps)
	}
	s := r.f.s
	s.mu.Lock()
	err := s.alloc(id)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	var b [4]byte
	le.PutUint32(b[:], id.num)
	r.respond(16, b[:])
	return nil
}

// DESTROY_ID: response (8), id (16). The answer counts the events GET_EVENT returned for it;
// those still queued are dropped with it.
func destroyID(r *request) error {
	id, err := r.id(16)
	if err != nil {
		return err
	}
	s := r.f.s
	s.mu.Lock()
	s.forget(id)
	s.mu.Unlock()
	id.release()
	// Its queued events go with it, and the IDs of requests it never handed out.
	for ev := r.f.take(id); ev != nil; ev = r.f.take(id) {
		if ev.id != id {
			s.mu.Lock()
			s.forget(ev.id)
			s.mu.Unlock()
			ev.id.release()
		}
	}
	var b [4]byte
	le.PutUint32(b[:], id.reported)
	r.respond(8, b[:])
	s.log().Debug("rdma_cm ID destroyed", "owner", r.f.owner, "id", id.num, "events", id.reported)
	return nil
}

// BIND_IP: addr (16, a 28-byte slot), id (44).
func bindIP(r *request) error {
	id, err := r.id(44)
	if err != nil {
		return err
	}
	ap, ok, err := addrPort(r.b[16:44])
	if err != nil || !ok {
		return errf(syscall.EINVAL, "bind to no address")
	}
	var dev *Device
	if a := ap.Addr(); !a.IsUnspecified() {
		if dev = r.f.s.owner(a); dev == nil {
			return errf(syscall.EADDRNOTAVAIL, "%s is no address of a device's", a)
		}
	}
	s := r.f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if id.held != 0 {
		return errf(syscall.EINVAL, "rdma_cm ID %d is bound already", id.num)
	}
	id.src, id.dev = ap, dev
	return s.holdPort(id)
}

// RESOLVE_IP: src (8), dst (36), id (64), timeout (68). The device answers for its addresses,
// so the address resolves at once: ADDR_RESOLVED.
func resolveIP(r *request) error {
	id, err := r.id(64)
	if err != nil {
		return err
	}
	src, hasSrc, err := addrPort(r.b[8:36])
	if err != nil {
		return err
	}
	dst, ok, err := addrPort(r.b[36:64])
	if err != nil || !ok {
		return errf(syscall.EINVAL, "resolve of no address")
	}
	if hasSrc && !src.Addr().IsUnspecified() {
		id.src = src
	}
	var bound netip.Addr // the address the ID is bound to, whose device it must use
	if a := id.src.Addr(); a.IsValid() && !a.IsUnspecified() {
		bound = a
	}
	// A device's own address answers from itself; another it reaches from its address there.
	dev, from, ok := r.f.s.route(bound, dst.Addr())
	if !ok {
		r.f.queueEvent(id, evAddrError, -int32(syscall.EHOSTUNREACH), nil)
		return nil
	}
	if dst.Addr().Is4In6() {
		from = netip.AddrFrom16(from.As16())
	}
	if !bound.IsValid() {
		id.src = netip.AddrPortFrom(from, id.src.Port())
	}
	s := r.f.s
	s.mu.Lock()
	err = s.holdPort(id) // an unbound ID binds now, as the kernel's does
	s.mu.Unlock()
	if err != nil {
		return err
	}
	id.dst, id.resolved, id.dev = dst, true, dev
	r.f.queueEvent(id, evAddrResolved, 0, nil)
	return nil
}

// RESOLVE_ROUTE: id (8). On RoCE the route is the address: ROUTE_RESOLVED.
func resolveRoute(r *request) error {
	id, err := r.id(8)
	if err != nil {
		return err
	}
	if !id.resolved {
		return errf(syscall.EINVAL, "route of an unresolved ID")
	}
	id.routed = true
	r.f.queueEvent(id, evRouteResolved, 0, nil)
	return nil
}

// QUERY_ROUTE: response (8), id (16). struct rdma_ucm_query_route_resp.
func queryRoute(r *request) error {
	id, err := r.id(16)
	if err != nil {
		return err
	}
	d := id.dev
	b := make([]byte, 208)
	src, dst := id.src, id.dst
	if id.cm != nil && len(id.listen) == 0 && !dst.Addr().IsValid() {
		h := id.cm.RequestHeader()
		src, dst = netip.AddrPortFrom(h.Dst, src.Port()), netip.AddrPortFrom(h.Src, h.SrcPort)
	}
	if d != nil {
		putBE64(b, d.NodeGUID)
		sg, dg := gid(src.Addr()), gid(dst.Addr())
		copy(b[8:24], dg[:])
		copy(b[24:40], sg[:])
		b[60], b[61] = 0xff, 0xff // pkey
		b[196] = 1
		le.PutUint32(b[200:], d.Index)
	} else {
		le.PutUint32(b[200:], 0xffffffff)
	}
	if id.routed || id.cm != nil {
		le.PutUint32(b[192:], 1)
	}
	putAddrPort(b[136:164], src)
	putAddrPort(b[164:192], dst)
	r.respond(8, b)
	return nil
}

func putBE64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

// connParam reads struct rdma_ucm_conn_param (272 bytes) at off.
func (r *request) connParam(off int) (qpn uint32, p rdmacm.ConnParam, valid bool) {
	b := r.b[off : off+272]
	n := min(int(b[264]), 256)
	p = rdmacm.ConnParam{Private: append([]byte(nil), b[8:8+n]...), ResponderResources: b[266], InitiatorDepth: b[267],
		RetryCount: min(b[269], 7), RNRRetryCount: min(b[270], 7), MTU: engine.MTU4096}
	return le.Uint32(b) & 0xffffff, p, b[271] != 0
}

// qp is a program's QP by its number, on the device of the ID.
func (r *request) qp(id *cmID, qpn uint32) (*engine.QP, error) {
	if id.dev == nil {
		return nil, errf(syscall.EINVAL, "QP 0x%x for an ID with no device", qpn)
	}
	qp, ok := id.dev.Verbs.QPOf(qpn, r.owner)
	if !ok {
		return nil, errf(syscall.EINVAL, "no QP 0x%x of the program's on the ID's device", qpn)
	}
	return qp, nil
}

// CONNECT: conn_param (8), id (280).
func connect(r *request) error {
	id, err := r.id(280)
	if err != nil {
		return err
	}
	qpn, p, valid := r.connParam(8)
	if !valid || !id.routed {
		return errf(syscall.EINVAL, "connect before the route, or without parameters")
	}
	qp, err := r.qp(id, qpn)
	if err != nil {
		return err
	}
	m := id.dev.Manager
	var c *rdmacm.ID
	if id.qpType == 4 {
		c, err = m.ConnectUD(qp, id.dst.Addr(), id.dst.Port(), p.Private)
	} else {
		c, err = m.ConnectUser(qp, id.dst.Addr(), id.dst.Port(), p)
	}
	if err != nil {
		return err
	}
	r.f.s.mu.Lock()
	id.cm = c
	r.f.s.byCM[c] = id
	r.f.s.mu.Unlock()
	return nil
}

// LISTEN: id (8), backlog (12).
func listen(r *request) error {
	id, err := r.id(8)
	if err != nil {
		return err
	}
	if len(id.listen) > 0 {
		return errf(syscall.EINVAL, "the ID listens already")
	}
	r.f.s.mu.Lock()
	err = r.f.s.holdPort(id) // an unbound ID listens on the wildcard address and a port of its own
	r.f.s.mu.Unlock()
	if err != nil {
		return err
	}
	devs := r.f.s.devs // the wildcard listens on every device
	if id.dev != nil {
		devs = []*Device{id.dev}
	}
	var ls []*rdmacm.ID
	for _, d := range devs {
		var l *rdmacm.ID
		if id.qpType == 4 {
			l, err = d.Manager.ListenUD(id.src.Port())
		} else {
			l, err = d.Manager.Listen(id.src.Port())
		}
		if err != nil {
			for _, l := range ls {
				_ = l.Destroy()
			}
			return err
		}
		ls = append(ls, l)
	}
	r.f.s.mu.Lock()
	id.listen = ls
	for _, l := range ls {
		r.f.s.byCM[l] = id
	}
	r.f.s.mu.Unlock()
	r.f.s.log().Info("rdma_cm listening", "owner", r.f.owner, "port", id.src.Port())
	return nil
}

// ACCEPT: uid (8), conn_param (16), id (288). With valid 0 on the active side after
// CONNECT_RESPONSE it sends the RTU (librdmacm moved the QP to RTS).
func accept(r *request) error {
	id, err := r.id(288)
	if err != nil {
		return err
	}
	if id.cm == nil {
		return errf(syscall.EINVAL, "accept of an ID with no request")
	}
	qpn, p, valid := r.connParam(16)
	if !valid {
		return id.cm.Establish()
	}
	qp, err := r.qp(id, qpn)
	if err != nil {
		return err
	}
	r.f.s.mu.Lock()
	id.uid = r.u64(8)
	r.f.s.mu.Unlock()
	if id.qpType == 4 {
		return id.cm.Accept(qp, p)
	}
	return id.cm.AcceptUser(qp, p)
}

// REJECT: id (8), private_data_len (12), reason (13), private_data (16).
func reject(r *request) error {
	id, err := r.id(8)
	if err != nil {
		return err
	}
	if id.cm == nil {
		return errf(syscall.EINVAL, "reject of an ID with no request")
	}
	n := min(int(r.b[12]), 256)
	return id.cm.Reject(append([]byte(nil), r.b[16:16+n]...))
}

// DISCONNECT: id (8).
func disconnect(r *request) error {
	id, err := r.id(8)
	if err != nil {
		return err
	}
	if id.cm == nil {
		return errf(syscall.EINVAL, "disconnect of an ID with no connection")
	}
	// The kernel's rdma_disconnect answers a connection the peer already ended with a DREP
	// and returns 0: what is left to end is no error.
	_ = id.cm.Disconnect()
	return nil
}

// NOTIFY: id (8), event (12).
func notify(r *request) error {
	id, err := r.id(8)
	if err != nil {
		return err
	}
	if !id.resolved && id.cm == nil {
		return errf(syscall.EINVAL, "notify on an ID with no device")
	}
	return nil
}

// SET_OPTION: optval (8), id (16), level (20), optname (24), optlen (28). The ID options are
// taken (TOS, REUSEADDR, AFONLY, ACK_TIMEOUT); a path (IB_PATH) is not.
func setOption(r *request) error {
	id, err := r.id(16)
	if err != nil {
		return err
	}
	level, name, n := r.u32(20), r.u32(24), r.u32(28)
	if level != 0 || name > 3 {
		return errf(syscall.ENOSYS, "option %d of level %d", name, level)
	}
	if want := map[uint32]uint32{0: 1, 1: 4, 2: 4, 3: 1}[name]; n != want {
		return errf(syscall.EINVAL, "option %d of %d bytes", name, n)
	}
	val := make([]byte, n)
	if r.mem == nil || r.mem.ReadAt(val, r.u64(8)) != nil {
		return errf(syscall.EFAULT, "option %d's value at 0x%x", name, r.u64(8))
	}
	r.f.s.mu.Lock()
	defer r.f.s.mu.Unlock()
	switch name {
	case 0: // RDMA_OPTION_ID_TOS
		id.tos = val[0]
	case 3: // RDMA_OPTION_ID_ACK_TIMEOUT
		id.ackTimeout = int(min(val[0], 31))
	}
	return nil
}

// JOIN_IP_MCAST: response (8), uid (16), addr (24), id (52). On RoCE a join asks nobody: the
// group's address is its GID, and MULTICAST_JOIN comes at once with the address handle to it.
// The program attaches its QP itself (ibv_attach_mcast).
func joinIPMcast(r *request) error {
	id, err := r.id(52)
	if err != nil {
		return err
	}
	ap, ok, err := addrPort(r.b[24:52])
	if err != nil || !ok || !ap.Addr().IsMulticast() {
		return errf(syscall.EINVAL, "join of %s: not a multicast group", ap.Addr())
	}
	if id.dev == nil {
		return errf(syscall.EINVAL, "join by an ID with no device")
	}
	s := r.f.s
	s.mu.Lock()
	n, ok := free(s.mcs, 0)
	mc := &mcast{num: n, uid: r.u64(16), id: id, group: ap.Addr()}
	if ok {
		s.mcs[n] = mc
	}
	s.mu.Unlock()
	if !ok {
		return errf(syscall.ENOMEM, "all multicast joins in use")
	}
	var b [4]byte
	le.PutUint32(b[:], mc.num)
	r.respond(8, b[:])
	ev := r.f.queueEventAs(id, id, mc.uid, evMulticastJoin, 0, nil)
	ev.mc = mc
	le.PutUint32(ev.data[8:], mc.num)
	p := ev.data[evParam:]
	le.PutUint32(p[cpQPN:], 0xffffff)
	le.PutUint32(p[cpQKey:], rdmacm.UDPQKey)
	s.putAH(id.dev, p[udAH:udAH+32], id.src.Addr(), mc.group)
	p[udAH+22] = id.tos
	return nil
}

// LEAVE_MCAST: response (8), id (16), the group's number. The answer counts the group's events
// GET_EVENT returned; those still queued go with it.
func leaveMcast(r *request) error {
	s := r.f.s
	s.mu.Lock()
	mc, ok := s.mcs[r.u32(16)]
	if ok && mc.id.f != r.f {
		ok = false
	}
	if ok {
		delete(s.mcs, mc.num)
	}
	s.mu.Unlock()
	if !ok {
		return errf(syscall.ENOENT, "no multicast group %d of the file's", r.u32(16))
	}
	r.f.dropMcast(mc)
	var b [4]byte
	le.PutUint32(b[:], mc.reported)
	r.respond(8, b[:])
	return nil
}

// MIGRATE_ID: response (8), id (16), fd (20): the ID and its events move to this file from
// the file the program names by the fd it passed.
func migrateID(r *request) error {
	s := r.f.s
	s.mu.Lock()
	id, ok := s.ids[r.u32(16)]
	s.mu.Unlock()
	if !ok {
		return errf(syscall.ENOENT, "no rdma_cm ID %d", r.u32(16))
	}
	if !id.f.Is(r.in) {
		return errf(syscall.EINVAL, "fd %d is not the ID's file", int32(r.u32(20)))
	}
	old := id.f
	s.mu.Lock()
	id.f = r.f
	s.mu.Unlock()
	for ev := old.take(id); ev != nil; ev = old.take(id) {
		r.f.queue(ev)
	}
	var b [4]byte
	le.PutUint32(b[:], id.reported)
	r.respond(8, b[:])
	return nil
}

var _ = syscall.EINVAL
