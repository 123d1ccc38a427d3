package wire

import (
	"bytes"
	"net/netip"
	"testing"

	"pgregory.net/rapid"
)

// genPath draws an IPv4 or IPv6 path, with or without a VLAN tag, with any variant fields.
func genPath(t *rapid.T) Path {
	p := Path{
		SrcPort:      rapid.Uint16().Draw(t, "sport"),
		TrafficClass: rapid.Uint8().Draw(t, "tc"),
		TTL:          rapid.Uint8Min(1).Draw(t, "ttl"),
	}
	if rapid.Bool().Draw(t, "vlan") {
		p.HasVLAN, p.VLAN = true, rapid.Uint16().Draw(t, "tci")
	}
	if rapid.Bool().Draw(t, "v6") {
		p.SrcIP = netip.AddrFrom16([16]byte(rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "src6")))
		p.DstIP = netip.AddrFrom16([16]byte(rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "dst6")))
		p.FlowLabel = rapid.Uint32Range(0, 0xFFFFF).Draw(t, "flow")
		if p.SrcIP.Is4In6() && p.DstIP.Is4In6() {
			p.SrcIP = netip.IPv6Loopback() // keep the draw an IPv6 path
		}
	} else {
		p.IPID = rapid.Uint16().Draw(t, "ipid") // IPv6 has no identification field
		p.SrcIP = netip.AddrFrom4([4]byte(rapid.SliceOfN(rapid.Byte(), 4, 4).Draw(t, "src4")))
		p.DstIP = netip.AddrFrom4([4]byte(rapid.SliceOfN(rapid.Byte(), 4, 4).Draw(t, "dst4")))
	}
	return p
}

// genHeader draws any known opcode with every field its headers carry drawn at random.
func genHeader(t *rapid.T) (Header, []byte) {
	op := rapid.SampledFrom(Opcodes()).Draw(t, "opcode")
	h := Header{
		Opcode: op, SE: rapid.Bool().Draw(t, "se"), MigReq: rapid.Bool().Draw(t, "migreq"),
		FECN: rapid.Bool().Draw(t, "fecn"), BECN: rapid.Bool().Draw(t, "becn"), AckReq: rapid.Bool().Draw(t, "ackreq"),
		PKey:   rapid.Uint16Min(1).Draw(t, "pkey"),
		DestQP: rapid.Uint32Range(0, PSNMask).Draw(t, "qp"), PSN: rapid.Uint32Range(0, PSNMask).Draw(t, "psn"),
	}
	e := op.Info().Ext
	if e&(ExtRETH|ExtAtomicETH) != 0 {
		h.VA, h.RKey = rapid.Uint64().Draw(t, "va"), rapid.Uint32().Draw(t, "rkey")
	}
	if e&ExtRETH != 0 {
		h.DMALen = rapid.Uint32().Draw(t, "dmalen")
	}
	if e&ExtAtomicETH != 0 {
		h.SwapAdd, h.Compare = rapid.Uint64().Draw(t, "swap"), rapid.Uint64().Draw(t, "compare")
	}
	if e&ExtAETH != 0 {
		h.Syndrome, h.MSN = Syndrome(rapid.Uint8().Draw(t, "syndrome")), rapid.Uint32Range(0, PSNMask).Draw(t, "msn")
	}
	if e&ExtAtomicAckETH != 0 {
		h.Orig = rapid.Uint64().Draw(t, "orig")
	}
	if e&ExtImmDt != 0 {
		h.Imm = rapid.Uint32().Draw(t, "imm")
	}
	if e&ExtIETH != 0 {
		h.InvRKey = rapid.Uint32().Draw(t, "inv")
	}
	if e&ExtDETH != 0 {
		h.QKey, h.SrcQP = rapid.Uint32().Draw(t, "qkey"), rapid.Uint32Range(0, PSNMask).Draw(t, "srcqp")
	}
	if e&ExtFETH != 0 {
		h.FETH = rapid.Uint32().Draw(t, "feth")
	}
	var payload []byte
	switch info := op.Info(); {
	case info.FixedPayload() != 0:
		n := info.FixedPayload()
		payload = rapid.SliceOfN(rapid.Byte(), n, n).Draw(t, "payload")
	case info.HasPayload():
		payload = rapid.SliceOfN(rapid.Byte(), 0, 600).Draw(t, "payload")
	}
	return h, payload
}

// drawn is a frame built from a drawn path and header, and the parse of it.
type drawn struct {
	path           Path
	h              Header
	payload, frame []byte
	p              Parser
	f              Frame
}

// genFrame draws a path and a header, builds their frame into buf and parses it.
func genFrame(t *rapid.T, buf []byte) *drawn {
	d := &drawn{path: genPath(t)}
	d.h, d.payload = genHeader(t)
	frame, err := NewBuilder(d.path).Build(buf, &d.h, d.payload)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.p.Parse(&d.f, frame); err != nil {
		t.Fatal(err)
	}
	d.frame = frame
	return d
}

// TestPropertyRoundTrip: any header over any path builds, parses back to the same fields and
// payload, and decodes identically through the gopacket layer.
func TestPropertyRoundTrip(t *testing.T) {
	buf := make([]byte, 1024)
	rapid.Check(t, func(t *rapid.T) {
		d := genFrame(t, buf)
		f := &d.f
		if f.Header() != d.h || !bytes.Equal(f.Payload, d.payload) || f.Path() != d.path {
			t.Fatalf("round trip: %+v / %+v", f.Header(), d.h)
		}
		var l RoCEv2
		if err := l.DecodeFromBytes(d.frame[f.BTHOff:f.End], nil); err != nil || l.Header != d.h {
			t.Fatalf("layer: %v %+v", err, l.Header)
		}
	})
}

// TestPropertyT1: on any built frame, any rewrite of the variant fields keeps the ICRC valid, and
// any single flipped bit past the BTH breaks it (reference T1).
func TestPropertyT1(t *testing.T) {
	buf := make([]byte, 1024)
	rapid.Check(t, func(t *rapid.T) {
		d := genFrame(t, buf)
		p, f, frame := &d.p, &d.f, d.frame
		for off, mask := range maskedBits(f) {
			frame[off] ^= mask & rapid.Uint8().Draw(t, "rewrite")
		}
		if err := p.Parse(f, frame); err != nil {
			t.Fatalf("after rewriting variant fields: %v", err)
		}
		i := rapid.IntRange(f.BTHOff+BTHLen, f.End-1).Draw(t, "byte")
		frame[i] ^= 1 << rapid.IntRange(0, 7).Draw(t, "bit")
		if err := p.Parse(f, frame); KindOf(err) != KindBadICRC {
			t.Fatalf("bit flip at %d: %v", i, err)
		}
	})
}
