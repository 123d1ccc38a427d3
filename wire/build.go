package wire

import (
	"encoding/binary"
	"net/netip"
)

// Path is what stays the same for every frame of a connection: link and IP addresses, UDP source
// port and the IP fields a sender chooses. Zero TTL means 64 and zero PKey in a Header means the
// default partition 0xFFFF, so a zero value builds frames like rxe's.
type Path struct {
	SrcMAC, DstMAC [6]byte
	// VLAN is the 802.1Q tag control information, written when HasVLAN is set.
	VLAN    uint16
	HasVLAN bool
	// SrcIP and DstIP are both IPv4 or both IPv6; IPv4 is used when both are IPv4 (or 4-in-6).
	SrcIP, DstIP netip.Addr
	SrcPort      uint16
	// TrafficClass is the IPv4 TOS byte or the IPv6 traffic class (DSCP and ECN).
	TrafficClass uint8
	TTL          uint8
	FlowLabel    uint32
	// IPID is the IPv4 identification field.
	IPID uint16
}

// Header is every BTH and extension header field a frame may carry. Build writes the ones the
// opcode's headers hold and ignores the rest.
type Header struct {
	Opcode                 Opcode
	SE, MigReq, FECN, BECN bool
	AckReq                 bool
	PKey                   uint16
	DestQP, PSN            uint32

	// RETH, or the address and key of the AtomicETH.
	VA     uint64
	RKey   uint32
	DMALen uint32
	// AtomicETH operands.
	SwapAdd, Compare uint64
	// AETH.
	Syndrome Syndrome
	MSN      uint32
	// AtomicAckETH.
	Orig uint64
	// ImmDt.
	Imm uint32
	// IETH: the rkey to invalidate.
	InvRKey uint32
	// DETH.
	QKey, SrcQP uint32
	// FETH word (selectivity level and placement type).
	FETH uint32
}

// Builder writes frames for one Path. It keeps a small scratch area for the ICRC, so use one
// Builder per goroutine.
type Builder struct {
	Path Path
	icrc icrcScratch
}

// NewBuilder returns a Builder for the path.
func NewBuilder(p Path) *Builder { return &Builder{Path: p} }

func (b *Builder) ipv6() bool { return !(b.Path.SrcIP.Unmap().Is4() && b.Path.DstIP.Unmap().Is4()) }

func (b *Builder) l3() int {
	if b.Path.HasVLAN {
		return EthernetLen + VLANLen
	}
	return EthernetLen
}

// FrameLen is the length of the frame Build writes for the opcode and payload length: link, IP
// and UDP headers, BTH, extension headers, payload, pad and ICRC.
func (b *Builder) FrameLen(op Opcode, payloadLen int) int {
	ip := IPv4Len
	if b.ipv6() {
		ip = IPv6Len
	}
	return b.l3() + ip + UDPLen + BTHLen + op.Info().Ext.Len() + payloadLen + padFor(payloadLen) + ICRCLen
}

func padFor(n int) int { return -n & 3 }

// Build writes a whole frame into dst: headers in place, payload copied once, zero pad bytes,
// lengths and the IPv4 header checksum filled in, ICRC appended. It returns dst[:n]. It does not
// allocate.
func (b *Builder) Build(dst []byte, h *Header, payload []byte) ([]byte, error) {
	frame, slot, err := b.Begin(dst, h, len(payload))
	if err != nil {
		return nil, err
	}
	copy(slot, payload)
	b.Seal(frame)
	return frame, nil
}

