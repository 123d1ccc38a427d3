package wire

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// TestUDPLengthErrorText: the message of a UDP length that disagrees with the IP packet names
// the problem once.
func TestUDPLengthErrorText(t *testing.T) {
	b := NewBuilder(Path{SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"), SrcPort: 49152})
	fr, err := b.Build(make([]byte, 256), &Header{Opcode: RCSendOnly, DestQP: 0x11, PSN: 1}, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	l4 := EthernetLen + IPv4Len
	binary.BigEndian.PutUint16(fr[l4+4:], binary.BigEndian.Uint16(fr[l4+4:])-4)
	var p Parser
	var f Frame
	err = p.Parse(&f, fr)
	if KindOf(err) != KindBadUDPLength {
		t.Fatalf("%v, want kind %v", err, KindBadUDPLength)
	}
	if got, want := err.Error(), "wire: bad UDP length: differs from the IP payload length"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
