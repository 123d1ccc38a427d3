package roce

import "encoding/binary"

// Captures of RDMA traffic usually keep only the first bytes of each frame (tcpdump -s 128): the
// BTH and its extension headers are there, the payload and the ICRC are not. ParseCaptured reads
// such a frame for what it holds; the lengths come from the IP and UDP headers.

// Errors for a frame whose capture ends inside its transport headers. Their Kind is KindShort;
// CutInside names the header.
var (
	errCutBTH = newErr(KindShort, "the capture ends inside the BTH")
	errCutExt = [len(extOrder)]*Error{
		newErr(KindShort, "the capture ends inside the DETH"),
		newErr(KindShort, "the capture ends inside the FETH"),
		newErr(KindShort, "the capture ends inside the RETH"),
		newErr(KindShort, "the capture ends inside the AtomicETH"),
		newErr(KindShort, "the capture ends inside the AETH"),
		newErr(KindShort, "the capture ends inside the AtomicAckETH"),
		newErr(KindShort, "the capture ends inside the ImmDt"),
		newErr(KindShort, "the capture ends inside the IETH"),
		newErr(KindShort, "the capture ends inside the CNP reserved bytes"),
	}
)

// cutNames names the header each error that means "the bytes end inside a header" stops in.
var cutNames = func() map[*Error]string {
	m := map[*Error]string{
		errShortEthernet: "Ethernet header",
		errShortVLAN:     "802.1Q tag",
		errShortIPv4:     "IPv4 header",
		errShortIPv6:     "IPv6 header",
		errShortUDP:      "UDP header",
		errCutBTH:        "BTH",
	}
	names := [len(extOrder)]string{"DETH", "FETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNP reserved bytes"}
	for i, e := range errCutExt {
		m[e] = names[i]
	}
	return m
}()

// CutInside returns the header in which the bytes given to Parse, ParseIP or ParseCaptured
// ended: "Ethernet header", "802.1Q tag", "IPv4 header", "IPv6 header", "UDP header", "BTH",
// "RETH" and the other extension headers. It returns "" for nil and for every other error,
// among them the ones where the frame's own lengths leave no room for a header (those frames are
// malformed, whatever the capture held).
func CutInside(err error) string {
	if e, ok := err.(*Error); ok {
		return cutNames[e]
	}
	return ""
}

// ParseCaptured parses the first bytes, b, of an Ethernet frame that was wireLen bytes long on
// the wire, as a capture with a snap length records it. When b holds the whole IP packet it is
// Parse. Otherwise it checks what Parse checks except what needs the missing bytes: the ICRC and
// the pad bytes. On success f.End is the end of the IP packet (past len(b): Truncated says so),
// every header view is set, f.Payload is the part of the payload the capture holds, PayloadLen
// its length on the wire, and f.ICRC is 0. When b ends inside a header, the error is KindShort,
// CutInside names the header, and f holds the headers before it. An IP length beyond wireLen is
// the frame's fault, not the capture's: KindShort, "frame shorter than the IP length".
func (p *Parser) ParseCaptured(f *Frame, b []byte, wireLen int) error {
	err := p.Parse(f, b)
	if err != errShortIPPayload || wireLen <= len(b) {
		return err
	}
	return p.captured(f, wireLen-f.L3)
}

// ParseCapturedIP is ParseCaptured for a raw IPv4 or IPv6 packet of wireLen bytes.
func (p *Parser) ParseCapturedIP(f *Frame, b []byte, wireLen int) error {
	err := p.ParseIP(f, b)
	if err != errShortIPPayload || wireLen <= len(b) {
		return err
	}
	return p.captured(f, wireLen-f.L3)
}

// captured finishes the parse of a frame whose IP and UDP headers Parse has read, but whose IP
// packet the capture cut short. ipLen is the most the IP packet can be (what the wire held from
// its first byte).
func (p *Parser) captured(f *Frame, ipLen int) error {
	b, l3, l4 := f.Buf, f.L3, f.L4
	var end int
	if f.IPv6 {
		end = l4 + int(binary.BigEndian.Uint16(b[l3+4:]))
	} else {
		end = l3 + int(binary.BigEndian.Uint16(b[l3+2:]))
	}
	if end-l3 > ipLen {
		return errShortIPPayload
	}
	if int(binary.BigEndian.Uint16(b[l4+4:])) != end-l4 {
		return errUDPLength
	}
	return ParseTransport(f, l4+UDPLen, end)
}

// Truncated says whether f.Buf ends before the frame's IP packet does: a frame ParseCaptured read
// from a capture that kept only its first bytes. Its ICRC was not checked.
func (f *Frame) Truncated() bool { return f.End > len(f.Buf) }

// PayloadLen is the length of the payload on the wire, pad excluded: len(f.Payload) for a whole
// frame, more for a Truncated one. It is meaningful once the frame parsed (or failed only its
// ICRC), and 0 before the opcode is known.
func (f *Frame) PayloadLen() int {
	if f.Info == nil {
		return 0
	}
	return f.End - ICRCLen - f.Pad - (f.BTHOff + BTHLen + f.Info.Ext.Len())
}
