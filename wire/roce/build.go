package roce

import (
	"encoding/binary"
	"math/bits"
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

// Builder writes frames for one Path. It keeps the link, IP and UDP headers of its Path as a
// template (rebuilt when Path changes, IPID aside), so a frame costs a copy of that template and
// the transport headers. Use one Builder per goroutine.
type Builder struct {
	Path Path

	tmplFor Path // the Path the template was made from (its IPID is not part of it)
	tmplOK  bool
	tmpl    [EthernetLen + VLANLen + IPv6Len + UDPLen]byte
	l3, l4  int
	v6      bool
	// ipSum is the IPv4 header's ones'-complement sum without total length, ID and checksum.
	ipSum uint32
}

// sameTemplate says whether two paths give the same header template: every field but IPID,
// which each frame writes, is the same. Written out rather than a struct comparison of copies,
// which the compiler makes a call to memeqbody: this runs for every frame built.
func (p *Path) sameTemplate(q *Path) bool {
	return p.SrcMAC == q.SrcMAC && p.DstMAC == q.DstMAC && p.VLAN == q.VLAN && p.HasVLAN == q.HasVLAN &&
		p.SrcIP == q.SrcIP && p.DstIP == q.DstIP && p.SrcPort == q.SrcPort &&
		p.TrafficClass == q.TrafficClass && p.TTL == q.TTL && p.FlowLabel == q.FlowLabel
}

// NewBuilder returns a Builder for the path.
func NewBuilder(p Path) *Builder { return &Builder{Path: p} }

// prepare rebuilds the template when Path has changed since the last frame.
func (b *Builder) prepare() error {
	if b.tmplOK && b.Path.sameTemplate(&b.tmplFor) {
		return nil
	}
	p := &b.Path
	if !p.SrcIP.IsValid() || !p.DstIP.IsValid() {
		return errBuildAddr
	}
	b.tmplOK = false
	b.v6 = !(p.SrcIP.Unmap().Is4() && p.DstIP.Unmap().Is4())
	t := b.tmpl[:]
	clear(t)
	copy(t[0:6], p.DstMAC[:])
	copy(t[6:12], p.SrcMAC[:])
	off := 12
	if p.HasVLAN {
		binary.BigEndian.PutUint16(t[12:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(t[14:], p.VLAN)
		off = 16
	}
	b.l3 = off + 2
	ttl := p.TTL
	if ttl == 0 {
		ttl = 64
	}
	if b.v6 {
		binary.BigEndian.PutUint16(t[off:], EtherTypeIPv6)
		ip := t[b.l3 : b.l3+IPv6Len]
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(p.TrafficClass)<<20|p.FlowLabel&0xFFFFF)
		ip[6] = 17
		ip[7] = ttl
		s, d := p.SrcIP.As16(), p.DstIP.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		b.l4 = b.l3 + IPv6Len
	} else {
		binary.BigEndian.PutUint16(t[off:], EtherTypeIPv4)
		ip := t[b.l3 : b.l3+IPv4Len]
		ip[0] = 0x45
		ip[1] = p.TrafficClass
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF: RoCE never fragments
		ip[8] = ttl
		ip[9] = 17
		s, d := p.SrcIP.Unmap().As4(), p.DstIP.Unmap().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		b.ipSum = onesSum(ip)
		b.l4 = b.l3 + IPv4Len
	}
	udp := t[b.l4 : b.l4+UDPLen]
	binary.BigEndian.PutUint16(udp[0:], p.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], UDPPort)
	// The UDP checksum stays 0: RoCEv2 senders leave it out, the ICRC covers the packet.
	b.tmplFor, b.tmplOK = b.Path, true
	return nil
}

// FrameLen is the length of the frame Build writes for the opcode and payload length: link, IP
// and UDP headers, BTH, extension headers, payload, pad and ICRC. It is 0 for an unknown opcode
// or a Path without addresses.
func (b *Builder) FrameLen(op Opcode, payloadLen int) int {
	info := op.Info()
	if info == nil || b.prepare() != nil {
		return 0
	}
	return b.frameLen(info, payloadLen)
}

func (b *Builder) frameLen(info *OpcodeInfo, n int) int {
	return b.l4 + UDPLen + BTHLen + info.Ext.Len() + n + PadFor(n) + ICRCLen
}

// PadFor is the pad count a payload of n bytes needs to end on a 4-byte boundary.
func PadFor(n int) int { return -n & 3 }

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
		return nil, nil, ErrBuildOpcode
	}
	switch {
	case n < 0,
		info.payload == noPayload && n != 0,
		info.payload == fixedPayload && n != atomicWritePayloadBytes:
		return nil, nil, errBuildPayload
	}
	if err := b.prepare(); err != nil {
		return nil, nil, err
	}
	total := b.frameLen(info, n)
	if total > len(dst) {
		return nil, nil, errBuildBuffer
	}
	l3, l4 := b.l3, b.l4
	if total-l3 > 0xFFFF || (b.v6 && total-l4 > 0xFFFF) {
		return nil, nil, errBuildTooLarge
	}
	f := dst[:total]
	copy(f, b.tmpl[:l4+UDPLen])
	if b.v6 {
		binary.BigEndian.PutUint16(f[l3+4:], uint16(total-l4))
	} else {
		ipLen, id := uint16(total-l3), b.Path.IPID
		binary.BigEndian.PutUint16(f[l3+2:], ipLen)
		binary.BigEndian.PutUint16(f[l3+4:], id)
		binary.BigEndian.PutUint16(f[l3+10:], ^fold(b.ipSum+uint32(ipLen)+uint32(id)))
	}
	binary.BigEndian.PutUint16(f[l4+4:], uint16(total-l4))

	bth := l4 + UDPLen
	pad := PadFor(n)
	pkey := h.PKey
	if pkey == 0 {
		pkey = 0xFFFF
	}
	bh := f[bth : bth+BTHLen]
	bh[0] = byte(h.Opcode)
	bh[1] = flag(h.SE, 0x80) | flag(h.MigReq, 0x40) | byte(pad)<<4
	binary.BigEndian.PutUint16(bh[2:], pkey)
	binary.BigEndian.PutUint32(bh[4:], uint32(flag(h.FECN, 0x80)|flag(h.BECN, 0x40))<<24|h.DestQP&PSNMask)
	binary.BigEndian.PutUint32(bh[8:], uint32(flag(h.AckReq, 0x80))<<24|h.PSN&PSNMask)
	off := bth + BTHLen
	if info.Ext != 0 {
		off += WriteExt(f[off:], info.Ext, h)
	}
	clear(f[off+n : off+n+pad])
	return f, f[off : off+n : off+n], nil
}

func flag(v bool, bit byte) byte {
	if v {
		return bit
	}
	return 0
}

// Seal computes the ICRC of a frame written by Begin and stores it in the last four bytes.
func (b *Builder) Seal(frame []byte) {
	end := len(frame) - ICRCLen
	binary.LittleEndian.PutUint32(frame[end:], icrc(frame, b.l3, b.l4+UDPLen, end, b.v6))
}

// WriteExt writes the extension headers of the set from h at the start of dst and returns their
// length. Every byte is written, reserved ones as zero, so dst needs no clearing first.
func WriteExt(dst []byte, ext Ext, h *Header) int {
	off := 0
	for e := ext; e != 0; e &= e - 1 { // lowest bit first: wire order (see extOrder)
		x := extOrder[bits.TrailingZeros16(uint16(e))]
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

// IPv4Checksum is the Internet checksum of an IPv4 header whose checksum field is zero.
func IPv4Checksum(h []byte) uint16 { return ^fold(onesSum(h)) }

// onesSum adds the big-endian 16-bit words of b without folding the carries.
func onesSum(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	return s
}

// fold folds the carries of a ones'-complement sum into 16 bits.
func fold(s uint32) uint16 {
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}
