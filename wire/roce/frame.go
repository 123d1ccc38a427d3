package roce

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// EtherTypes the parser follows.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
	EtherTypeVLAN = 0x8100
	EtherTypeQinQ = 0x88A8
)

// Frame is a parsed RoCEv2 frame: offsets into Buf and views of the headers found. Views of
// headers the opcode does not carry are nil. Nothing is copied, so a Frame is only valid while Buf
// is.
type Frame struct {
	// Buf is the frame as given to the parser: an Ethernet frame, or an IP packet for ParseIP.
	Buf []byte
	// L3, L4 and BTHOff are the offsets of the IP header, the UDP header and the BTH. End is the
	// offset just past the ICRC (the end of the IP packet); bytes after it are link padding.
	L3, L4, BTHOff, End int
	IPv6                bool
	// VLAN is the 802.1Q tag control information (priority and VLAN ID) of the outer tag when
	// HasVLAN is set.
	VLAN    uint16
	HasVLAN bool
	// RoCE is set once the parser has seen UDP destination port 4791: the frame claims to be
	// RoCEv2, so a later failure makes it malformed rather than foreign.
	RoCE bool

	Opcode       Opcode
	Info         *OpcodeInfo
	BTH          BTH
	DETH         DETH
	FETH         FETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	// CNPReserved is the 16 reserved bytes of a congestion notification packet.
	CNPReserved []byte
	// Payload is the data after the extension headers, without the pad.
	Payload []byte
	// Pad is the pad count from the BTH; the pad bytes follow Payload.
	Pad int
	// ICRC is the ICRC carried by the frame.
	ICRC uint32
}

// Reset clears the frame for reuse without releasing anything.
func (f *Frame) Reset() { *f = Frame{} }

// SrcIP returns the IP source address.
func (f *Frame) SrcIP() netip.Addr {
	if f.IPv6 {
		return netip.AddrFrom16([16]byte(f.Buf[f.L3+8 : f.L3+24]))
	}
	return netip.AddrFrom4([4]byte(f.Buf[f.L3+12 : f.L3+16]))
}

// DstIP returns the IP destination address.
func (f *Frame) DstIP() netip.Addr {
	if f.IPv6 {
		return netip.AddrFrom16([16]byte(f.Buf[f.L3+24 : f.L3+40]))
	}
	return netip.AddrFrom4([4]byte(f.Buf[f.L3+16 : f.L3+20]))
}

// SrcPort returns the UDP source port (rxe derives it from the sending QP to spread flows).
func (f *Frame) SrcPort() uint16 { return binary.BigEndian.Uint16(f.Buf[f.L4:]) }

// DstPort returns the UDP destination port.
func (f *Frame) DstPort() uint16 { return binary.BigEndian.Uint16(f.Buf[f.L4+2:]) }

// HopLimit returns the IPv4 TTL or the IPv6 hop limit.
func (f *Frame) HopLimit() uint8 {
	if f.IPv6 {
		return f.Buf[f.L3+7]
	}
	return f.Buf[f.L3+8]
}

// TrafficClass returns the IPv4 TOS byte or the IPv6 traffic class (DSCP and ECN).
func (f *Frame) TrafficClass() uint8 {
	if f.IPv6 {
		return uint8(binary.BigEndian.Uint16(f.Buf[f.L3:]) >> 4)
	}
	return f.Buf[f.L3+1]
}

// FlowLabel returns the IPv6 flow label (0 for IPv4).
func (f *Frame) FlowLabel() uint32 {
	if f.IPv6 {
		return binary.BigEndian.Uint32(f.Buf[f.L3:]) & 0xFFFFF
	}
	return 0
}

// Parser parses and verifies frames. The zero value is ready. It holds no state today (the ICRC
// needs no scratch space), so one Parser may serve several goroutines; it stays a type so that
// per-parser state (counters, options) can come without changing callers.
type Parser struct{}

// Parse parses an Ethernet frame (optionally with one or two 802.1Q/802.1ad tags) into f and
// verifies its ICRC. It returns nil or one of the package's *Error values. On KindBadICRC every
// field of f is filled in; on other errors f holds what was parsed before the failure.
func (p *Parser) Parse(f *Frame, b []byte) error {
	if err := p.ParseHeaders(f, b); err != nil {
		return err
	}
	return checkICRC(f)
}

