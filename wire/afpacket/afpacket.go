// Package afpacket stands softirdma on a real Ethernet adapter: an AF_PACKET socket moves whole
// frames, and netlink describes the adapter (index, MAC, MTU, addresses, state) and supplies the
// kernel's neighbour table. The host kernel keeps the adapter's address and answers ARP and ND
// for it; softirdma holds UDP port 4791 open on that address so the kernel does not answer RoCE
// frames with ICMP port unreachable. Needs root or CAP_NET_RAW.
package afpacket

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/wire/roce"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Adapter describes a network interface.
type Adapter struct {
	Name  string
	Index int
	MAC   [6]byte
	MTU   int
	Up    bool
	Addrs []netip.Addr
}

// GIDs are the RoCEv2 GIDs softirdma would use on the adapter, in rxe's order: IPv6 addresses
// (link-local first) then IPv4-mapped IPv4 addresses.
func (a Adapter) GIDs() []netip.Addr {
	var v6, v4 []netip.Addr
	for _, ip := range a.Addrs {
		if ip.Is4() {
			v4 = append(v4, netip.AddrFrom16(ip.As16()))
		} else if ip.IsLinkLocalUnicast() {
			v6 = append([]netip.Addr{ip}, v6...)
		} else {
			v6 = append(v6, ip)
		}
	}
	return append(v6, v4...)
}

// IPv4 is the adapter's first IPv4 address.
func (a Adapter) IPv4() (netip.Addr, bool) {
	for _, ip := range a.Addrs {
		if ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// Adapters lists the machine's network interfaces through netlink.
func Adapters() ([]Adapter, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("afpacket: listing links: %w", err)
	}
	var out []Adapter
	for _, l := range links {
		out = append(out, describe(l))
	}
	return out, nil
}

// Lookup describes one interface by name.
func Lookup(name string) (Adapter, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return Adapter{}, fmt.Errorf("afpacket: no adapter %q: %w", name, err)
	}
	return describe(l), nil
}

func describe(l netlink.Link) Adapter {
	a := l.Attrs()
	ad := Adapter{Name: a.Name, Index: a.Index, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0 && a.OperState != netlink.OperDown}
	copy(ad.MAC[:], a.HardwareAddr)
	addrs, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
	for _, x := range addrs {
		if ip, ok := netip.AddrFromSlice(x.IP); ok {
			ad.Addrs = append(ad.Addrs, ip.Unmap())
		}
	}
	return ad
}

// Neighbor returns the kernel's link address for ip on the adapter, asking the kernel to
// resolve it (by sending it a UDP datagram, which makes the kernel ARP or solicit) and waiting
// up to timeout.
func Neighbor(ad Adapter, ip netip.Addr, timeout time.Duration) ([6]byte, bool) {
	deadline := time.Now().Add(timeout)
	var nudged time.Time
	for {
		neighs, err := netlink.NeighList(ad.Index, netlink.FAMILY_ALL)
		if err == nil {
			for _, n := range neighs {
				if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip.Unmap() && len(n.HardwareAddr) == 6 &&
					n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
					return [6]byte(n.HardwareAddr), true
				}
			}
		}
		if time.Now().After(deadline) {
			return [6]byte{}, false
		}
		if time.Since(nudged) > 500*time.Millisecond {
			nudge(ad, ip) // again now and then: the first may have gone before the address was usable
			nudged = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nudge makes the kernel resolve ip's link address by sending it an ICMP echo request (a
// packet socket needs the same privilege, so a raw ICMP socket is there too).
func nudge(ad Adapter, ip netip.Addr) {
	network, typ := "ip4:icmp", icmp.Type(ipv4.ICMPTypeEcho)
	if !ip.Unmap().Is4() {
		network, typ = "ip6:ipv6-icmp", ipv6.ICMPTypeEchoRequest
	}
	c, err := icmp.ListenPacket(network, "")
	if err != nil {
		return
	}
	defer c.Close()
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte("softirdma")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return
	}
	addr := &net.IPAddr{IP: ip.Unmap().AsSlice()}
	if ip.IsLinkLocalUnicast() {
		addr.Zone = ad.Name
	}
	_, _ = c.WriteTo(b, addr)
}

// Link is an AF_PACKET socket on an adapter.
type Link struct {
	fd     int
	ad     Adapter
	hold   *net.UDPConn // UDP 4791, so the kernel does not answer RoCE with port unreachable
	closed atomic.Bool
	stats  struct{ tx, txb, rx, rxb, drop atomic.Uint64 }
}

// Open opens a packet socket on the adapter and holds UDP port 4791 on hold (the adapter's
// address softirdma uses; invalid to skip).
func Open(ad Adapter, hold netip.Addr) (*Link, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("afpacket: opening a packet socket needs root or CAP_NET_RAW: %w", err)
		}
		return nil, fmt.Errorf("afpacket: socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ad.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("afpacket: bind to %s: %w", ad.Name, err)
	}
	// Our own frames are not to come back to us.
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	// A receive timeout lets Close interrupt a blocked receive.
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	l := &Link{fd: fd, ad: ad}
	if hold.IsValid() {
		addr := &net.UDPAddr{IP: hold.AsSlice(), Port: roce.UDPPort}
		if hold.IsLinkLocalUnicast() {
			addr.Zone = ad.Name
		}
		c, err := net.ListenUDP("udp", addr)
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("afpacket: holding UDP port %d on %s (is a kernel RDMA device using it?): %w", roce.UDPPort, hold, err)
		}
		l.hold = c
	}
	return l, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Adapter is the adapter the link is on.
