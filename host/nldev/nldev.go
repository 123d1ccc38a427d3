// Package nldev answers RDMA netlink's device requests (NETLINK_RDMA, client NLDEV) for RDMA
// devices that live in user space, as the kernel's nldev.c answers them for its own: the device
// list libibverbs discovers devices by, the character device each one opens (GET_CHARDEV), the
// system attributes (SYS_GET) and the ports `rdma link` shows. A program's netlink socket is
// stood in for elsewhere; this package turns one datagram the program sends into the datagrams
// it would read back, byte for byte as the kernel writes them, including its errors.
//
// The layouts and numbers are those of include/uapi/rdma/rdma_netlink.h and the kernel's
// replies: a 16-byte nlmsghdr, no family header, attributes 4-byte aligned, 64-bit attributes
// without a pad attribute (as on x86_64 and arm64).
package nldev

import (
	"encoding/binary"
	"syscall"
)

// Netlink's own message types and flags (linux/netlink.h).
const (
	typeError = 2
	typeDone  = 3

	flagRequest = 0x1
	flagMulti   = 0x2
	flagAck     = 0x4
	flagDump    = 0x300
	flagCapped  = 0x100

	headerLen = 16
)

// The NLDEV client's commands (RDMA_NLDEV_CMD_*); a message's type is client<<10 + command.
const (
	clientNLDEV = 5

	cmdGet        = 1
	cmdSet        = 2
	cmdNewLink    = 3
	cmdDelLink    = 4
	cmdPortGet    = 5
	cmdSysGet     = 6
	cmdSysSet     = 7
	cmdGetChardev = 15
)

// The attributes used (RDMA_NLDEV_ATTR_*).
const (
	attrDevIndex          = 1
	attrDevName           = 2
	attrPortIndex         = 3
	attrCapFlags          = 4
	attrNodeGUID          = 6
	attrSysImageGUID      = 7
	attrPortState         = 12
	attrPortPhysState     = 13
	attrDevNodeType       = 14
	attrNdevIndex         = 50
	attrNdevName          = 51
	attrSysNetnsMode      = 66
	attrDevProtocol       = 67
	attrChardevType       = 69
	attrChardevName       = 70
	attrChardevABI        = 71
	attrChardev           = 72
	attrUverbsDriverID    = 73
	attrDevDim            = 84
	attrSysCopyOnFork     = 93
	attrSysPrivQKeyMode   = 96
	attrSysMonitorMode    = 103
	attrMax               = 119 // the largest number a request may carry (rdma-core master's)
	maxDatagram           = 4096
	nodeTypeCA            = 1 // RDMA_NODE_IB_CA, what rxe reports
	driverIDRXE           = 14
	uverbsABI             = 2 // the rxe provider's uverbs ABI version
	rdmaCMABI             = 4
	portStateActive       = 4
	portPhysStateLinkUp   = 5
	rdmaCMChardevTypeName = "rdma_cm"
	uverbsChardevTypeName = "uverbs"
)

// Device is one RDMA device as netlink describes it. Its ports are numbered from 1.
type Device struct {
	Index        uint32 // the device index netlink and rdma_cm's answers name it by
	Name         string // "rxe0": rdma-core's rxe provider binds a device by its driver ID or this name
	NodeGUID     uint64 // in host order, as the kernel sends it
	SysImageGUID uint64
	CapFlags     uint64
	Uverbs       Chardev // its /dev/infiniband/uverbsN
	Ports        []Port
}

// Port is one port of a device, with the network device it stands on ("lo"), if any.
type Port struct {
	Down        bool // reported DOWN/disabled rather than ACTIVE/LINK_UP
	NetdevIndex uint32
	NetdevName  string // empty: the port names no network device
}

// Chardev is a character device: its name under /dev/infiniband and its device number as
// huge_encode_dev encodes it; 0 tells libibverbs and librdmacm not to compare the opened file's
// st_rdev with it.
type Chardev struct {
	Name string
	Dev  uint64
}

// Table is what the answers are made from: the devices, the rdma_cm character device and the
// system attributes.
type Table struct {
	Devices []Device
	RdmaCM  Chardev // its Name is "rdma_cm" if left empty
	// Kernel, if set, has the kernel's own devices, which a socket that asks (Socket.Join)
	// sees beside the Table's: the Table's indexes must be none of the kernel's.
	Kernel Kernel
}