// ParseHeaders is Parse without the ICRC check: the frame is what a receiver would take for
// RoCEv2 by its headers (Ethernet, IP, UDP to port 4791, BTH and the opcode's extension headers,
// lengths that agree), whatever its ICRC says. It is for what looks at frames on their way, such
// as a fault deciding whether a frame is the one it is after.
func (p *Parser) ParseHeaders(f *Frame, b []byte) error {
	*f = Frame{Buf: b}
	if len(b) < EthernetLen {
		return errShortEthernet
	}
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	for tags := 0; (et == EtherTypeVLAN || et == EtherTypeQinQ) && tags < 2; tags++ {
		if len(b) < off+2+VLANLen {
			return errShortVLAN
		}
		if !f.HasVLAN {
			f.HasVLAN = true
			f.VLAN = binary.BigEndian.Uint16(b[off+2:])
		}
		off += VLANLen
		et = binary.BigEndian.Uint16(b[off:])
	}
	switch et {
	case EtherTypeIPv4, EtherTypeIPv6:
	default:
		return errEtherType
	}
	return p.parseIP(f, off+2, et == EtherTypeIPv6)
}

// ParseIP parses a raw IPv4 or IPv6 packet (the version nibble decides) into f and verifies its
// ICRC, as Parse does for Ethernet frames.
func (p *Parser) ParseIP(f *Frame, b []byte) error {
	*f = Frame{Buf: b}
	if len(b) < 1 {
		return errShortIPv4
	}
	if err := p.parseIP(f, 0, b[0]>>4 == 6); err != nil {
		return err
	}
	return checkICRC(f)
}

// checkICRC compares the ICRC a parsed frame carries with the one its bytes give.
func checkICRC(f *Frame) error {
	if icrc(f.Buf, f.L3, f.BTHOff, f.End-ICRCLen, f.IPv6) != f.ICRC {
		return errICRC
	}
	return nil
}

func (p *Parser) parseIP(f *Frame, l3 int, ipv6 bool) error {
	b := f.Buf
	f.L3, f.IPv6 = l3, ipv6
	var l4, end int
	if ipv6 {
		if len(b) < l3+IPv6Len {
			return errShortIPv6
		}
		if b[l3]>>4 != 6 {
			return errIPVersion
		}
		if b[l3+6] != 17 {
			return errNotUDP // extension headers are not used by RoCEv2
		}
		l4 = l3 + IPv6Len
		if len(b) < l4+UDPLen {
			return errShortUDP
		}
		if binary.BigEndian.Uint16(b[l4+2:]) != UDPPort {
			return errPort
		}
		f.L4, f.RoCE = l4, true
		pl := int(binary.BigEndian.Uint16(b[l3+4:]))
		if pl < UDPLen {
			return errIPv6Payload
		}
		end = l4 + pl
		if end > len(b) {
			return errShortIPPayload
		}
	} else {
		if len(b) < l3+IPv4Len {
			return errShortIPv4
		}
		if b[l3]>>4 != 4 {
			return errIPVersion
		}
		ihl := int(b[l3]&0x0F) * 4
		if ihl < IPv4Len {
			return errIPv4IHL
		}
		if len(b) < l3+ihl {
			return errShortIPv4
		}
		if b[l3+9] != 17 {
			return errNotUDP
		}
		frag := binary.BigEndian.Uint16(b[l3+6:])
		if frag&0x1FFF != 0 {
			return errNotUDP // a later fragment has no UDP header to look at
		}
		l4 = l3 + ihl
		if len(b) < l4+UDPLen {
			return errShortUDP
		}
		if binary.BigEndian.Uint16(b[l4+2:]) != UDPPort {
			return errPort
		}
		f.L4, f.RoCE = l4, true
		if frag&0x2000 != 0 {
			return errIPv4Fragment
		}
		tl := int(binary.BigEndian.Uint16(b[l3+2:]))
		if tl < ihl+UDPLen {
			return errIPv4Total
		}
		end = l3 + tl
		if end > len(b) {
			return errShortIPPayload
		}
	}
	if int(binary.BigEndian.Uint16(b[l4+4:])) != end-l4 {
		return errUDPLength
	}
	return ParseTransport(f, l4+UDPLen, end)
}

