package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestViews writes every field of every header through its setter and checks the exact bytes,
// then reads them back through the getters.
func TestViews(t *testing.T) {
	bth := BTH(make([]byte, BTHLen))
	bth.SetOpcode(RCSendLastInv)
	bth.SetSE(true)
	bth.SetMigReq(true)
	bth.SetPadCnt(3)
	bth.SetPKey(0x8001)
	bth.SetFECN(true)
	bth.SetBECN(true)
	bth.SetDestQP(0xFFABCDEF) // only 24 bits fit
	bth.SetAckReq(true)
	bth.SetPSN(0x123456)
	if want := mustHex(t, "16f08001c0abcdef80123456"); !bytes.Equal(bth, want) {
		t.Errorf("BTH %x, want %x", []byte(bth), want)
	}
	if bth.Opcode() != RCSendLastInv || !bth.SE() || !bth.MigReq() || bth.PadCnt() != 3 || bth.TVer() != 0 ||
		bth.PKey() != 0x8001 || !bth.FECN() || !bth.BECN() || bth.DestQP() != 0xABCDEF || !bth.AckReq() || bth.PSN() != 0x123456 {
		t.Error("BTH getters")
	}
	bth.SetSE(false)
	bth.SetFECN(false)
	bth.SetPadCnt(1)
	if bth[1] != 0x50 || bth[4] != 0x40 {
		t.Errorf("BTH clear bits: %x", []byte(bth))
	}

	reth := RETH(make([]byte, RETHLen))
	reth.SetVA(0x0123456789ABCDEF)
	reth.SetRKey(0xDEADBEEF)
	reth.SetDMALen(0x80000000)
	if want := mustHex(t, "0123456789abcdefdeadbeef80000000"); !bytes.Equal(reth, want) {
		t.Errorf("RETH %x", []byte(reth))
	}
	if reth.VA() != 0x0123456789ABCDEF || reth.RKey() != 0xDEADBEEF || reth.DMALen() != 0x80000000 {
		t.Error("RETH getters")
	}

	aeth := AETH(make([]byte, AETHLen))
	aeth.SetSyndrome(NAKRemoteAccess)
	aeth.SetMSN(0x01020304)
	if want := mustHex(t, "62020304"); !bytes.Equal(aeth, want) {
		t.Errorf("AETH %x", []byte(aeth))
	}
	if aeth.Syndrome() != NAKRemoteAccess || aeth.MSN() != 0x020304 || aeth.Syndrome().Type() != SyndromeNAK || aeth.Syndrome().Value() != 2 {
		t.Error("AETH getters")
	}

	at := AtomicETH(make([]byte, AtomicETHLen))
	at.SetVA(0x1000)
	at.SetRKey(0x42)
	at.SetSwapAdd(0x1111111111111111)
	at.SetCompare(0x2222222222222222)
	if want := mustHex(t, "0000000000001000"+"00000042"+"1111111111111111"+"2222222222222222"); !bytes.Equal(at, want) {
		t.Errorf("AtomicETH %x", []byte(at))
	}
	if at.VA() != 0x1000 || at.RKey() != 0x42 || at.SwapAdd() != 0x1111111111111111 || at.Compare() != 0x2222222222222222 {
		t.Error("AtomicETH getters")
	}

	ack := AtomicAckETH(make([]byte, AtomicAckETHLen))
	ack.SetOrig(0xFEDCBA9876543210)
	if want := mustHex(t, "fedcba9876543210"); !bytes.Equal(ack, want) || ack.Orig() != 0xFEDCBA9876543210 {
		t.Errorf("AtomicAckETH %x", []byte(ack))
	}

	imm := ImmDt(make([]byte, ImmDtLen))
	imm.SetImm(0xCAFEF00D)
	ieth := IETH(make([]byte, IETHLen))
	ieth.SetRKey(0x00ABCD07)
	if !bytes.Equal(imm, mustHex(t, "cafef00d")) || imm.Imm() != 0xCAFEF00D || !bytes.Equal(ieth, mustHex(t, "00abcd07")) || ieth.RKey() != 0x00ABCD07 {
		t.Errorf("ImmDt %x IETH %x", []byte(imm), []byte(ieth))
	}

	deth := DETH(bytes.Repeat([]byte{0xFF}, DETHLen))
	deth.SetQKey(0x80010000)
	deth.SetSrcQP(0x000015)
	if want := mustHex(t, "8001000000000015"); !bytes.Equal(deth, want) || deth.QKey() != 0x80010000 || deth.SrcQP() != 0x15 {
		t.Errorf("DETH %x", []byte(deth))
	}

	feth := FETH(make([]byte, FETHLen))
	feth.SetRaw(0x12)
	if feth.SelectivityLevel() != 1 || feth.PlacementType() != 2 || !bytes.Equal(feth, mustHex(t, "00000012")) {
		t.Errorf("FETH %x", []byte(feth))
	}
}

