// Package neigh is neighbour resolution on links where softirdma owns an IP address: ARP for
// IPv4 and Neighbor Discovery for IPv6. It parses and builds the frames, answers requests for
// softirdma's own addresses, and keeps a table of the peers it learned, so a guest's Soft-RoCE
// (which will not send until its ARP is answered) can reach softirdma, and softirdma can reach
// it.
package neigh

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// EtherType values.
const (
	EtherTypeARP  = 0x0806
	EtherTypeIPv6 = 0x86DD
)

// ARP operations.
const (
	ARPRequest = 1
	ARPReply   = 2
)

// ICMPv6 types of Neighbor Discovery.
const (
	TypeNeighborSolicitation  = 135
	TypeNeighborAdvertisement = 136
)

var (
	// ErrNotNeighbor means the frame is neither ARP nor ND.
	ErrNotNeighbor = errors.New("neigh: not an ARP or neighbor discovery frame")
	// ErrMalformed means it claims to be one but is not well-formed.
	ErrMalformed = errors.New("neigh: malformed ARP or neighbor discovery frame")
)

// Broadcast is the Ethernet broadcast address.
var Broadcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Message is a parsed ARP or ND message.
type Message struct {
	IPv6 bool
	// Op is ARPRequest or ARPReply for ARP, TypeNeighborSolicitation or
	// TypeNeighborAdvertisement for ND.
	Op int
	// SenderMAC and SenderIP are who sent it (for ND: the IPv6 source and the link-layer
	// address option when there is one; SenderMAC is zero without it).
	SenderMAC [6]byte
	SenderIP  netip.Addr
	// TargetIP is the address asked about (ARP's target, ND's target address); TargetMAC is
	// ARP's target hardware address, or ND's target link-layer option in an advertisement.
	TargetIP  netip.Addr
	TargetMAC [6]byte
	// EthSrc is the Ethernet source address of the frame.
	EthSrc [6]byte
}

// Parse reads an ARP or ND frame (Ethernet, optionally one 802.1Q tag).
func Parse(frame []byte) (Message, error) {
	var m Message
	if len(frame) < 14 {
		return m, ErrNotNeighbor
	}
	copy(m.EthSrc[:], frame[6:12])
	off := 12
	et := binary.BigEndian.Uint16(frame[off:])
	if et == 0x8100 && len(frame) >= 18 {
		off = 16
		et = binary.BigEndian.Uint16(frame[off:])
	}
	body := frame[off+2:]
	switch et {
	case EtherTypeARP:
		return parseARP(m, body)
	case EtherTypeIPv6:
		return parseND(m, body)
	}
	return m, ErrNotNeighbor
}

func parseARP(m Message, b []byte) (Message, error) {
	if len(b) < 28 {
		return m, ErrMalformed
	}
	if binary.BigEndian.Uint16(b[0:]) != 1 || binary.BigEndian.Uint16(b[2:]) != 0x0800 || b[4] != 6 || b[5] != 4 {
		return m, ErrNotNeighbor // not Ethernet/IPv4 ARP
	}
	m.Op = int(binary.BigEndian.Uint16(b[6:]))
	if m.Op != ARPRequest && m.Op != ARPReply {
		return m, ErrMalformed
	}
	copy(m.SenderMAC[:], b[8:14])
	m.SenderIP = netip.AddrFrom4([4]byte(b[14:18]))
	copy(m.TargetMAC[:], b[18:24])
	m.TargetIP = netip.AddrFrom4([4]byte(b[24:28]))
	return m, nil
}

func parseND(m Message, b []byte) (Message, error) {
	if len(b) < 40 || b[0]>>4 != 6 {
		return m, ErrNotNeighbor
	}
	plen := int(binary.BigEndian.Uint16(b[4:]))
	if b[6] != 58 { // ICMPv6 directly after the fixed header; ND never uses extension headers
		return m, ErrNotNeighbor
	}
	if plen < 1 || plen > len(b)-40 {
		return m, ErrNotNeighbor // not an ICMPv6 message we could read, let alone ND
	}
	src := netip.AddrFrom16([16]byte(b[8:24]))
	dst := netip.AddrFrom16([16]byte(b[24:40]))
	icmp := b[40 : 40+plen]
	typ := int(icmp[0])
	if typ != TypeNeighborSolicitation && typ != TypeNeighborAdvertisement {
		return m, ErrNotNeighbor // router solicitations, MLD, echo ...
	}
	if plen < 24 {
		return m, ErrMalformed
	}
	// RFC 4861 7.1.1: hop limit 255, code 0, valid checksum.
	if b[7] != 255 || icmp[1] != 0 || checksum6(src, dst, icmp) != 0 {
		return m, ErrMalformed
	}
	m.IPv6, m.Op, m.SenderIP = true, typ, src
	m.TargetIP = netip.AddrFrom16([16]byte(icmp[8:24]))
	for opts := icmp[24:]; len(opts) > 0; {
		if len(opts) < 8 || opts[1] == 0 || int(opts[1])*8 > len(opts) {
			return m, ErrMalformed
		}
		l := int(opts[1]) * 8
		switch opts[0] {
		case 1: // source link-layer address
			copy(m.SenderMAC[:], opts[2:8])
		case 2: // target link-layer address
			copy(m.TargetMAC[:], opts[2:8])
		}
		opts = opts[l:]
	}
	if typ == TypeNeighborAdvertisement && m.SenderMAC == ([6]byte{}) {
		m.SenderMAC = m.TargetMAC // the advertiser's address is its target's
	}
	return m, nil
}