// ParseTransport parses the InfiniBand part, f.Buf[bth:end]: BTH, extension headers, payload, pad
// and ICRC field. It checks everything but the ICRC value, which needs the IP header; the gopacket
// layer shares it, so both decoders accept exactly the same packets. f.Buf may end before end (a
// capture that kept the first bytes of the frame, ParseCaptured): the lengths are checked all the
// same, the headers it holds are read, f.Payload is the part of the payload it holds and f.ICRC
// is 0; if it ends inside a header, that header's KindShort error says which (CutInside).
func ParseTransport(f *Frame, bth, end int) error {
	b := f.Buf
	f.BTHOff, f.End = bth, end
	if end-bth < BTHLen+ICRCLen {
		return errShortBTH
	}
	if len(b) < bth+BTHLen {
		return errCutBTH
	}
	h := BTH(b[bth : bth+BTHLen : bth+BTHLen])
	f.BTH = h
	f.Opcode = h.Opcode()
	info := f.Opcode.Info()
	if info == nil {
		return errOpcode
	}
	f.Info = info
	if h.TVer() != 0 {
		return errTVer
	}
	off := bth + BTHLen
	icrcOff := end - ICRCLen
	if off+info.Ext.Len() > icrcOff {
		return errExtHeaders
	}
	rest := icrcOff - off - info.Ext.Len()
	pad := h.PadCnt()
	f.Pad = pad
	if pad > rest || rest%4 != 0 {
		// Headers are whole 4-byte words and senders pad the payload to one, so the space
		// between the headers and the ICRC is always a multiple of 4.
		return errPad
	}
	switch info.payload {
	case noPayload:
		if pad != 0 {
			return errPad
		}
		if rest != 0 {
			return errPayload
		}
	case fixedPayload:
		if rest-pad != atomicWritePayloadBytes {
			return errAtomicWrite
		}
	}
	off, err := f.extHeaders(info.Ext, off)
	if err != nil {
		return err
	}
	held := min(len(b), icrcOff-pad)
	f.Payload = b[off:held:held]
	if end <= len(b) {
		f.ICRC = binary.LittleEndian.Uint32(b[icrcOff:end])
	}
	return nil
}

// extHeaders sets the views of the extension headers ext names, from off in f.Buf on, and returns
// the offset after them; the bytes may end inside one (a capture's snap length).
func (f *Frame) extHeaders(ext Ext, off int) (int, error) {
	b := f.Buf
	// extOrder is in bit order, so the set bits, lowest first, are the headers in wire order.
	for e := ext; e != 0; e &= e - 1 {
		i := bits.TrailingZeros16(uint16(e))
		x := extOrder[i]
		if len(b) < off+x.len {
			return off, errCutExt[i]
		}
		v := b[off : off+x.len : off+x.len]
		switch x.ext {
		case ExtDETH:
			f.DETH = v
		case ExtFETH:
			f.FETH = v
		case ExtRETH:
			f.RETH = v
		case ExtAtomicETH:
			f.AtomicETH = v
		case ExtAETH:
			f.AETH = v
		case ExtAtomicAckETH:
			f.AtomicAckETH = v
		case ExtImmDt:
			f.ImmDt = v
		case ExtIETH:
			f.IETH = v
		case ExtCNP:
			f.CNPReserved = v
		}
		off += x.len
	}
	return off, nil
}

// Header returns the BTH and extension header fields of a parsed frame as a Header, the form
// Builder takes. Fields of headers the frame does not carry are zero.
func (f *Frame) Header() Header {
	h := f.BTH
	out := Header{
		Opcode: h.Opcode(), SE: h.SE(), MigReq: h.MigReq(), FECN: h.FECN(), BECN: h.BECN(),
		AckReq: h.AckReq(), PKey: h.PKey(), DestQP: h.DestQP(), PSN: h.PSN(),
	}
	if v := f.RETH; v != nil {
		out.VA, out.RKey, out.DMALen = v.VA(), v.RKey(), v.DMALen()
	}
	if v := f.AtomicETH; v != nil {
		out.VA, out.RKey, out.SwapAdd, out.Compare = v.VA(), v.RKey(), v.SwapAdd(), v.Compare()
	}
	if v := f.AETH; v != nil {
		out.Syndrome, out.MSN = v.Syndrome(), v.MSN()
	}
	if v := f.AtomicAckETH; v != nil {
		out.Orig = v.Orig()
	}
	if v := f.ImmDt; v != nil {
		out.Imm = v.Imm()
	}
	if v := f.IETH; v != nil {
		out.InvRKey = v.RKey()
	}
	if v := f.DETH; v != nil {
		out.QKey, out.SrcQP = v.QKey(), v.SrcQP()
	}
	if v := f.FETH; v != nil {
		out.FETH = v.Raw()
	}
	return out
}

// Path returns the link, IP and UDP fields of a parsed Ethernet frame as a Path, the form Builder
// takes.
func (f *Frame) Path() Path {
	p := Path{
		SrcIP: f.SrcIP(), DstIP: f.DstIP(), SrcPort: f.SrcPort(),
		TrafficClass: f.TrafficClass(), TTL: f.HopLimit(), FlowLabel: f.FlowLabel(),
		VLAN: f.VLAN, HasVLAN: f.HasVLAN,
	}
	if f.L3 >= EthernetLen {
		copy(p.DstMAC[:], f.Buf[0:6])
		copy(p.SrcMAC[:], f.Buf[6:12])
	}
	if !f.IPv6 {
		p.IPID = binary.BigEndian.Uint16(f.Buf[f.L3+4:])
	}
	return p
}