func (l *Link) Adapter() Adapter { return l.ad }

// Stats reports what the link did.
func (l *Link) Stats() roce.LinkStats {
	return roce.LinkStats{TxFrames: l.stats.tx.Load(), TxBytes: l.stats.txb.Load(), RxFrames: l.stats.rx.Load(),
		RxBytes: l.stats.rxb.Load(), RxDropped: l.stats.drop.Load()}
}

// SendBatch writes each frame to the adapter.
func (l *Link) SendBatch(frames [][]byte) (int, error) {
	for i, f := range frames {
		if _, err := unix.Write(l.fd, f); err != nil {
			return i, fmt.Errorf("afpacket: send on %s: %w", l.ad.Name, err)
		}
		l.stats.tx.Add(1)
		l.stats.txb.Add(uint64(len(f)))
	}
	return len(frames), nil
}

// RecvBatch waits for a frame, then takes whatever more is waiting, up to len(bufs). Frames
// longer than their buffer are counted and dropped.
func (l *Link) RecvBatch(bufs [][]byte, sizes []int) (int, error) {
	k := 0
	for k < len(bufs) {
		flags := 0
		if k > 0 {
			flags = unix.MSG_DONTWAIT
		}
		n, _, err := unix.Recvfrom(l.fd, bufs[k], flags|unix.MSG_TRUNC)
		if err != nil {
			if l.closed.Load() {
				return k, os.ErrClosed
			}
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				if k > 0 {
					return k, nil
				}
				continue
			}
			return k, fmt.Errorf("afpacket: receive on %s: %w", l.ad.Name, err)
		}
		if n > len(bufs[k]) || n < roce.EthernetLen {
			l.stats.drop.Add(1)
			continue
		}
		sizes[k] = n
		l.stats.rx.Add(1)
		l.stats.rxb.Add(uint64(n))
		k++
	}
	return k, nil
}

// Close closes the socket and releases UDP 4791.
func (l *Link) Close() error {
	l.closed.Store(true)
	if l.hold != nil {
		l.hold.Close()
	}
	return unix.Close(l.fd)
}

// Watch calls f with the adapter's new description whenever netlink reports a change to it
// (up, down, MTU, address), until stop is closed.
func Watch(name string, stop <-chan struct{}, f func(Adapter)) error {
	ch := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	if err := netlink.LinkSubscribe(ch, done); err != nil {
		return fmt.Errorf("afpacket: watching links: %w", err)
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case u, ok := <-ch:
				if !ok {
					return
				}
				if u.Link != nil && u.Link.Attrs().Name == name {
					f(describe(u.Link))
				}
			}
		}
	}()
	return nil
}
