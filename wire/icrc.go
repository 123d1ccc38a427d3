package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC is the IEEE CRC-32 over the packet as an InfiniBand switch would not change it: 8 bytes
// of 0xFF in place of the LRH, the IP header with its variant fields (IPv4 TOS, TTL and header
// checksum; IPv6 traffic class, flow label and hop limit) set to all ones, the UDP header with its
// checksum set to 0xFFFF, the BTH with byte 4 (FECN, BECN, reserved) set to 0xFF, then everything
// up to the ICRC unchanged. It is stored little-endian (rxe_icrc.c; reference §7.5).

// ff8CRC is the CRC state after the 8 x 0xFF prefix; starting there saves hashing it per frame.
var ff8CRC = crc32.Update(0, crc32.IEEETable, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})

// maxMaskedLen is the largest IP+UDP+BTH prefix: a 60-byte IPv4 header with options.
const maxMaskedLen = 60 + UDPLen + BTHLen

// icrcScratch holds the masked copy of the headers. It lives inside a Parser or Builder rather
// than on the stack because hash/crc32 dispatches through a function value, which makes the
// compiler move any stack buffer passed to it onto the heap: one allocation per frame.
type icrcScratch struct {
	buf [maxMaskedLen]byte
}

// compute returns the ICRC of the packet whose IP header starts at l3, BTH at bth, and whose
// ICRC field starts at icrcOff. Only the IP, UDP and BTH headers are copied (to mask them); the
// rest is hashed in place, so the cost is one pass over the frame.
func (s *icrcScratch) compute(b []byte, l3, bth, icrcOff int, ipv6 bool) uint32 {
	n := bth + BTHLen - l3
	m := s.buf[:n]
	copy(m, b[l3:bth+BTHLen])
	if ipv6 {
		m[0] |= 0x0F // traffic class, high nibble
		m[1] = 0xFF  // traffic class, low nibble; flow label, high nibble
		m[2] = 0xFF  // flow label
		m[3] = 0xFF
		m[7] = 0xFF // hop limit
	} else {
		m[1] = 0xFF // TOS (DSCP and ECN)
		m[8] = 0xFF // TTL
		m[10] = 0xFF
		m[11] = 0xFF // header checksum
	}
	udp := n - BTHLen - UDPLen
	m[udp+6] = 0xFF
	m[udp+7] = 0xFF // UDP checksum
	m[n-BTHLen+4] = 0xFF
	c := crc32.Update(ff8CRC, crc32.IEEETable, m)
	return crc32.Update(c, crc32.IEEETable, b[bth+BTHLen:icrcOff])
}

// ICRC recomputes the ICRC of a parsed frame. It does not allocate.
func (p *Parser) ICRC(f *Frame) uint32 {
	return p.icrc.compute(f.Buf, f.L3, f.BTHOff, f.End-ICRCLen, f.IPv6)
}

// Reseal recomputes and stores the ICRC of a parsed frame after its bytes were changed in place,
// as a switch or a test rewriting fields would.
func (p *Parser) Reseal(f *Frame) {
	binary.LittleEndian.PutUint32(f.Buf[f.End-ICRCLen:], p.ICRC(f))
	f.ICRC = binary.LittleEndian.Uint32(f.Buf[f.End-ICRCLen:])
}
