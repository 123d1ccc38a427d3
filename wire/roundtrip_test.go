package wire

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

var (
	path4 = Path{
		SrcMAC: [6]byte{0x52, 0x54, 0, 0, 0x77, 0x02}, DstMAC: [6]byte{0x02, 0, 0, 0, 0x77, 0x01},
		SrcIP: netip.MustParseAddr("192.168.77.2"), DstIP: netip.MustParseAddr("192.168.77.1"),
		SrcPort: 0xD353, IPID: 0xC5D3, TTL: 64,
	}
	path6 = Path{
		SrcMAC: [6]byte{0x52, 0x54, 0, 0, 0x77, 0x02}, DstMAC: [6]byte{0x02, 0, 0, 0, 0x77, 0x01},
		SrcIP: netip.MustParseAddr("fd00:77::2"), DstIP: netip.MustParseAddr("fd00:77::1"),
		SrcPort: 0xC123, TrafficClass: 0x68, TTL: 32, FlowLabel: 0xABCDE,
	}
)

// sampleHeader fills every field an opcode's headers carry with distinct values derived from seed.
func sampleHeader(op Opcode, seed uint32) Header {
	h := Header{
		Opcode: op, SE: seed&1 != 0, AckReq: seed&2 != 0, PKey: 0xFFFF,
		DestQP: 0x000123 + seed, PSN: (0xFFFFF0 + seed*7) & PSNMask,
	}
	info := op.Info()
	e := info.Ext
	if e&(ExtRETH|ExtAtomicETH) != 0 {
		h.VA, h.RKey = 0x00007F1234560000+uint64(seed)*8, 0x00ABCD00|seed&0xFF
	}
	if e&ExtRETH != 0 {
		h.DMALen = 4096 + seed
	}
	if e&ExtAtomicETH != 0 {
		h.SwapAdd, h.Compare = 0x1111222233334444+uint64(seed), 0x5555666677778888
	}
	if e&ExtAETH != 0 {
		h.Syndrome, h.MSN = Syndrome(0x1F+seed%3), 0x00FEDC+seed
	}
	if e&ExtAtomicAckETH != 0 {
		h.Orig = 0x0102030405060708 + uint64(seed)
	}
	if e&ExtImmDt != 0 {
		h.Imm = 0xDEADBEEF ^ seed
	}
	if e&ExtIETH != 0 {
		h.InvRKey = 0x00112233 + seed
	}
	if e&ExtDETH != 0 {
		h.QKey, h.SrcQP = 0x11111111, 0x000456+seed
	}
	if e&ExtFETH != 0 {
		h.FETH = 0x12
	}
	return h
}

// payloadLens are the payload lengths tried for each opcode: every pad count, and none.
func payloadLens(op Opcode) []int {
	switch info := op.Info(); {
	case !info.HasPayload():
		return []int{0}
	case info.FixedPayload() != 0:
		return []int{info.FixedPayload()}
	}
	return []int{0, 1, 2, 3, 4, 61, 1024}
}

func samplePayload(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i*7)
	}
	return p
}

type buildCase struct {
	name    string
	path    Path
	hdr     Header
	payload []byte
}

