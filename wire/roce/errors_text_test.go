package roce

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

// TestErrorTextSaysWhatIsWrong: each parser error reads as one sentence naming what is wrong,
// never its kind twice ("bad ICRC: ICRC").
func TestErrorTextSaysWhatIsWrong(t *testing.T) {
	for _, c := range []struct {
		err  *Error
		want string
	}{
		{errICRC, "wire: bad ICRC: the ICRC does not match the frame"},
		{errOpcode, "wire: unknown opcode: the BTH opcode is not one RoCEv2 defines"},
		{errPad, "wire: bad pad: PadCnt does not fit the packet"},
		{errEtherType, "wire: not RoCEv2: EtherType is neither IPv4 nor IPv6"},
		{errNotUDP, "wire: not RoCEv2: IP protocol is not UDP"},
		{errPort, "wire: not RoCEv2: UDP destination port is not 4791"},
		{errIPVersion, "wire: not RoCEv2: IP version is neither 4 nor 6"},
		{ErrBuildOpcode, "wire: unknown opcode: cannot build an opcode not in the table"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
}