// Socket is what a reply depends on of the socket a request came on.
type Socket struct {
	PortID uint32 // the socket's netlink port id, which replies carry in nlmsg_pid
	CapAck bool   // NETLINK_CAP_ACK is set: error replies do not echo the request's payload
	Join   bool   // the socket sees the kernel's devices too (Table.Kernel)
}

// Answer returns the datagrams a program reads after sending req on s, in order: for each
// netlink message in req, its reply (a dump's messages and NLMSG_DONE, a single message, an
// NLMSG_ERROR), then an acknowledgement where it asked for one. A datagram that is not netlink
// stops where its messages stop making sense, as the kernel's netlink_rcv_skb does; messages
// that are not requests are ignored.
func (t *Table) Answer(req []byte, s Socket) [][]byte {
	var out [][]byte
	for len(req) >= headerLen {
		n := binary.LittleEndian.Uint32(req)
		if n < headerLen || uint64(n) > uint64(len(req)) {
			break
		}
		out = append(out, t.answerOne(req[:n], s)...)
		next := align(int(n))
		if next >= len(req) {
			break
		}
		req = req[next:]
	}
	return out
}

// request is one parsed request message.
type request struct {
	msg   []byte // the whole message, header included
	typ   uint16
	flags uint16
	seq   uint32
	attrs map[uint16][]byte
}

func (t *Table) answerOne(msg []byte, s Socket) [][]byte {
	r := request{
		msg:   msg,
		typ:   binary.LittleEndian.Uint16(msg[4:]),
		flags: binary.LittleEndian.Uint16(msg[6:]),
		seq:   binary.LittleEndian.Uint32(msg[8:]),
	}
	if r.flags&flagRequest == 0 || r.typ < 16 {
		return nil
	}
	var ok bool
	if r.attrs, ok = parseAttrs(msg[headerLen:]); !ok {
		return [][]byte{errorReply(r, s, syscall.EINVAL)}
	}
	replies, errno := t.dispatch(r, s)
	if errno != 0 {
		return [][]byte{errorReply(r, s, errno)}
	}
	if r.flags&flagAck != 0 && !r.isDump() && !endsInError(replies) {
		replies = append(replies, errorReply(r, s, 0))
	}
	return replies
}

func (r request) isDump() bool { return r.flags&flagDump == flagDump }

// dispatch answers one request: its reply datagrams, or the errno the kernel would refuse it with.
func (t *Table) dispatch(r request, s Socket) ([][]byte, syscall.Errno) {
	if r.typ>>10 != clientNLDEV {
		return nil, syscall.EINVAL
	}
	op := r.typ & 0x3ff
	if (op == cmdGet || op == cmdPortGet || op == cmdGetChardev) && t.kernels(r, s) {
		return t.relay(r, s)
	}
	switch op {
	case cmdGet:
		if r.isDump() {
			ours := dump(r, s, cmdGet, t.allDevices())
			if t.joins(s) {
				return t.joinedDump(r, s, ours), 0
			}
			return ours, 0
		}
		d := t.requestedDevice(r)
		if d == nil {
			return nil, syscall.EINVAL
		}
		return [][]byte{single(r, s, cmdGet, deviceAttrs(d))}, 0
	case cmdPortGet:
		return t.portGet(r, s)
	case cmdSysGet:
		return [][]byte{single(r, s, cmdSysGet, sysAttrs())}, 0
	case cmdGetChardev:
		return t.getChardev(r, s)
	case cmdSet, cmdNewLink, cmdDelLink, cmdSysSet:
		return nil, syscall.EPERM // CAP_NET_ADMIN's, which a program here does not have
	default:
		return nil, syscall.EOPNOTSUPP
	}
}

// endsInError says whether the last reply is an NLMSG_ERROR (the kernel's, relayed): no
// acknowledgement follows it.
func endsInError(replies [][]byte) bool {
	if len(replies) == 0 {
		return false
	}
	last := replies[len(replies)-1]
	return len(last) >= headerLen && binary.LittleEndian.Uint16(last[4:]) == typeError
}

func (t *Table) allDevices() [][]byte {
	var msgs [][]byte
	for i := range t.Devices {
		msgs = append(msgs, deviceAttrs(&t.Devices[i]))
	}
	return msgs
}