// allCases is every known opcode, every payload length that opcode allows, over IPv4, IPv6 and
// IPv4 in a VLAN.
func allCases() []buildCase {
	vlan := path4
	vlan.HasVLAN, vlan.VLAN = true, 0x2064
	paths := []struct {
		name string
		p    Path
	}{{"v4", path4}, {"v6", path6}, {"vlan", vlan}}
	var out []buildCase
	for _, op := range Opcodes() {
		for i, n := range payloadLens(op) {
			for _, p := range paths {
				out = append(out, buildCase{
					name: op.String() + "/" + p.name + "/" + itoa(n),
					path: p.p, hdr: sampleHeader(op, uint32(i)), payload: samplePayload(n, byte(op)),
				})
			}
		}
	}
	return out
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func TestOpcodeTable(t *testing.T) {
	want := map[Opcode]struct {
		name string
		ext  Ext
		cl   Class
	}{
		RCSendFirst:          {"RC_SEND_FIRST", 0, First},
		RCSendLastImm:        {"RC_SEND_LAST_WITH_IMMEDIATE", ExtImmDt, Last},
		RCWriteOnlyImm:       {"RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", ExtRETH | ExtImmDt, Only},
		RCReadRequest:        {"RC_RDMA_READ_REQUEST", ExtRETH, Only},
		RCReadResponseFirst:  {"RC_RDMA_READ_RESPONSE_FIRST", ExtAETH, First},
		RCReadResponseMiddle: {"RC_RDMA_READ_RESPONSE_MIDDLE", 0, Middle},
		RCReadResponseLast:   {"RC_RDMA_READ_RESPONSE_LAST", ExtAETH, Last},
		RCAtomicAcknowledge:  {"RC_ATOMIC_ACKNOWLEDGE", ExtAETH | ExtAtomicAckETH, Only},
		RCCompareSwap:        {"RC_COMPARE_SWAP", ExtAtomicETH, Only},
		RCSendLastInv:        {"RC_SEND_LAST_WITH_INVALIDATE", ExtIETH, Last},
		RCSendOnlyInv:        {"RC_SEND_ONLY_WITH_INVALIDATE", ExtIETH, Only},
		RCFlush:              {"RC_FLUSH", ExtFETH | ExtRETH, Only},
		RCAtomicWrite:        {"RC_ATOMIC_WRITE", ExtRETH, Only},
		UCWriteMiddle:        {"UC_RDMA_WRITE_MIDDLE", 0, Middle},
		UCWriteOnlyImm:       {"UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", ExtRETH | ExtImmDt, Only},
		UDSendOnly:           {"UD_SEND_ONLY", ExtDETH, Only},
		UDSendOnlyImm:        {"UD_SEND_ONLY_WITH_IMMEDIATE", ExtDETH | ExtImmDt, Only},
		CNP:                  {"CNP", ExtCNP, Only},
	}
	for op, w := range want {
		i := op.Info()
		if i == nil || i.Name != w.name || i.Ext != w.ext || i.Class != w.cl {
			t.Errorf("0x%02x: got %+v, want %+v", uint8(op), i, w)
		}
	}
	if got := len(Opcodes()); got != 25+12+2+1 {
		t.Errorf("%d opcodes, want 40", got)
	}
	for _, op := range []Opcode{0x15, 0x18, 0x1B, 0x1E, 0x2C, 0x40, 0x66, 0x80, 0xFF} {
		if op.Known() {
			t.Errorf("0x%02x should be unknown", uint8(op))
		}
	}
	if s := Opcode(0x15).String(); s != "OPCODE_0x15" {
		t.Errorf("unknown opcode name %q", s)
	}
	if (ExtAETH|ExtAtomicAckETH).Len() != 12 || (ExtFETH|ExtRETH).Len() != 20 || ExtCNP.Len() != 16 {
		t.Error("Ext.Len")
	}
}

func TestSyndrome(t *testing.T) {
	for s, want := range map[Syndrome]string{
		0x1F: "ACK(credits=31)", 0x00: "ACK(credits=0)", 0x21: "RNR(timer=1,0.01ms)",
		0x39: "RNR(timer=25,61.44ms)", 0x20: "RNR(timer=0,655.36ms)",
		0x60: "NAK_PSN_SEQ_ERR", 0x61: "NAK_INV_REQ", 0x62: "NAK_REM_ACCESS", 0x63: "NAK_REM_OP",
		0x64: "NAK_INV_RD_REQ", 0x65: "NAK_RESERVED", 0x41: "RESERVED(0x41)",
	} {
		if got := s.String(); got != want {
			t.Errorf("%#x: %q, want %q", uint8(s), got, want)
		}
	}
}

// TestBuildParseRoundTrip builds every case and parses it back: the same header fields, the same
// payload, a valid ICRC, zero pad bytes.
func TestBuildParseRoundTrip(t *testing.T) {
	var p Parser
	var f Frame
	buf := make([]byte, 2048)
	for _, c := range allCases() {
		b := NewBuilder(c.path)
		frame, err := b.Build(buf, &c.hdr, c.payload)
		if err != nil {
			t.Fatalf("%s: build: %v", c.name, err)
		}
		if len(frame) != b.FrameLen(c.hdr.Opcode, len(c.payload)) {
			t.Fatalf("%s: length %d", c.name, len(frame))
		}
		if err := p.Parse(&f, frame); err != nil {
			t.Fatalf("%s: parse: %v", c.name, err)
		}
		if got := f.Header(); got != c.hdr {
			t.Fatalf("%s: header\n got %+v\nwant %+v", c.name, got, c.hdr)
		}
		if !bytes.Equal(f.Payload, c.payload) {
			t.Fatalf("%s: payload", c.name)
		}
		if f.Pad != -len(c.payload)&3 || !bytes.Equal(frame[f.End-4-f.Pad:f.End-4], make([]byte, f.Pad)) {
			t.Fatalf("%s: pad %d", c.name, f.Pad)
		}
		if got := f.Path(); got != c.path {
			t.Fatalf("%s: path\n got %+v\nwant %+v", c.name, got, c.path)
		}
		if f.End != len(frame) {
			t.Fatalf("%s: End %d of %d", c.name, f.End, len(frame))
		}
	}
}

// TestBuildExactBytes rebuilds every RoCEv2 frame of the rxe captures from its parsed fields and
// requires the very same bytes, ICRC included.
func TestBuildExactBytes(t *testing.T) {
	var p Parser
	var f Frame
	buf := make([]byte, 9000)
	for _, name := range captureFiles {
		for i, frame := range roceFrames(t, name) {
			if err := p.Parse(&f, frame); err != nil {
				t.Fatal(err)
			}
			b := NewBuilder(f.Path())
			h := f.Header()
			got, err := b.Build(buf, &h, f.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, frame[:f.End]) {
				t.Fatalf("%s frame %d (%v): rebuilt\n%x\nwant\n%x", name, i, f.Opcode, got, frame[:f.End])
			}
		}
	}
}

// TestBuildGolden pins one frame byte for byte: the first frame of rxe-pingpong.pcap, an
// RC_SEND_ONLY of 64 bytes from the ibv_rc_pingpong guest, built from scratch.
func TestBuildGolden(t *testing.T) {
	b := NewBuilder(Path{
		SrcMAC: [6]byte{0x52, 0x54, 0x00, 0x00, 0x77, 0x02}, DstMAC: [6]byte{0x02, 0x00, 0x00, 0x00, 0x77, 0x01},
		SrcIP: netip.MustParseAddr("192.168.77.2"), DstIP: netip.MustParseAddr("192.168.77.1"),
		SrcPort: 0xD353, IPID: 0xC5D3,
	})
	payload := bytes.Repeat([]byte{0x7B}, 64)
	h := Header{Opcode: RCSendOnly, DestQP: 0x000123, AckReq: true, PSN: 0x3944EE}
	got, err := b.Build(make([]byte, 256), &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	want := readCapture(t, "rxe-pingpong.pcap")[0]
	if !bytes.Equal(got, want) {
		t.Fatalf("got\n%x\nwant\n%x", got, want)
	}
	if icrc := binary.LittleEndian.Uint32(got[len(got)-4:]); icrc != 0xDFD48238 {
		t.Fatalf("ICRC %#x", icrc)
	}
}

func TestBuildErrors(t *testing.T) {
	b := NewBuilder(path4)
	buf := make([]byte, 128)
	for _, c := range []struct {
		h    Header
		n    int
		buf  []byte
		kind Kind
	}{
		{Header{Opcode: 0x15}, 0, buf, KindUnknownOpcode},
		{Header{Opcode: RCAcknowledge}, 4, buf, KindHeaderMismatch},
		{Header{Opcode: RCAtomicWrite}, 4, buf, KindHeaderMismatch},
		{Header{Opcode: RCSendOnly}, 100, buf, KindShort},
	} {
		if _, err := b.Build(c.buf, &c.h, make([]byte, c.n)); KindOf(err) != c.kind {
			t.Errorf("%v n=%d: %v, want %v", c.h.Opcode, c.n, err, c.kind)
		}
	}
	if _, err := NewBuilder(Path{}).Build(buf, &Header{Opcode: RCSendOnly}, nil); KindOf(err) != KindBadIPLength {
		t.Errorf("no addresses: %v", err)
	}
}

// TestGopacketRoundTrip decodes every built frame with gopacket.NewPacket and with a
// DecodingLayerParser, compares the fields, then serializes the decoded layers again and
// requires the original bytes.
func TestGopacketRoundTrip(t *testing.T) {
	var (
		eth     layers.Ethernet
		dot1q   layers.Dot1Q
		ip4     layers.IPv4
		ip6     layers.IPv6
		udp     layers.UDP
		roce    RoCEv2
		payload gopacket.Payload
	)
	dlp := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &dot1q, &ip4, &ip6, &udp, &roce, &payload)
	dlp.IgnoreUnsupported = true
	var decoded []gopacket.LayerType
	buf := make([]byte, 2048)
	for _, c := range allCases() {
		frame, err := NewBuilder(c.path).Build(buf, &c.hdr, c.payload)
		if err != nil {
			t.Fatal(err)
		}
		pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		if el := pkt.ErrorLayer(); el != nil {
			t.Fatalf("%s: %v", c.name, el.Error())
		}
		l, ok := pkt.Layer(LayerTypeRoCEv2).(*RoCEv2)
		if !ok {
			t.Fatalf("%s: no RoCEv2 layer in %v", c.name, pkt)
		}
		checkLayer(t, c, l, frame)
		if len(c.payload) > 0 && !bytes.Equal(pkt.ApplicationLayer().Payload(), c.payload) {
			t.Fatalf("%s: application payload", c.name)
		}

		if err := dlp.DecodeLayers(frame, &decoded); err != nil {
			t.Fatalf("%s: DecodingLayerParser: %v", c.name, err)
		}
		if !containsLayer(decoded, LayerTypeRoCEv2) {
			t.Fatalf("%s: DecodingLayerParser decoded %v", c.name, decoded)
		}
		checkLayer(t, c, &roce, frame)

		// Serialize the decoded layers back: the same bytes.
		sb := gopacket.NewSerializeBuffer()
		var ls []gopacket.SerializableLayer
		for _, l := range pkt.Layers() {
			if sl, ok := l.(gopacket.SerializableLayer); ok {
				ls = append(ls, sl)
			}
		}
		if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{FixLengths: true}, ls...); err != nil {
			t.Fatalf("%s: serialize: %v", c.name, err)
		}
		// gopacket pads Ethernet frames to the 60-byte minimum; the parser ignores such padding.
		out := sb.Bytes()
		if len(out) > len(frame) && len(out) == 60 && bytes.Equal(out[len(frame):], make([]byte, 60-len(frame))) {
			out = out[:len(frame)]
		}
		if !bytes.Equal(out, frame) {
			t.Fatalf("%s: serialized\n%x\nwant\n%x", c.name, sb.Bytes(), frame)
		}
	}
}

func checkLayer(t *testing.T, c buildCase, l *RoCEv2, frame []byte) {
	t.Helper()
	if l.Header != c.hdr {
		t.Fatalf("%s: layer header\n got %+v\nwant %+v", c.name, l.Header, c.hdr)
	}
	if l.Ext != c.hdr.Opcode.Info().Ext || int(l.PadCnt) != -len(c.payload)&3 {
		t.Fatalf("%s: ext %v pad %d", c.name, l.Ext, l.PadCnt)
	}
	if !bytes.Equal(l.LayerPayload(), c.payload) {
		t.Fatalf("%s: layer payload", c.name)
	}
	if l.ICRC != binary.LittleEndian.Uint32(frame[len(frame)-4:]) {
		t.Fatalf("%s: layer ICRC", c.name)
	}
	if len(l.LayerContents()) != BTHLen+l.Ext.Len() {
		t.Fatalf("%s: contents %d bytes", c.name, len(l.LayerContents()))
	}
}

func containsLayer(ls []gopacket.LayerType, t gopacket.LayerType) bool {
	for _, l := range ls {
		if l == t {
			return true
		}
	}
	return false
}
