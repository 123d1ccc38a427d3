package decode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/pcapgo"
	"github.com/softirdma/softirdma/wire"
)

var update = flag.Bool("update", false, "rewrite the captures in testdata/pcap that the tests generate")

const cookedV2File = "../../testdata/pcap/cooked-v2.pcap"

// capturedFrame is one frame of a generated capture, as Ethernet, and as Linux cooked v2 would
// have recorded it.
type capturedFrame struct {
	ts       time.Time
	eth      []byte
	outgoing bool
}

// sll2 returns the frame with its Ethernet header replaced by a Linux cooked v2 header.
func (c capturedFrame) sll2() []byte {
	h := make([]byte, wire.SLL2Len, wire.SLL2Len+len(c.eth))
	copy(h[0:2], c.eth[12:14])           // protocol: the EtherType
	binary.BigEndian.PutUint32(h[4:], 2) // interface index
	binary.BigEndian.PutUint16(h[8:], 1) // ARPHRD_ETHER
	if c.outgoing {
		h[10] = 4 // PACKET_OUTGOING
	}
	h[11] = 6 // address length
	src := c.eth[6:12]
	copy(h[12:18], src)
	return append(h, c.eth[14:]...)
}

// cookedFrames is a short RC conversation over IPv4 and IPv6 with 64-bit values above 2^53 in
// every field that has them, and an ARP frame, which is not RoCE.
func cookedFrames(t testing.TB) []capturedFrame {
	t.Helper()
	macA := [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB := [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	a4, b4 := netip.MustParseAddr("10.0.7.1"), netip.MustParseAddr("10.0.7.2")
	a6, b6 := netip.MustParseAddr("fd00:7::1"), netip.MustParseAddr("fd00:7::2")
	const qpA, qpB = 0x11, 0x12
	port := rxeSrcPort(qpA, qpB)
	ab := wire.NewBuilder(wire.Path{SrcMAC: macA, DstMAC: macB, SrcIP: a4, DstIP: b4, SrcPort: port})
	ba := wire.NewBuilder(wire.Path{SrcMAC: macB, DstMAC: macA, SrcIP: b4, DstIP: a4, SrcPort: port})
	ab6 := wire.NewBuilder(wire.Path{SrcMAC: macA, DstMAC: macB, SrcIP: a6, DstIP: b6, SrcPort: port})
	ba6 := wire.NewBuilder(wire.Path{SrcMAC: macB, DstMAC: macA, SrcIP: b6, DstIP: a6, SrcPort: port})

	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	var out []capturedFrame
	add := func(b *wire.Builder, h wire.Header, payload int) {
		h.DestQP = qpB
		if b == ba || b == ba6 {
			h.DestQP = qpA
		}
		p := make([]byte, payload)
		for i := range p {
			p[i] = byte(i)
		}
		fr, err := b.Build(make([]byte, 2048), &h, p)
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(125 * time.Microsecond)
		out = append(out, capturedFrame{ts: now, eth: fr, outgoing: b == ab || b == ab6})
	}
	ack := func(b *wire.Builder, psn, msn uint32) {
		add(b, wire.Header{Opcode: wire.RCAcknowledge, PSN: psn, Syndrome: wire.ACKUnlimited, MSN: msn}, 0)
	}
	// An ARP request from A: who has 10.0.7.2.
	arp := append(append(append([]byte{}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), macA[:]...), 0x08, 0x06,
		0, 1, 0x08, 0, 6, 4, 0, 1)
	arp = append(append(append(append(arp, macA[:]...), 10, 0, 7, 1), 0, 0, 0, 0, 0, 0), 10, 0, 7, 2)
	now = now.Add(time.Millisecond)
	out = append(out, capturedFrame{ts: now, eth: arp, outgoing: true})

	add(ab, wire.Header{Opcode: wire.RCWriteFirst, PSN: 1000, VA: 0xffff800012345000, RKey: 0x2a6, DMALen: 512}, 256)
	add(ab, wire.Header{Opcode: wire.RCWriteLast, PSN: 1001, AckReq: true}, 256)
	ack(ba, 1001, 1)
	add(ab, wire.Header{Opcode: wire.RCCompareSwap, PSN: 1002, AckReq: true, VA: 0x7ffffffffffffff8, RKey: 0x2a7,
		SwapAdd: 0xfedcba9876543210, Compare: 0x0123456789abcdef}, 0)
	add(ba, wire.Header{Opcode: wire.RCAtomicAcknowledge, PSN: 1002, Syndrome: wire.ACKUnlimited, MSN: 2, Orig: 0x0123456789abcdef}, 0)
	add(ab, wire.Header{Opcode: wire.RCFetchAdd, PSN: 1003, AckReq: true, VA: 0x20000000000008, RKey: 0x2a7, SwapAdd: 0x20000000000001}, 0)
	add(ba, wire.Header{Opcode: wire.RCAtomicAcknowledge, PSN: 1003, Syndrome: wire.ACKUnlimited, MSN: 3, Orig: 0xfedcba9876543211}, 0)
	add(ab, wire.Header{Opcode: wire.RCReadRequest, PSN: 1004, AckReq: true, VA: 0xffff800012345000, RKey: 0x2a6, DMALen: 16}, 0)
	add(ba, wire.Header{Opcode: wire.RCReadResponseOnly, PSN: 1004, Syndrome: wire.ACKUnlimited, MSN: 4}, 16)
	add(ab6, wire.Header{Opcode: wire.RCSendOnlyImm, PSN: 77, AckReq: true, Imm: 0xdeadbeef}, 32)
	ack(ba6, 77, 1)
	return out
}

// writeCooked writes frames as classic pcap of the link type: Ethernet as they are, Linux cooked
// v2 with the cooked header instead of the Ethernet one.
func writeCooked(t testing.TB, w io.Writer, link wire.LinkType, frames []capturedFrame) {
	t.Helper()
	pw, err := wire.NewPcapWriterLink(w, link)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range frames {
		data := c.eth
		if link == wire.LinkTypeLinuxSLL2 {
			data = c.sll2()
		}
		if err := pw.WritePacket(gopacket.CaptureInfo{Timestamp: c.ts, CaptureLength: len(data), Length: len(data)}, data); err != nil {
			t.Fatal(err)
		}
	}
}

// pcapngOf writes records as a little-endian pcapng with one interface of the link type and
// nanosecond timestamps.
func pcapngOf(link uint16, recs [][]byte, ts []time.Time) []byte {
	le := binary.LittleEndian
	var b bytes.Buffer
	block := func(typ uint32, body []byte) {
		for len(body)%4 != 0 {
			body = append(body, 0)
		}
		n := uint32(12 + len(body))
		b.Write(le.AppendUint32(le.AppendUint32(nil, typ), n))
		b.Write(body)
		b.Write(le.AppendUint32(nil, n))
	}
	shb := le.AppendUint32(nil, 0x1A2B3C4D)
	shb = le.AppendUint16(le.AppendUint16(shb, 1), 0)
	shb = le.AppendUint64(shb, 0xFFFFFFFFFFFFFFFF)
	block(0x0A0D0D0A, shb)
	idb := le.AppendUint16(nil, link)
	idb = le.AppendUint32(le.AppendUint16(idb, 0), wire.MaxSnaplen)
	idb = append(idb, 9, 0, 1, 0, 9, 0, 0, 0) // if_tsresol: 10^-9
	idb = append(idb, 0, 0, 0, 0)
	block(1, idb)
	for i, r := range recs {
		ns := uint64(ts[i].UnixNano())
		epb := le.AppendUint32(nil, 0)
		epb = le.AppendUint32(le.AppendUint32(epb, uint32(ns>>32)), uint32(ns))
		epb = le.AppendUint32(le.AppendUint32(epb, uint32(len(r))), uint32(len(r)))
		block(6, append(epb, r...))
	}
	return b.Bytes()
}

// captureWriter writes frames to a classic pcap of Ethernet frames, each stamped step after
// the one before, the first step after start.
type captureWriter struct {
	tb   testing.TB
	pw   *pcapgo.Writer
	now  time.Time
	step time.Duration
}

func newCaptureWriter(tb testing.TB, w io.Writer, start time.Time, step time.Duration) *captureWriter {
	tb.Helper()
	pw, err := wire.NewPcapWriter(w)
	if err != nil {
		tb.Fatal(err)
	}
	return &captureWriter{tb: tb, pw: pw, now: start, step: step}
}

// add writes frame whole.
func (c *captureWriter) add(frame []byte) {
	c.tb.Helper()
	c.now = c.now.Add(c.step)
	if err := c.pw.WritePacket(gopacket.CaptureInfo{Timestamp: c.now, CaptureLength: len(frame), Length: len(frame)}, frame); err != nil {
		c.tb.Fatal(err)
	}
}

func runText(t *testing.T, data []byte, opt Options) (string, Summary, error) {
	t.Helper()
	var out bytes.Buffer
	sum, err := Run(bytes.NewReader(data), &out, opt)
	return out.String(), sum, err
}

// TestCookedV2 decodes Linux cooked capture v2 (LINKTYPE_LINUX_SLL2, 276), what tcpdump -i any
// writes, in pcap and pcapng: the report is the one of the same frames captured on Ethernet.
// testdata/pcap/cooked-v2.pcap is made here; -update rewrites it.
func TestCookedV2(t *testing.T) {
	frames := cookedFrames(t)
	var eth, sll2 bytes.Buffer
	writeCooked(t, &eth, wire.LinkTypeEthernet, frames)
	writeCooked(t, &sll2, wire.LinkTypeLinuxSLL2, frames)
	if *update {
		if err := os.WriteFile(cookedV2File, sll2.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file, err := os.ReadFile(cookedV2File)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, sll2.Bytes()) {
		t.Errorf("%s is not what the test makes; go test ./wire/decode -run TestCookedV2 -update", cookedV2File)
	}

	var recs [][]byte
	var ts []time.Time
	for _, c := range frames {
		recs, ts = append(recs, c.sll2()), append(ts, c.ts)
	}
	// Frame lines do not show the link layer (nor the frame length, which the flows count).
	opt := Options{}
	want, wsum, err := runText(t, eth.Bytes(), opt)
	if err != nil || !wsum.Clean() || wsum.RoCEv2 != len(frames)-1 || wsum.Frames != len(frames) {
		t.Fatalf("Ethernet: %v %+v", err, wsum)
	}
	for name, data := range map[string][]byte{"pcap": file, "pcapng": pcapngOf(uint16(wire.LinkTypeLinuxSLL2), recs, ts)} {
		got, sum, err := runText(t, data, opt)
		if err != nil || sum != wsum || got != want {
			t.Errorf("cooked v2 %s: %v %+v\n%s\nwant\n%s", name, err, sum, got, want)
		}
	}
	if !strings.Contains(want, " RC_RDMA_WRITE_FIRST qp=0x000012 psn=1000 va=0xffff800012345000 rkey=0x000002a6 len=512 payload=256 icrc=ok\n") ||
		!strings.Contains(want, "fd00:7::1 -> fd00:7::2 ") {
		t.Errorf("report:\n%s", want)
	}
	if got, _, _ := runText(t, file, Options{Flows: true}); !strings.Contains(got, "\nflows: 2 RC connections\nconn 10.0.7.2 qp=0x000012 <-> 10.0.7.1 qp=0x000011\n") {
		t.Errorf("flows:\n%s", got)
	}
}

// TestCookedShort: cooked records shorter than their header, or cut inside the IP packet, are
// frames that are not RoCE or malformed ones, never a panic.
func TestCookedShort(t *testing.T) {
	frames := cookedFrames(t)
	whole := frames[1].sll2() // RC_RDMA_WRITE_FIRST over IPv4
	for _, link := range []uint16{uint16(wire.LinkTypeLinuxSLL2), uint16(wire.LinkTypeLinuxSLL)} {
		var recs [][]byte
		var ts []time.Time
		for n := 0; n <= wire.SLL2Len+40; n++ {
			recs, ts = append(recs, whole[:n]), append(ts, frames[0].ts)
		}
		_, sum, err := runText(t, pcapngOf(link, recs, ts), Options{Flows: true, JSON: true})
		if err != nil || sum.Frames != len(recs) || sum.ICRCOK+sum.ICRCBad != 0 {
			t.Errorf("link %d: %v %+v", link, err, sum)
		}
	}
	// The header alone, in classic pcap: not RoCE.
	var b bytes.Buffer
	writeCooked(t, &b, wire.LinkTypeLinuxSLL2, nil)
	pw := pcapgo.NewWriterNanos(&b)
	if err := pw.WritePacket(gopacket.CaptureInfo{Timestamp: frames[0].ts, CaptureLength: wire.SLL2Len, Length: wire.SLL2Len}, whole[:wire.SLL2Len]); err != nil {
		t.Fatal(err)
	}
	if _, sum, err := runText(t, b.Bytes(), Options{}); err != nil || sum != (Summary{Frames: 1}) {
		t.Errorf("header only: %v %+v", err, sum)
	}
}

// TestUnknownLinkType: a link type the decoder cannot read is an error that names its number,
// whether gopacket knows it (802.11) or not, and link types above 255 are not taken for the one
// their low byte names (276 is not 20, 257 is not Ethernet).
func TestUnknownLinkType(t *testing.T) {
	for link, want := range map[wire.LinkType]string{
		105: "unreadable capture: link type 105 (802.11) is not one the decoder reads (Ethernet, raw IP, Linux cooked v1 or v2)",
		147: "unreadable capture: link type 147 is not one the decoder reads (Ethernet, raw IP, Linux cooked v1 or v2)",
		257: "unreadable capture: link type 257 is not one the decoder reads (Ethernet, raw IP, Linux cooked v1 or v2)",
		532: "unreadable capture: link type 532 is not one the decoder reads (Ethernet, raw IP, Linux cooked v1 or v2)",
	} {
		var b bytes.Buffer
		writeCooked(t, &b, link, nil)
		_, _, err := runText(t, b.Bytes(), Options{})
		if err == nil || err.Error() != want || !errors.Is(err, ErrUnreadable) {
			t.Errorf("link type %d: %v, want %q", link, err, want)
		}
		_, _, err = runText(t, pcapngOf(uint16(link), nil, nil), Options{})
		if err == nil || err.Error() != want {
			t.Errorf("pcapng link type %d: %v, want %q", link, err, want)
		}
	}
}
