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

// scratchLen is the size of the masked copy: the largest IP+UDP+BTH prefix (a 60-byte IPv4
// header with options, 80 bytes) plus what compute copies after it, and small packets whole.
const scratchLen = 256

// icrcScratch holds the masked copy of the headers. It lives inside the Parser rather than on the
// stack because hash/crc32 dispatches through a function value, which makes the compiler move any
// stack buffer passed to it onto the heap: one allocation per frame.
type icrcScratch struct {
	buf [scratchLen]byte
}

// compute returns the ICRC of the packet whose IP header starts at l3, BTH at bth, and whose
// ICRC field starts at icrcOff. Only the IP, UDP and BTH headers are copied (to mask them), with a
// few bytes after them; the rest is hashed in place, so the cost is one pass over the frame.
func (s *icrcScratch) compute(b []byte, l3, bth, icrcOff int, ipv6 bool) uint32 {
	hdrEnd := bth + BTHLen
	n := hdrEnd - l3
	// hash/crc32 uses carry-less multiplication only on runs of 64 bytes or more, in multiples of
	// 16; what is left over goes 8 bytes and then 1 byte at a time, several times slower per
	// byte. So the masked copy takes along some of what follows: all of it for a small packet
	// (one run), or enough for the copy to be such a run and the rest a multiple of 16 long.
	// Copying a few dozen bytes costs less than hashing them the slow way.
	rest := icrcOff - hdrEnd
	more := rest
	if n+rest > len(s.buf) {
		more = max((n+15)&^15, 64) - n
		more += (rest - more) & 15
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
	c := crc32.Update(ff8CRC, crc32.IEEETable, m)
	return crc32.Update(c, crc32.IEEETable, b[hdrEnd+more:icrcOff])
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
	c := crc32.Update(ff8CRC, crc32.IEEETable, b[l3:icrcOff])
	for i := range n {
		b[at[i]] = saved[i]
	}
	return c
}
