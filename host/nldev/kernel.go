package nldev

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel is where a Table finds the kernel's own devices, to join them to its own for a socket
// that asks for that (Socket.Join): the requests about the kernel's devices are relayed to it.
type Kernel interface {
	// Ask sends one request to the kernel and returns its reply's messages as the kernel sent
	// them, an NLMSG_DONE or NLMSG_ERROR that ends it included.
	Ask(msg []byte) ([][]byte, error)
	// Owns says whether a device index is the kernel's.
	Owns(index uint32) bool
}

// KernelDevice is one of the kernel's RDMA devices.
type KernelDevice struct {
	Index  uint32
	Name   string
	Uverbs string // "uverbs0"; empty if it has none
}

// KernelNetlink is the kernel's RDMA netlink, through a socket of this process's.
type KernelNetlink struct {
	mu      sync.Mutex
	fd      int
	seq     uint32
	indexes map[uint32]bool
}

// OpenKernel opens the kernel's RDMA netlink and lists its devices. Where the kernel has no
// ib_core it fails (EPROTONOSUPPORT): there is nothing to join.
func OpenKernel() (*KernelNetlink, []KernelDevice, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err != nil {
		return nil, nil, err
	}
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	k := &KernelNetlink{fd: fd, indexes: map[uint32]bool{}}
	devs, err := k.devices()
	if err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	for _, d := range devs {
		k.indexes[d.Index] = true
	}
	return k, devs, nil
}

// Close closes the socket.
func (k *KernelNetlink) Close() error { return unix.Close(k.fd) }

// Owns says whether index was one of the kernel's devices when it was opened.
func (k *KernelNetlink) Owns(index uint32) bool { return k.indexes[index] }

// Ask relays one request message: its sequence number and port id become the socket's for the
// way there, and it asks for no acknowledgement (the Table acknowledges).
func (k *KernelNetlink) Ask(msg []byte) ([][]byte, error) {
	if len(msg) < headerLen {
		return nil, syscall.EINVAL
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	req := append([]byte(nil), msg...)
	flags := binary.LittleEndian.Uint16(req[6:]) &^ flagAck
	binary.LittleEndian.PutUint16(req[6:], flags)
	binary.LittleEndian.PutUint32(req[8:], k.seq)
	binary.LittleEndian.PutUint32(req[12:], 0)
	if err := unix.Sendto(k.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	dump := flags&flagDump == flagDump
	var out [][]byte
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(k.fd, buf, 0)
		if err != nil {
			return nil, err
		}
		b := buf[:n]
		for len(b) >= headerLen {
			l := int(binary.LittleEndian.Uint32(b))
			if l < headerLen || l > len(b) {
				break
			}
			m := append([]byte(nil), b[:l]...)
			if b = b[min(align(l), len(b)):]; binary.LittleEndian.Uint32(m[8:]) != k.seq {
				continue // a late answer to a request that timed out
			}
			out = append(out, m)
			typ := binary.LittleEndian.Uint16(m[4:])
			if typ == typeDone || typ == typeError || !dump {
				return out, nil
			}
		}
	}
}

// devices lists the kernel's devices and their uverbs character devices.
func (k *KernelNetlink) devices() ([]KernelDevice, error) {
	msgs, err := k.Ask(header(headerLen, nldevType(cmdGet), flagRequest|flagDump, 0, 0))
	if err != nil {
		return nil, err
	}
	var devs []KernelDevice
	for _, m := range msgs {
		if binary.LittleEndian.Uint16(m[4:]) != nldevType(cmdGet) {
			if binary.LittleEndian.Uint16(m[4:]) == typeError && len(m) >= headerLen+4 {
				if e := -int32(binary.LittleEndian.Uint32(m[headerLen:])); e != 0 {
					return nil, syscall.Errno(e)
				}
			}
			continue
		}
		attrs, ok := parseAttrs(m[headerLen:])
		if !ok || len(attrs[attrDevIndex]) < 4 {
			return nil, errors.New("nldev: the kernel's device list does not parse")
		}
		devs = append(devs, KernelDevice{Index: binary.LittleEndian.Uint32(attrs[attrDevIndex]), Name: cString(attrs[attrDevName])})
	}
	for i := range devs {
		var b attrBuilder
		b.u32(attrDevIndex, devs[i].Index)
		b.str(attrChardevType, uverbsChardevTypeName)
		req := append(header(headerLen+len(b.buf), nldevType(cmdGetChardev), flagRequest, 0, 0), b.buf...)
		msgs, err := k.Ask(req)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if binary.LittleEndian.Uint16(m[4:]) != nldevType(cmdGetChardev) {
				continue
			}
			if attrs, ok := parseAttrs(m[headerLen:]); ok {
				devs[i].Uverbs = cString(attrs[attrChardevName])
			}
		}
	}
	return devs, nil
}

// UverbsNumber is N of a character device named uverbsN, or -1.
func UverbsNumber(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "uverbs"))
	if !strings.HasPrefix(name, "uverbs") || err != nil || n < 0 {
		return -1
	}
	return n
}

// relay answers a request about the kernel's devices with the kernel's reply, carrying the
// program's sequence number and port id as the Table's own replies do.
func (t *Table) relay(r request, s Socket) ([][]byte, syscall.Errno) {
	msgs, err := t.Kernel.Ask(r.msg)
	if err != nil {
		var e syscall.Errno
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, syscall.EIO
	}
	for _, m := range msgs {
		binary.LittleEndian.PutUint32(m[8:], r.seq)
		binary.LittleEndian.PutUint32(m[12:], s.PortID)
		if binary.LittleEndian.Uint16(m[4:]) == typeError && len(m) >= headerLen+4+headerLen {
			binary.LittleEndian.PutUint32(m[headerLen+4+8:], r.seq) // the echoed request's
			binary.LittleEndian.PutUint32(m[headerLen+4+12:], s.PortID)
		}
	}
	return msgs, 0
}

// joins says whether s sees the kernel's devices beside the Table's.
func (t *Table) joins(s Socket) bool { return s.Join && t.Kernel != nil }

// kernels says whether a request on s is about one of the kernel's devices: s joins them, and
// its DEV_INDEX is one.
func (t *Table) kernels(r request, s Socket) bool {
	if !t.joins(s) {
		return false
	}
	index, ok := r.u32(attrDevIndex)
	return ok && t.Kernel.Owns(index)
}

// joinedDump is the device list of a socket that joins the kernel's: the kernel's devices,
// then the Table's, then one NLMSG_DONE. Should the kernel not answer, the Table's alone.
func (t *Table) joinedDump(r request, s Socket, ours [][]byte) [][]byte {
	theirs, errno := t.relay(r, s)
	if errno != 0 {
		return ours
	}
	var out [][]byte
	for _, m := range theirs {
		if typ := binary.LittleEndian.Uint16(m[4:]); typ == typeDone || typ == typeError {
			continue
		}
		out = append(out, m)
	}
	return append(out, ours...)
}
