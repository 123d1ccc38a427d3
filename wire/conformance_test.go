package wire

import (
	"encoding/binary"
	"testing"
)

// t1Frames are the frames T1 is checked on: one captured rxe frame per opcode (IPv4), and frames
// built for every opcode over IPv6 and over IPv4 in a VLAN (the captures have no IPv6).
func t1Frames(t *testing.T) map[string][]byte {
	out := map[string][]byte{}
	var p Parser
	var f Frame
	for _, name := range captureFiles {
		for _, b := range roceFrames(t, name) {
			if err := p.Parse(&f, b); err != nil {
				t.Fatal(err)
			}
			key := "rxe/" + f.Opcode.String()
			if _, ok := out[key]; !ok {
				out[key] = b
			}
		}
	}
	for _, c := range allCases() {
		if c.path == path4 || len(c.payload) > 61 {
			continue
		}
		b, err := NewBuilder(c.path).Build(make([]byte, 512), &c.hdr, c.payload)
		if err != nil {
			t.Fatal(err)
		}
		out["built/"+c.name] = b
	}
	return out
}

// maskedBits returns, for each byte offset of a parsed frame, which bits the ICRC does not cover.
func maskedBits(f *Frame) map[int]byte {
	m := map[int]byte{}
	l3, l4 := f.L3, f.L4
	if f.IPv6 {
		m[l3] = 0x0F // traffic class high nibble
		m[l3+1] = 0xFF
		m[l3+2] = 0xFF
		m[l3+3] = 0xFF // traffic class low nibble and flow label
		m[l3+7] = 0xFF // hop limit
	} else {
		m[l3+1] = 0xFF  // TOS: DSCP and ECN
		m[l3+8] = 0xFF  // TTL
		m[l3+10] = 0xFF // header checksum
		m[l3+11] = 0xFF
	}
	m[l4+6], m[l4+7] = 0xFF, 0xFF // UDP checksum
	m[f.BTHOff+4] = 0xFF          // FECN, BECN, reserved
	return m
}

// TestConformance holds the wire-level rules of the reference's conformance table.
func TestConformance(t *testing.T) {
	frames := t1Frames(t)

	// T1: what a switch may rewrite on the way does not change the ICRC.
	t.Run("T1_switch_rewrites_keep_icrc_valid", func(t *testing.T) {
		var p Parser
		var f Frame
		for name, orig := range frames {
			b := append([]byte(nil), orig...)
			if err := p.Parse(&f, b); err != nil {
				t.Fatal(err)
			}
			if f.IPv6 {
				// traffic class 0xB9 (DSCP 46, ECN CE), flow label 0x12345, hop limit 3
				v := binary.BigEndian.Uint32(b[f.L3:])
				binary.BigEndian.PutUint32(b[f.L3:], v&0xF0000000|0xB9<<20|0x12345)
				b[f.L3+7] = 3
			} else {
				b[f.L3+1] = 0xB9 // DSCP 46 with ECN CE, as a congested switch marks it
				b[f.L3+8]--      // a router hop
				b[f.L3+10], b[f.L3+11] = 0, 0
				binary.BigEndian.PutUint16(b[f.L3+10:], IPv4Checksum(b[f.L3:f.L4]))
			}
			binary.BigEndian.PutUint16(b[f.L4+6:], 0xBEEF) // a UDP checksum filled in
			BTH(b[f.BTHOff:]).SetFECN(true)
			BTH(b[f.BTHOff:]).SetBECN(true)
			if err := p.Parse(&f, b); err != nil {
				t.Errorf("%s: after rewriting the variant fields: %v", name, err)
			}
			if !f.BTH.FECN() || !f.BTH.BECN() || f.HopLimit() == orig[f.L3+8] {
				t.Errorf("%s: rewrite did not land", name)
			}
		}
	})

	// T1: every other bit from the IP header to the ICRC is covered. Flipping one either makes
	// the frame unparseable (a length, version, protocol, port or opcode that no longer fits) or
	// gives a bad ICRC; flipping one in the extension headers, payload, pad or ICRC always gives a
	// bad ICRC. Every bit of every frame is tried.
	t.Run("T1_covered_bit_flips_break_icrc", func(t *testing.T) {
		var p Parser
		var f Frame
		total, bad := 0, 0
		for name, orig := range frames {
			b := append([]byte(nil), orig...)
			if err := p.Parse(&f, b); err != nil {
				t.Fatal(err)
			}
			l3, bthEnd, end := f.L3, f.BTHOff+BTHLen, f.End
			masked := maskedBits(&f)
			for i := l3; i < end; i++ {
				for bit := 0; bit < 8; bit++ {
					mask := byte(1) << bit
					b[i] ^= mask
					err := p.Parse(&f, b)
					b[i] ^= mask
					total++
					switch {
					case masked[i]&mask != 0:
						if err != nil {
							t.Fatalf("%s: masked byte %d bit %d: %v", name, i-l3, bit, err)
						}
					case i >= bthEnd:
						if KindOf(err) != KindBadICRC {
							t.Fatalf("%s: byte %d (past the BTH) bit %d: %v, want bad ICRC", name, i-l3, bit, err)
						}
						bad++
					default:
						if err == nil {
							t.Fatalf("%s: covered byte %d bit %d flipped and the frame still verifies", name, i-l3, bit)
						}
						if KindOf(err) == KindBadICRC {
							bad++
						}
					}
				}
			}
		}
		t.Logf("%d bit flips over %d frames, %d reported bad ICRC, the rest unparseable or masked", total, len(frames), bad)
	})
}
