package roce

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// FuzzDETH: a UD frame with any Q_Key, source QP and payload parses back to them; the same frame
// with any bytes of its transport part changed never panics the parser, and whatever parses
// shows, in its DETH view, the bytes at the DETH's place.
func FuzzDETH(f *testing.F) {
	f.Add(uint32(0x11111111), uint32(0x15), []byte("ping"), true, []byte{})
	f.Add(uint32(0x80010000), uint32(1), make([]byte, 256), false, []byte{12, 0xff})
	f.Add(uint32(0), uint32(0xffffff), []byte{}, false, []byte{0, 0x40, 3, 0x80})
	p := Path{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("192.0.2.1"), DstIP: netip.MustParseAddr("192.0.2.2"), SrcPort: 0xc15c}
	f.Fuzz(func(t *testing.T, qkey, srcQP uint32, payload []byte, imm bool, edits []byte) {
		if len(payload) > 4096 {
			payload = payload[:4096]
		}
		h := Header{Opcode: UDSendOnly, PKey: 0xffff, DestQP: 0x12, PSN: 7, QKey: qkey, SrcQP: srcQP & PSNMask}
		if imm {
			h.Opcode, h.Imm = UDSendOnlyImm, qkey^srcQP
		}
		b, err := NewBuilder(p).Build(make([]byte, 4200), &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		var ps Parser
		var fr Frame
		if err := ps.Parse(&fr, b); err != nil {
			t.Fatal(err)
		}
		if fr.DETH == nil || fr.DETH.QKey() != qkey || fr.DETH.SrcQP() != srcQP&PSNMask || len(fr.Payload) != len(payload) {
			t.Fatalf("DETH %v payload %d", fr.DETH, len(fr.Payload))
		}
		// Edits: pairs of (offset into the transport part, xor value).
		bth := fr.BTHOff
		for len(edits) >= 2 {
			if off := bth + int(edits[0]); off < len(b) {
				b[off] ^= edits[1]
			}
			edits = edits[2:]
		}
		if err := ps.Parse(&fr, b); err != nil || fr.DETH == nil {
			return
		}
		at := fr.BTHOff + BTHLen
		if fr.DETH.QKey() != binary.BigEndian.Uint32(b[at:]) || fr.DETH.SrcQP() != binary.BigEndian.Uint32(b[at+4:])&PSNMask {
			t.Fatalf("DETH view %v, bytes % x", fr.DETH, b[at:at+8])
		}
	})
}