// Begin writes every header of a frame with room for n payload bytes, and returns the frame and
// the payload slot inside it, so the engine can move data from memory straight into the frame.
// Call Seal once the slot is filled.
func (b *Builder) Begin(dst []byte, h *Header, n int) (frame, slot []byte, err error) {
	info := h.Opcode.Info()
	if info == nil {
		return nil, nil, errBuildOpcode
	}
	switch {
	case n < 0,
		info.payload == noPayload && n != 0,
		info.payload == fixedPayload && n != atomicWritePayloadBytes:
		return nil, nil, errBuildPayload
	}
	p := &b.Path
	v6 := b.ipv6()
	if !p.SrcIP.IsValid() || !p.DstIP.IsValid() {
		return nil, nil, errBuildAddr
	}
	total := b.FrameLen(h.Opcode, n)
	if total > len(dst) {
		return nil, nil, errBuildBuffer
	}
	l3 := b.l3()
	ipLen := total - l3
	if ipLen > 0xFFFF || (v6 && ipLen-IPv6Len > 0xFFFF) {
		return nil, nil, errBuildTooLarge
	}
	f := dst[:total]

	copy(f[0:6], p.DstMAC[:])
	copy(f[6:12], p.SrcMAC[:])
	off := 12
	if p.HasVLAN {
		binary.BigEndian.PutUint16(f[12:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(f[14:], p.VLAN)
		off = 16
	}
	ttl := p.TTL
	if ttl == 0 {
		ttl = 64
	}
	var l4 int
	if v6 {
		binary.BigEndian.PutUint16(f[off:], EtherTypeIPv6)
		ip := f[l3 : l3+IPv6Len]
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(p.TrafficClass)<<20|p.FlowLabel&0xFFFFF)
		binary.BigEndian.PutUint16(ip[4:], uint16(ipLen-IPv6Len))
		ip[6] = 17
		ip[7] = ttl
		s, d := p.SrcIP.As16(), p.DstIP.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		l4 = l3 + IPv6Len
	} else {
		binary.BigEndian.PutUint16(f[off:], EtherTypeIPv4)
		ip := f[l3 : l3+IPv4Len]
		ip[0] = 0x45
		ip[1] = p.TrafficClass
		binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
		binary.BigEndian.PutUint16(ip[4:], p.IPID)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF: RoCE never fragments
		ip[8] = ttl
		ip[9] = 17
		ip[10], ip[11] = 0, 0
		s, d := p.SrcIP.Unmap().As4(), p.DstIP.Unmap().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
		l4 = l3 + IPv4Len
	}
	udp := f[l4 : l4+UDPLen]
	binary.BigEndian.PutUint16(udp[0:], p.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(total-l4))
	udp[6], udp[7] = 0, 0 // RoCEv2 senders leave the UDP checksum out; the ICRC covers the packet

	bth := l4 + UDPLen
	pad := padFor(n)
	bh := BTH(f[bth : bth+BTHLen])
	bh[1], bh[4], bh[8] = 0, 0, 0
	bh.SetOpcode(h.Opcode)
	bh.SetSE(h.SE)
	bh.SetMigReq(h.MigReq)
	bh.SetPadCnt(pad)
	pkey := h.PKey
	if pkey == 0 {
		pkey = 0xFFFF
	}
	bh.SetPKey(pkey)
	bh.SetFECN(h.FECN)
	bh.SetBECN(h.BECN)
	bh.SetDestQP(h.DestQP)
	bh.SetAckReq(h.AckReq)
	bh.SetPSN(h.PSN)
	off = bth + BTHLen
	off += writeExt(f[off:], info.Ext, h)
	clear(f[off+n : off+n+pad])
	return f, f[off : off+n : off+n], nil
}

// Seal computes the ICRC of a frame written by Begin and stores it in the last four bytes.
func (b *Builder) Seal(frame []byte) {
	l3 := b.l3()
	v6 := b.ipv6()
	bth := l3 + IPv4Len + UDPLen
	if v6 {
		bth = l3 + IPv6Len + UDPLen
	}
	end := len(frame) - ICRCLen
	binary.LittleEndian.PutUint32(frame[end:], b.icrc.compute(frame, l3, bth, end, v6))
}

// writeExt writes the extension headers of the set from h at the start of dst and returns their
// length. Every byte is written, reserved ones as zero, so dst needs no clearing first.
func writeExt(dst []byte, ext Ext, h *Header) int {
	off := 0
	for _, x := range extOrder {
		if ext&x.ext == 0 {
			continue
		}
		v := dst[off : off+x.len]
		switch x.ext {
		case ExtDETH:
			DETH(v).SetQKey(h.QKey)
			DETH(v).SetSrcQP(h.SrcQP)
		case ExtFETH:
			FETH(v).SetRaw(h.FETH)
		case ExtRETH:
			r := RETH(v)
			r.SetVA(h.VA)
			r.SetRKey(h.RKey)
			r.SetDMALen(h.DMALen)
		case ExtAtomicETH:
			a := AtomicETH(v)
			a.SetVA(h.VA)
			a.SetRKey(h.RKey)
			a.SetSwapAdd(h.SwapAdd)
			a.SetCompare(h.Compare)
		case ExtAETH:
			AETH(v).SetSyndrome(h.Syndrome)
			AETH(v).SetMSN(h.MSN)
		case ExtAtomicAckETH:
			AtomicAckETH(v).SetOrig(h.Orig)
		case ExtImmDt:
			ImmDt(v).SetImm(h.Imm)
		case ExtIETH:
			IETH(v).SetRKey(h.InvRKey)
		case ExtCNP:
			clear(v)
		}
		off += x.len
	}
	return off
}

// ipv4Checksum is the Internet checksum of an IPv4 header whose checksum field is zero.
func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return ^uint16(s)
}
