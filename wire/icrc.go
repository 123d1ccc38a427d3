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

// scratchLen is the size of the masked copy: at least the largest IP+UDP+BTH prefix (a 60-byte
// IPv4 header with options, 80 bytes), and small packets whole.
const scratchLen = 256

// icrcScratch holds the masked copy of the headers. It lives inside the Parser rather than on the
// stack because hash/crc32 dispatches through a function value, which makes the compiler move any
// stack buffer passed to it onto the heap: one allocation per frame.
type icrcScratch struct {
	buf [scratchLen]byte
}

// compute returns the ICRC of the packet whose IP header starts at l3, BTH at bth, and whose
// ICRC field starts at icrcOff. Only the IP, UDP and BTH headers of a large packet are copied (to
// mask them); the rest is hashed in place, so the cost is one pass over the frame.
func (s *icrcScratch) compute(b []byte, l3, bth, icrcOff int, ipv6 bool) uint32 {
	hdrEnd := bth + BTHLen
	n := hdrEnd - l3
	// A small packet is copied whole, so that it is hashed in one run: a second call costs more
	// than copying a few dozen bytes. A large one has only its headers copied; the rest is hashed
	// in place.
	rest := icrcOff - hdrEnd
	more := rest
	if n+rest > len(s.buf) {
		more = 0
	}
	m := s.buf[:n+more]
	copy(m, b[l3:hdrEnd+more])
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
	return crcUpdate(crcUpdate(ff8CRC, m), b[hdrEnd+more:icrcOff])
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

// icrcInPlace computes the ICRC of a frame the caller owns and may write: it puts the masked
// values into the frame itself, hashes from the IP header to the ICRC in one run, and puts the
// real values back. One run over the frame costs less than a masked copy plus a second run, so
// the Builder, which owns the frame it seals, uses this; the Parser never writes its input.
func icrcInPlace(b []byte, l3, bth, icrcOff int, ipv6 bool) uint32 {
	var at [8]int
	var saved [8]byte
	var set [8]byte
	n := 0
	put := func(off int, mask byte) {
		at[n], saved[n], set[n] = off, b[off], b[off]|mask
		n++
	}
	if ipv6 {
		put(l3, 0x0F)
		put(l3+1, 0xFF)
		put(l3+2, 0xFF)
		put(l3+3, 0xFF)
		put(l3+7, 0xFF)
	} else {
		put(l3+1, 0xFF)
		put(l3+8, 0xFF)
		put(l3+10, 0xFF)
		put(l3+11, 0xFF)
	}
	put(bth-2, 0xFF)
	put(bth-1, 0xFF)
	put(bth+4, 0xFF)
	for i := range n {
		b[at[i]] = set[i]
	}
	c := crcUpdate(ff8CRC, b[l3:icrcOff])
	for i := range n {
		b[at[i]] = saved[i]
	}
	return c
}

// crcTable8 is the slicing-by-8 table of the reflected IEEE polynomial, derived from
// crc32.IEEETable.
var crcTable8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for j := 1; j < 8; j++ {
			c = t[0][c&0xFF] ^ c>>8
			t[j][i] = c
		}
	}
	return t
}()

// crcUpdate continues a CRC-32 (in crc32.Update's convention) over p. Runs of 64 bytes or more go
// to hash/crc32, which hashes their multiple-of-16 part with carry-less multiplication. What is
// left, and short runs, are hashed here 8 and 4 bytes at a time: hash/crc32 would take the last
// 1 to 8 of them a byte at a time, and a RoCE packet, a whole number of 4-byte words from the IP
// header on, always leaves 4, 8 or 12. On the ACKs and small sends that make up most packets of
// an RC connection that is a tenth of the cost of the frame.
func crcUpdate(crc uint32, p []byte) uint32 {
	if len(p) >= 64 {
		k := len(p) &^ 15
		crc = crc32.Update(crc, crc32.IEEETable, p[:k])
		p = p[k:]
	}
	if len(p) == 0 {
		return crc
	}
	t := &crcTable8
	c := ^crc
	for len(p) >= 8 {
		c ^= binary.LittleEndian.Uint32(p)
		c = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][c>>24] ^ t[5][c>>16&0xFF] ^ t[6][c>>8&0xFF] ^ t[7][c&0xFF]
		p = p[8:]
	}
	if len(p) >= 4 {
		c ^= binary.LittleEndian.Uint32(p)
		c = t[0][c>>24] ^ t[1][c>>16&0xFF] ^ t[2][c>>8&0xFF] ^ t[3][c&0xFF]
		p = p[4:]
	}
	for _, v := range p {
		c = t[0][byte(c)^v] ^ c>>8
	}
	return ^c
}