// AppendARP appends an ARP frame (padded to Ethernet's 60-byte minimum) to dst.
func AppendARP(dst []byte, op int, ethDst, senderMAC [6]byte, senderIP netip.Addr, targetMAC [6]byte, targetIP netip.Addr) []byte {
	start := len(dst)
	dst = append(dst, ethDst[:]...)
	dst = append(dst, senderMAC[:]...)
	dst = binary.BigEndian.AppendUint16(dst, EtherTypeARP)
	dst = binary.BigEndian.AppendUint16(dst, 1)
	dst = binary.BigEndian.AppendUint16(dst, 0x0800)
	dst = append(dst, 6, 4)
	dst = binary.BigEndian.AppendUint16(dst, uint16(op))
	s4, t4 := senderIP.Unmap().As4(), targetIP.Unmap().As4()
	dst = append(dst, senderMAC[:]...)
	dst = append(dst, s4[:]...)
	dst = append(dst, targetMAC[:]...)
	dst = append(dst, t4[:]...)
	for len(dst)-start < 60 {
		dst = append(dst, 0)
	}
	return dst
}

// SolicitedNode is the solicited-node multicast address of ip (RFC 4291 2.7.1) and its
// Ethernet multicast address.
func SolicitedNode(ip netip.Addr) (netip.Addr, [6]byte) {
	a := ip.As16()
	m := [16]byte{0xff, 0x02, 10: 0, 11: 1, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]}
	return netip.AddrFrom16(m), multicastMAC(netip.AddrFrom16(m))
}

func multicastMAC(ip netip.Addr) [6]byte {
	a := ip.As16()
	return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}
}

// AppendNS appends a Neighbor Solicitation for target from (srcMAC, srcIP), sent to target's
// solicited-node multicast address.
func AppendNS(dst []byte, srcMAC [6]byte, srcIP, target netip.Addr) []byte {
	group, groupMAC := SolicitedNode(target)
	return appendND(dst, TypeNeighborSolicitation, groupMAC, srcMAC, srcIP, group, target, 0, 1)
}

// AppendNA appends a solicited Neighbor Advertisement answering (toMAC, toIP) that target is
// at srcMAC.
func AppendNA(dst []byte, srcMAC [6]byte, target netip.Addr, toMAC [6]byte, toIP netip.Addr) []byte {
	const solicited, override = 0x40, 0x20
	return appendND(dst, TypeNeighborAdvertisement, toMAC, srcMAC, target, toIP, target, solicited|override, 2)
}

func appendND(dst []byte, typ int, ethDst, srcMAC [6]byte, src, ipDst, target netip.Addr, flags byte, optType byte) []byte {
	dst = append(dst, ethDst[:]...)
	dst = append(dst, srcMAC[:]...)
	dst = binary.BigEndian.AppendUint16(dst, EtherTypeIPv6)
	dst = append(dst, 0x60, 0, 0, 0)
	dst = binary.BigEndian.AppendUint16(dst, 32) // ICMPv6: 24 + one 8-byte option
	dst = append(dst, 58, 255)
	s, d, t := src.As16(), ipDst.As16(), target.As16()
	dst = append(dst, s[:]...)
	dst = append(dst, d[:]...)
	icmp := len(dst)
	dst = append(dst, byte(typ), 0, 0, 0, flags, 0, 0, 0)
	dst = append(dst, t[:]...)
	dst = append(dst, optType, 1)
	dst = append(dst, srcMAC[:]...)
	sum := checksum6(src, ipDst, dst[icmp:])
	binary.BigEndian.PutUint16(dst[icmp+2:], sum)
	return dst
}

// checksum6 is the ICMPv6 checksum over the pseudo-header and msg; over a message carrying its
// checksum it is 0 when the checksum is right.
func checksum6(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	var l [8]byte
	binary.BigEndian.PutUint32(l[0:], uint32(len(msg)))
	l[7] = 58
	add(l[:])
	add(msg)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