// TestParseErrors: every malformed case gets its kind, and only the frames that are addressed to
// UDP 4791 are marked RoCE.
func TestParseErrors(t *testing.T) {
	good := func() []byte {
		h := Header{Opcode: RCSendOnly, DestQP: 0x11, PSN: 1}
		b, err := NewBuilder(path4).Build(make([]byte, 256), &h, []byte("hello")) // 5 bytes, pad 3
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const l3, l4, bth = 14, 34, 42
	reseal := func(b []byte) []byte {
		var p Parser
		var f Frame
		_ = p.Parse(&f, b)
		p.Reseal(&f)
		return b
	}
	for _, c := range []struct {
		name string
		mod  func([]byte) []byte
		kind Kind
		roce bool
	}{
		{"ok", func(b []byte) []byte { return b }, 0, true},
		{"ethernet trailer", func(b []byte) []byte { return append(b, 0, 0, 0, 0) }, 0, true},
		{"short ethernet", func(b []byte) []byte { return b[:10] }, KindShort, false},
		{"short ip", func(b []byte) []byte { return b[:l3+10] }, KindShort, false},
		{"short udp", func(b []byte) []byte { return b[:l4+4] }, KindShort, false},
		{"cut frame", func(b []byte) []byte { return b[:len(b)-1] }, KindShort, true},
		{"arp", func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }, KindNotRoCE, false},
		{"tcp", func(b []byte) []byte { b[l3+9] = 6; return b }, KindNotRoCE, false},
		{"other port", func(b []byte) []byte { b[l4+3]++; return b }, KindNotRoCE, false},
		{"ipv4 ihl", func(b []byte) []byte { b[l3] = 0x44; return b }, KindBadIPLength, false},
		{"ipv4 total length short", func(b []byte) []byte { binary.BigEndian.PutUint16(b[l3+2:], 24); return b }, KindBadIPLength, true},
		{"ipv4 fragment", func(b []byte) []byte { b[l3+6] |= 0x20; return b }, KindBadIPLength, true},
		{"udp length", func(b []byte) []byte { b[l4+5]--; return b }, KindBadUDPLength, true},
		{"no room for bth", func(b []byte) []byte {
			b = b[:bth+8]
			binary.BigEndian.PutUint16(b[l3+2:], uint16(len(b)-l3))
			binary.BigEndian.PutUint16(b[l4+4:], uint16(len(b)-l4))
			return b
		}, KindShort, true},
		{"unknown opcode", func(b []byte) []byte { b[bth] = 0x15; return b }, KindUnknownOpcode, true},
		{"tver", func(b []byte) []byte { b[bth+1] |= 1; return b }, KindHeaderMismatch, true},
		{"ext headers do not fit", func(b []byte) []byte { b[bth] = byte(RCCompareSwap); return b }, KindHeaderMismatch, true},
		{"payload on an ack", func(b []byte) []byte { b[bth] = byte(RCAcknowledge); b[bth+1] &^= 0x30; return b }, KindHeaderMismatch, true},
		{"pad on an ack", func(b []byte) []byte { b[bth] = byte(RCAcknowledge); return b }, KindBadPad, true},
		{"atomic write without room for its RETH", func(b []byte) []byte { b[bth] = byte(RCAtomicWrite); b[bth+1] &^= 0x30; return b }, KindHeaderMismatch, true},
		{"pad beyond payload", func(b []byte) []byte {
			// a SEND_ONLY without payload whose PadCnt claims 3 of the 0 bytes left
			h := Header{Opcode: RCSendOnly}
			nb, _ := NewBuilder(path4).Build(make([]byte, 128), &h, nil)
			nb[bth+1] |= 0x30
			return nb
		}, KindBadPad, true},
		{"not a multiple of 4", func(b []byte) []byte {
			b = append(b[:len(b)-4], 0, b[len(b)-4], b[len(b)-3], b[len(b)-2], b[len(b)-1])
			binary.BigEndian.PutUint16(b[l3+2:], uint16(len(b)-l3))
			binary.BigEndian.PutUint16(b[l4+4:], uint16(len(b)-l4))
			return b
		}, KindBadPad, true},
		{"bad icrc", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }, KindBadICRC, true},
		{"resealed after edit", func(b []byte) []byte { b[bth+12] = 'j'; return reseal(b) }, 0, true},
	} {
		var p Parser
		var f Frame
		err := p.Parse(&f, c.mod(good()))
		if KindOf(err) != c.kind || f.RoCE != c.roce {
			t.Errorf("%s: %v (kind %v) roce=%v, want kind %v roce=%v", c.name, err, KindOf(err), f.RoCE, c.kind, c.roce)
		}
		if c.kind != 0 && !errors.Is(err, &Error{Kind: c.kind}) {
			t.Errorf("%s: errors.Is does not match kind %v", c.name, c.kind)
		}
		if got := Malformed(err); got != (c.kind != 0 && c.kind != KindBadICRC && c.kind != KindNotRoCE) {
			t.Errorf("%s: Malformed = %v", c.name, got)
		}
	}
}
