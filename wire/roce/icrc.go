package roce

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC is the IEEE CRC-32 over the packet as an InfiniBand switch would not change it: 8 bytes
// of 0xFF in place of the LRH, the IP header with its variant fields (IPv4 TOS, TTL and header
// checksum; IPv6 traffic class, flow label and hop limit) set to all ones, the UDP header with its
// checksum set to 0xFFFF, the BTH with byte 4 (FECN, BECN, reserved) set to 0xFF, then everything
// up to the ICRC unchanged. It is stored little-endian (rxe_icrc.c; reference §7.5).
//
// The masked IP, UDP and BTH headers are never written anywhere: icrc reads them from the frame a
// word at a time and ORs each word with a precomputed mask before hashing it. Writing a masked copy
// (or masking the frame in place) and hashing it right away made the CPU wait for every store the
// hash then read, which cost more than hashing the headers; and the frame stays read-only, so a
// parser never writes its input.

// ff8CRC is the CRC state after the 8 x 0xFF prefix; starting there saves hashing it per frame.
var ff8CRC = crc32.Update(0, crc32.IEEETable, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})

// maxMaskedLen is the largest IP+UDP+BTH prefix: a 60-byte IPv4 header with options.
const maxMaskedLen = 60 + UDPLen + BTHLen

// headerMask is, byte for byte over the IP, UDP and BTH headers, the bits the ICRC sees as ones.
type headerMask [maxMaskedLen]byte

// ipv4Masks holds one mask per IPv4 header length (IHL 5 to 15); ipv6Mask the IPv6 one.
var (
	ipv4Masks [16]headerMask
	ipv6Mask  headerMask
)

func init() {
	for ihl := 5; ihl < 16; ihl++ {
		m := &ipv4Masks[ihl]
		m[1] = 0xFF  // TOS (DSCP and ECN)
		m[8] = 0xFF  // TTL
		m[10] = 0xFF // header checksum
		m[11] = 0xFF
		maskUDPAndBTH(m, ihl*4)
	}
	ipv6Mask[0] = 0x0F // traffic class, high nibble
	ipv6Mask[1] = 0xFF // traffic class, low nibble; flow label, high nibble
	ipv6Mask[2] = 0xFF // flow label
	ipv6Mask[3] = 0xFF
	ipv6Mask[7] = 0xFF // hop limit
	maskUDPAndBTH(&ipv6Mask, IPv6Len)
}

func maskUDPAndBTH(m *headerMask, udp int) {
	m[udp+6] = 0xFF // UDP checksum
	m[udp+7] = 0xFF
	m[udp+UDPLen+4] = 0xFF // BTH byte 4: FECN, BECN, reserved
}

// icrc returns the ICRC of the packet whose IP header starts at l3 and BTH at bth, with its ICRC
// field at icrcOff. It reads the frame once and writes nothing.
func icrc(b []byte, l3, bth, icrcOff int, ipv6 bool) uint32 {
	hdrEnd := bth + BTHLen
	mask := &ipv6Mask
	if !ipv6 {
		mask = &ipv4Masks[(bth-UDPLen-l3)/4]
	}
	h := b[l3:hdrEnd]
	m := mask[:len(h)]
	// Headers are whole 4-byte words: 8 bytes a step, then 4 if one is left (slicing-by-8/4).
	t := &crcTable8
	c := ^ff8CRC
	for len(h) >= 8 {
		c ^= binary.LittleEndian.Uint32(h) | binary.LittleEndian.Uint32(m)
		hi := binary.LittleEndian.Uint32(h[4:]) | binary.LittleEndian.Uint32(m[4:])
		c = t[0][hi>>24] ^ t[1][hi>>16&0xFF] ^ t[2][hi>>8&0xFF] ^ t[3][hi&0xFF] ^
			t[4][c>>24] ^ t[5][c>>16&0xFF] ^ t[6][c>>8&0xFF] ^ t[7][c&0xFF]
		h, m = h[8:], m[8:]
	}
	if len(h) >= 4 {
		c ^= binary.LittleEndian.Uint32(h) | binary.LittleEndian.Uint32(m)
		c = t[0][c>>24] ^ t[1][c>>16&0xFF] ^ t[2][c>>8&0xFF] ^ t[3][c&0xFF]
	}
	return crcUpdate(^c, b[hdrEnd:icrcOff])
}

// ICRC recomputes the ICRC of a parsed frame. It does not allocate.
func (p *Parser) ICRC(f *Frame) uint32 {
	return icrc(f.Buf, f.L3, f.BTHOff, f.End-ICRCLen, f.IPv6)
}

// Reseal recomputes and stores the ICRC of a parsed frame after its bytes were changed in place,
// as a switch or a test rewriting fields would.
func (p *Parser) Reseal(f *Frame) {
	binary.LittleEndian.PutUint32(f.Buf[f.End-ICRCLen:], p.ICRC(f))
	f.ICRC = binary.LittleEndian.Uint32(f.Buf[f.End-ICRCLen:])
}

// SealFrame computes and stores the ICRC of a frame whose every other byte is written: one the
// engine built and left for its link to seal (engine.UnsealedLink), which seals it only when
// something will read it. It reports the parse error of a frame that is not RoCEv2, and then
// writes nothing.
func SealFrame(frame []byte) error {
	var p Parser
	var f Frame
	if err := p.ParseHeaders(&f, frame); err != nil {
		return err
	}
	p.Reseal(&f)
	return nil
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
