package roce

import (
	"bytes"
	"net/netip"
	"testing"
)

// capturedPaths are the link and IP layouts a capture holds: IPv4, IPv4 under an 802.1Q tag, IPv6.
func capturedPaths() map[string]Path {
	mac := func(b byte) [6]byte { return [6]byte{2, 0, 0, 0, 0, b} }
	return map[string]Path{
		"ipv4": {SrcMAC: mac(1), DstMAC: mac(2), SrcIP: netip.MustParseAddr("192.0.2.1"), DstIP: netip.MustParseAddr("192.0.2.2"), SrcPort: 0xc123},
		"vlan": {SrcMAC: mac(1), DstMAC: mac(2), VLAN: 7, HasVLAN: true, SrcIP: netip.MustParseAddr("192.0.2.1"), DstIP: netip.MustParseAddr("192.0.2.2"), SrcPort: 0xc123},
		"ipv6": {SrcMAC: mac(1), DstMAC: mac(2), SrcIP: netip.MustParseAddr("fd00::1"), DstIP: netip.MustParseAddr("fd00::2"), SrcPort: 0xc123},
	}
}

// capturedFrame builds a frame of the opcode with every header field set and a payload the
// opcode allows (37 bytes, so the pad is used, where any length is).
func capturedFrame(t *testing.T, p Path, op Opcode) []byte {
	t.Helper()
	h := Header{Opcode: op, AckReq: true, DestQP: 0x12, PSN: 0xfffffe, VA: 0x7f0012345678, RKey: 0x2a6, DMALen: 4096,
		SwapAdd: 5, Compare: 6, Syndrome: ACKUnlimited, MSN: 9, Orig: 0x1234, Imm: 0xdeadbeef, InvRKey: 0x77,
		QKey: 0x11111111, SrcQP: 0x15, FETH: 0x10}
	n := 0
	if info := op.Info(); info.HasPayload() {
		n = 37
		if f := info.FixedPayload(); f > 0 {
			n = f
		}
	}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i + 1)
	}
	b, err := NewBuilder(p).Build(make([]byte, 512), &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseCaptured cuts a frame of every opcode, over IPv4, VLAN and IPv6, at every length, as a
// capture with a short snap length does, and parses what is left knowing the length on the wire:
// once the capture holds the BTH and its extension headers, the headers and the payload length
// are those of the whole frame and only the ICRC is unknown; before that the error names the
// header the capture ends in, and past the UDP header the frame is known to be RoCEv2.
func TestParseCaptured(t *testing.T) {
	var p Parser
	for name, path := range capturedPaths() {
		for _, op := range Opcodes() {
			b := capturedFrame(t, path, op)
			var whole Frame
			if err := p.Parse(&whole, b); err != nil {
				t.Fatalf("%s %v: whole frame: %v", name, op, err)
			}
			hdrEnd := whole.BTHOff + BTHLen + whole.Info.Ext.Len()
			for n := 0; n <= len(b); n++ {
				var f Frame
				err := p.ParseCaptured(&f, b[:n], len(b))
				where := CutInside(err)
				switch {
				case n == len(b):
					if err != nil || f.Truncated() || f.Header() != whole.Header() || !bytes.Equal(f.Payload, whole.Payload) || f.ICRC != whole.ICRC {
						t.Fatalf("%s %v whole: %v %+v", name, op, err, f)
					}
				case n >= hdrEnd:
					if err != nil {
						t.Fatalf("%s %v cut at %d of %d: %v", name, op, n, len(b), err)
					}
					if !f.Truncated() || f.Header() != whole.Header() || f.PayloadLen() != len(whole.Payload) || f.ICRC != 0 ||
						!bytes.Equal(f.Payload, whole.Payload[:min(n-hdrEnd, len(whole.Payload))]) || f.Pad != whole.Pad {
						t.Fatalf("%s %v cut at %d: %+v, payload %d of %d", name, op, n, f.Header(), f.PayloadLen(), len(whole.Payload))
					}
					if f.SrcIP() != whole.SrcIP() || f.DstIP() != whole.DstIP() || f.SrcPort() != whole.SrcPort() || f.VLAN != whole.VLAN {
						t.Fatalf("%s %v cut at %d: addresses differ", name, op, n)
					}
				case n >= whole.BTHOff:
					if KindOf(err) != KindShort || !f.RoCE || where == "" {
						t.Fatalf("%s %v cut at %d (headers end at %d): %v, RoCE %v, inside %q", name, op, n, hdrEnd, err, f.RoCE, where)
					}
					if n < whole.BTHOff+BTHLen {
						if where != "BTH" || f.BTH != nil {
							t.Fatalf("%s %v cut at %d inside the BTH: inside %q", name, op, n, where)
						}
						continue
					}
					if !bytes.Equal(f.BTH, whole.BTH) || f.Info != whole.Info || where == "BTH" {
						t.Fatalf("%s %v cut at %d: BTH % x, inside %q", name, op, n, f.BTH, where)
					}
					// The views set are the headers the capture holds whole, and they are right.
					for _, v := range [][2][]byte{{f.DETH, whole.DETH}, {f.FETH, whole.FETH}, {f.RETH, whole.RETH},
						{f.AtomicETH, whole.AtomicETH}, {f.AETH, whole.AETH}, {f.AtomicAckETH, whole.AtomicAckETH},
						{f.ImmDt, whole.ImmDt}, {f.IETH, whole.IETH}, {f.CNPReserved, whole.CNPReserved}} {
						if v[0] != nil && !bytes.Equal(v[0], v[1]) {
							t.Fatalf("%s %v cut at %d: view % x, want % x", name, op, n, v[0], v[1])
						}
					}
				default:
					if KindOf(err) != KindShort || f.RoCE || where == "" {
						t.Fatalf("%s %v cut at %d before the BTH (%d): %v, RoCE %v, inside %q", name, op, n, whole.BTHOff, err, f.RoCE, where)
					}
				}
			}
		}
	}
}

// TestCutInsideNames: the header a cut capture ends in, by name, as a user reads it.
func TestCutInsideNames(t *testing.T) {
	var p Parser
	path := capturedPaths()["ipv6"]
	for _, c := range []struct {
		op   Opcode
		n    int
		want string
	}{
		{RCSendOnly, 10, "Ethernet header"},
		{RCSendOnly, 30, "IPv6 header"},
		{RCSendOnly, 60, "UDP header"},
		{RCSendOnly, 70, "BTH"},
		{RCWriteFirst, 80, "RETH"},
		{RCAcknowledge, 75, "AETH"},
		{RCAtomicAcknowledge, 80, "AtomicAckETH"},
		{RCCompareSwap, 100, "AtomicETH"},
		{UDSendOnlyImm, 80, "DETH"},
		{UDSendOnlyImm, 84, "ImmDt"},
		{RCSendOnlyInv, 75, "IETH"},
		{RCFlush, 75, "FETH"},
		{CNP, 80, "CNP reserved bytes"},
	} {
		b := capturedFrame(t, path, c.op)
		var f Frame
		err := p.ParseCaptured(&f, b[:c.n], len(b))
		if got := CutInside(err); got != c.want {
			t.Errorf("%v cut at %d: inside %q (%v), want %q", c.op, c.n, got, err, c.want)
		}
	}
	if got := CutInside(nil); got != "" {
		t.Errorf("nil: %q", got)
	}
	if got := CutInside(errShortBTH); got != "" {
		t.Errorf("a frame whose lengths leave no room for the BTH is malformed, not cut: %q", got)
	}
}

// TestParseCapturedLengths: the IP and UDP lengths of a cut frame are checked as those of a
// whole one: an IP length beyond the frame on the wire, a UDP length that disagrees, a pad or
// payload its opcode cannot have are malformed, not cut.
func TestParseCapturedLengths(t *testing.T) {
	var p Parser
	path := capturedPaths()["ipv4"]
	b := capturedFrame(t, path, RCWriteFirst)
	const l3, l4 = EthernetLen, EthernetLen + IPv4Len
	n := l4 + UDPLen + BTHLen + RETHLen + 4
	for _, c := range []struct {
		name    string
		wireLen int
		edit    func(b []byte)
		want    error
	}{
		{"wire shorter than IP", len(b) - 1, nil, errShortIPPayload},
		{"IP total below headers", len(b), func(b []byte) { b[l3+2], b[l3+3] = 0, 20 }, errIPv4Total},
		{"UDP length", len(b), func(b []byte) { b[l4+5]++ }, errUDPLength},
		{"pad", len(b), func(b []byte) { b[l3+2], b[l3+3] = 0, byte(len(b)-l3-1); b[l4+4], b[l4+5] = 0, byte(len(b)-l4-1) }, errPad},
		{"room for no BTH", len(b), func(b []byte) { b[l3+2], b[l3+3] = 0, 20+8+8; b[l4+4], b[l4+5] = 0, 16 }, errShortBTH},
		{"header-only with payload", len(b), func(b []byte) { b[l4+UDPLen] = byte(RCAcknowledge); b[l4+UDPLen+1] &^= 0x30 }, errPayload},
		{"unknown opcode", len(b), func(b []byte) { b[l4+UDPLen] = 0x1f }, errOpcode},
	} {
		c2 := append([]byte(nil), b...)
		if c.edit != nil {
			c.edit(c2)
		}
		var f Frame
		err := p.ParseCaptured(&f, c2[:n], c.wireLen)
		if err != c.want || CutInside(err) != "" {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// A capture that holds the whole IP packet but not the link's trailer (an FCS, padding)
	// checks the ICRC as usual.
	long := append(append([]byte(nil), b...), 0, 0, 0, 0)
	var f Frame
	if err := p.ParseCaptured(&f, long[:len(b)], len(long)); err != nil || f.Truncated() {
		t.Errorf("whole IP packet: %v, truncated %v", err, f.Truncated())
	}
	long[len(b)-1] ^= 1
	if err := p.ParseCaptured(&f, long[:len(b)], len(long)); err != errICRC {
		t.Errorf("whole IP packet with a bad ICRC: %v", err)
	}
}