// requestedDevice is the device the request's DEV_INDEX names; nil if none.
func (t *Table) requestedDevice(r request) *Device {
	index, ok := r.u32(attrDevIndex)
	if !ok {
		return nil
	}
	for i := range t.Devices {
		if t.Devices[i].Index == index {
			return &t.Devices[i]
		}
	}
	return nil
}

// portGet answers PORT_GET: one port (whose reply carries the type GET, as the kernel's does)
// or, as a dump, every port of one device.
func (t *Table) portGet(r request, s Socket) ([][]byte, syscall.Errno) {
	d := t.requestedDevice(r)
	if d == nil {
		return nil, syscall.EINVAL
	}
	if r.isDump() {
		var msgs [][]byte
		for i := range d.Ports {
			msgs = append(msgs, portAttrs(d, i))
		}
		return dump(r, s, cmdPortGet, msgs), 0
	}
	port, ok := r.u32(attrPortIndex)
	if !ok || port == 0 || uint64(port) > uint64(len(d.Ports)) {
		return nil, syscall.EINVAL
	}
	return [][]byte{single(r, s, cmdGet, portAttrs(d, int(port-1)))}, 0
}

// getChardev answers GET_CHARDEV for "uverbs" of a device or the global "rdma_cm".
func (t *Table) getChardev(r request, s Socket) ([][]byte, syscall.Errno) {
	kind, ok := r.attrs[attrChardevType]
	if !ok {
		return nil, syscall.EINVAL
	}
	_, hasDev := r.attrs[attrDevIndex]
	if _, hasPort := r.attrs[attrPortIndex]; hasPort && !hasDev {
		return nil, syscall.EINVAL
	}
	var b attrBuilder
	switch cString(kind) {
	case uverbsChardevTypeName:
		d := t.requestedDevice(r)
		if d == nil {
			return nil, syscall.EINVAL
		}
		if _, hasPort := r.attrs[attrPortIndex]; hasPort {
			return nil, syscall.EINVAL
		}
		b.u32(attrUverbsDriverID, driverIDRXE)
		b.chardev(d.Uverbs, uverbsABI)
	case rdmaCMChardevTypeName:
		if hasDev {
			return nil, syscall.EOPNOTSUPP // rdma_cm is no device's client
		}
		cm := t.RdmaCM
		if cm.Name == "" {
			cm.Name = rdmaCMChardevTypeName
		}
		b.chardev(cm, rdmaCMABI)
	default:
		return nil, syscall.EOPNOTSUPP
	}
	return [][]byte{single(r, s, cmdGetChardev, b.buf)}, 0
}

func deviceAttrs(d *Device) []byte {
	var b attrBuilder
	b.u32(attrDevIndex, d.Index)
	b.str(attrDevName, d.Name)
	b.u32(attrPortIndex, uint32(len(d.Ports)))
	b.u64(attrCapFlags, d.CapFlags)
	b.u64(attrNodeGUID, d.NodeGUID)
	b.u64(attrSysImageGUID, d.SysImageGUID)
	b.u8(attrDevNodeType, nodeTypeCA)
	b.u8(attrDevDim, 0)
	b.str(attrDevProtocol, "roce")
	return b.buf
}

func portAttrs(d *Device, i int) []byte {
	p := d.Ports[i]
	var b attrBuilder
	b.u32(attrDevIndex, d.Index)
	b.str(attrDevName, d.Name)
	b.u32(attrPortIndex, uint32(i+1))
	state, phys := uint8(portStateActive), uint8(portPhysStateLinkUp)
	if p.Down {
		state, phys = 1, 3 // DOWN, DISABLED
	}
	b.u8(attrPortState, state)
	b.u8(attrPortPhysState, phys)
	if p.NetdevName != "" {
		b.u32(attrNdevIndex, p.NetdevIndex)
		b.str(attrNdevName, p.NetdevName)
	}
	return b.buf
}

func sysAttrs() []byte {
	var b attrBuilder
	b.u8(attrSysNetnsMode, 1)
	b.u8(attrSysPrivQKeyMode, 0)
	b.u8(attrSysMonitorMode, 1)
	b.u8(attrSysCopyOnFork, 1)
	return b.buf
}
