package nldev

import (
	"encoding/binary"
	"syscall"
)

// align rounds a length up to netlink's 4-byte alignment.
func align(n int) int { return (n + 3) &^ 3 }

// header writes a netlink header for a message of n bytes.
func header(n int, typ, flags uint16, seq, pid uint32) []byte {
	h := make([]byte, headerLen, n)
	binary.LittleEndian.PutUint32(h, uint32(n))
	binary.LittleEndian.PutUint16(h[4:], typ)
	binary.LittleEndian.PutUint16(h[6:], flags)
	binary.LittleEndian.PutUint32(h[8:], seq)
	binary.LittleEndian.PutUint32(h[12:], pid)
	return h
}

func nldevType(cmd uint16) uint16 { return clientNLDEV<<10 | cmd }

// single is a doit's reply: one message in a datagram of its own.
func single(r request, s Socket, cmd uint16, attrs []byte) []byte {
	return append(header(headerLen+len(attrs), nldevType(cmd), 0, r.seq, s.PortID), attrs...)
}

// dump is a dump's reply: each message flagged NLM_F_MULTI, as many to a datagram as fit in
// the 4096 bytes iproute2 reads at once, and NLMSG_DONE after the last.
func dump(r request, s Socket, cmd uint16, msgs [][]byte) [][]byte {
	done := append(header(headerLen+4, typeDone, flagMulti, r.seq, s.PortID), 0, 0, 0, 0)
	var out [][]byte
	var cur []byte
	add := func(m []byte) {
		if len(cur) > 0 && len(cur)+len(m) > maxDatagram {
			out = append(out, cur)
			cur = nil
		}
		cur = append(cur, m...)
	}
	for _, attrs := range msgs {
		add(append(header(headerLen+len(attrs), nldevType(cmd), flagMulti, r.seq, s.PortID), attrs...))
	}
	add(done)
	return append(out, cur)
}

// errorReply is NLMSG_ERROR for the request: errno 0 acknowledges it. It echoes the request's
// header, and its payload too when it reports an error on a socket without NETLINK_CAP_ACK.
func errorReply(r request, s Socket, errno syscall.Errno) []byte {
	echo, flags := r.msg, uint16(0)
	if errno == 0 || s.CapAck {
		echo, flags = r.msg[:headerLen], flagCapped
	}
	m := header(headerLen+4+len(echo), typeError, flags, r.seq, s.PortID)
	m = binary.LittleEndian.AppendUint32(m, uint32(-int32(errno)))
	return append(m, echo...)
}

// attrBuilder appends netlink attributes.
type attrBuilder struct{ buf []byte }

func (b *attrBuilder) attr(typ uint16, payload []byte) {
	b.buf = binary.LittleEndian.AppendUint16(b.buf, uint16(4+len(payload)))
	b.buf = binary.LittleEndian.AppendUint16(b.buf, typ)
	b.buf = append(b.buf, payload...)
	for len(b.buf)%4 != 0 {
		b.buf = append(b.buf, 0)
	}
}

func (b *attrBuilder) u8(typ uint16, v uint8) { b.attr(typ, []byte{v}) }
func (b *attrBuilder) u32(typ uint16, v uint32) {
	b.attr(typ, binary.LittleEndian.AppendUint32(nil, v))
}
func (b *attrBuilder) u64(typ uint16, v uint64) {
	b.attr(typ, binary.LittleEndian.AppendUint64(nil, v))
}

// str puts a NUL-terminated string, as the kernel's nla_put_string does.
func (b *attrBuilder) str(typ uint16, v string) { b.attr(typ, append([]byte(v), 0)) }

// chardev puts GET_CHARDEV's answer after any client attributes: the device number, the ABI
// version and the name, in the kernel's order.
func (b *attrBuilder) chardev(c Chardev, abi uint64) {
	b.u64(attrChardev, c.Dev)
	b.u64(attrChardevABI, abi)
	b.str(attrChardevName, c.Name)
}

// parseAttrs reads a request's attributes by number; false if one is malformed (a length
// short of its header or past the message) or of a known type with a payload too short for it.
func parseAttrs(b []byte) (map[uint16][]byte, bool) {
	attrs := map[uint16][]byte{}
	for len(b) >= 4 {
		n := int(binary.LittleEndian.Uint16(b))
		typ := binary.LittleEndian.Uint16(b[2:]) & 0x3fff // without NLA_F_NESTED and NLA_F_NET_BYTEORDER
		if n < 4 || n > len(b) {
			return nil, false
		}
		payload := b[4:n]
		if typ <= attrMax {
			if want := minLen(typ); len(payload) < want {
				return nil, false
			}
			attrs[typ] = payload
		}
		if align(n) >= len(b) {
			break
		}
		b = b[align(n):]
	}
	return attrs, true
}

// minLen is how many bytes an attribute of a request needs, by the kernel's policy.
func minLen(typ uint16) int {
	switch typ {
	case attrDevIndex, attrPortIndex, attrNdevIndex, attrUverbsDriverID:
		return 4
	case attrChardevType:
		return 1
	}
	return 0
}

func (r request) u32(typ uint16) (uint32, bool) {
	v, ok := r.attrs[typ]
	if !ok {
		return 0, false
	}
	return binary.LittleEndian.Uint32(v), true
}

// cString is a string attribute's text up to its NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
