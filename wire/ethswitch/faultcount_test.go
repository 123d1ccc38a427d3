package ethswitch_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/gopacket"

	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
	"github.com/softirdma/softirdma/wire/internal/pcaptest"
	"github.com/softirdma/softirdma/wire/roce"
)

// The MACs of the ports a, b and c in these tests.
var macA, macB, macC = [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 3}

// rocev2 is a RoCEv2 frame from src to dst (IPv6 link-local addresses with v6).
func rocev2(t testing.TB, src, dst [6]byte, v6 bool, op roce.Opcode, psn uint32, payload int) []byte {
	t.Helper()
	p := roce.Path{SrcMAC: src, DstMAC: dst, SrcIP: netip.AddrFrom4([4]byte{192, 0, 2, src[5]}),
		DstIP: netip.AddrFrom4([4]byte{192, 0, 2, dst[5]}), SrcPort: 49152, TTL: 64}
	if v6 {
		p.SrcIP = netip.AddrFrom16([16]byte{0xfe, 0x80, 15: src[5]})
		p.DstIP = netip.AddrFrom16([16]byte{0xfe, 0x80, 15: dst[5]})
	}
	b := roce.NewBuilder(p)
	fr, err := b.Build(make([]byte, b.FrameLen(op, payload)), &roce.Header{Opcode: op, DestQP: 0x11, PSN: psn}, bytes.Repeat([]byte{byte(psn)}, payload))
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

// lookalike is an IPv4 frame from src to dst that is not RoCEv2 but carries the byte op where a
// RoCEv2 frame's BTH opcode stands (offset 42) and a plausible BTH after it: a TCP segment whose
// acknowledgement number begins with it, a UDP datagram to another port, a later fragment of a
// RoCEv2 datagram, an IPv4 header with options that shift the UDP header.
func lookalike(src, dst [6]byte, kind string, op roce.Opcode) []byte {
	f := make([]byte, 14+20+8+12+64+4)
	copy(f[0:], dst[:])
	copy(f[6:], src[:])
	binary.BigEndian.PutUint16(f[12:], roce.EtherTypeIPv4)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(len(f)-14))
	copy(ip[12:], []byte{192, 0, 2, src[5], 192, 0, 2, dst[5]})
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], 49152)
	binary.BigEndian.PutUint16(udp[2:], roce.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(f)-34))
	switch kind {
	case "tcp":
		ip[9] = 6
	case "udp-4790":
		binary.BigEndian.PutUint16(udp[2:], 4790)
	case "fragment":
		binary.BigEndian.PutUint16(ip[6:], 185) // offset 1480 bytes: no UDP header here
	case "ipv4-options":
		ip[0] = 0x46 // a 24-byte header: the UDP header starts 4 bytes later
	}
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], roce.IPv4Checksum(ip[:20]))
	bth := f[42:]
	bth[0], bth[2], bth[3], bth[7], bth[11] = byte(op), 0xff, 0xff, 0x11, 7
	return f
}

// faultCase is one fault of the plan and how to tell, from a captured frame alone (an
// independent parse of the capture), whether it matches.
type faultCase struct {
	spec    string
	matches func(src [6]byte, f *roce.Frame) bool
}

// The fault counts are the truth, frame by frame: a known sequence of frames (RoCEv2 READ
// responses among frames that only look like them at the BTH's offset) crosses the switch under
// a plan of faults; each fault's seen is the number of captured frames it matches by an
// independent parse of the capture, its fired frames are the capture's numbers of the frames it
// changed, and what each port received is the capture less what the faults dropped, plus what
// they duplicated. A fault that matches a frame an earlier fault dropped has seen it and not fired.
func TestFaultCountsAgreeWithCapture(t *testing.T) {
	sw := ethswitch.New()
	var pcap bytes.Buffer
	pw, err := wire.NewPcapWriter(&pcap)
	if err != nil {
		t.Fatal(err)
	}
	sw.SetTap(func(_ string, ts time.Time, f []byte) {
		if err := pw.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(f), Length: len(f)}, f); err != nil {
			t.Error(err)
		}
	})
	plan := &faultplan.Live{}
	sw.SetFaults(plan)
	a, b, c := sw.NewPort("a"), sw.NewPort("b"), sw.NewPort("c")
	isOp := func(ops ...roce.Opcode) func([6]byte, *roce.Frame) bool {
		return func(_ [6]byte, f *roce.Frame) bool { return slices.Contains(ops, f.Opcode) }
	}
	from := func(mac [6]byte, m func([6]byte, *roce.Frame) bool) func([6]byte, *roce.Frame) bool {
		return func(src [6]byte, f *roce.Frame) bool { return src == mac && m(src, f) }
	}
	cases := []faultCase{
		{"drop from=b opcode=RDMA_READ_RESPONSE_MIDDLE nth=3 name=read-middle", from(macB, isOp(roce.RCReadResponseMiddle))},
		// The same frame as the drop's: seen, but dropped already, so not fired on.
		{"corrupt from=b opcode=RDMA_READ_RESPONSE_MIDDLE nth=3 name=after-drop", from(macB, isOp(roce.RCReadResponseMiddle))},
		{"duplicate from=b opcode=RDMA_READ_RESPONSE_LAST count=2 name=dup-last", from(macB, isOp(roce.RCReadResponseLast))},
		{"corrupt from=a opcode=RDMA_READ_REQUEST nth=2 name=request", from(macA, isOp(roce.RCReadRequest))},
	}
	for _, fc := range cases {
		f, err := faultplan.Parse(fc.spec)
		if err != nil {
			t.Fatal(err)
		}
		plan.Add(f)
	}
	// c's link is down for the whole test: what it sends and what would reach it are stopped.
	flap, err := faultplan.Parse("flap from=c for=1h name=c-down")
	if err != nil {
		t.Fatal(err)
	}
	plan.Add(flap)

	// The sequence: a asks, b answers with FIRST, MIDDLE..., LAST, lookalikes of b's in between;
	// IPv6 too; c sends and a broadcasts (which would reach c).
	var seq []struct {
		p *ethswitch.Port
		f []byte
	}
	put := func(p *ethswitch.Port, f []byte) {
		seq = append(seq, struct {
			p *ethswitch.Port
			f []byte
		}{p, f})
	}
	psn := uint32(0)
	for read := range 3 {
		v6 := read == 2
		put(a, rocev2(t, macA, macB, v6, roce.RCReadRequest, psn, 0))
		put(b, rocev2(t, macB, macA, v6, roce.RCReadResponseFirst, psn, 64))
		for i := range 4 {
			psn++
			put(b, rocev2(t, macB, macA, v6, roce.RCReadResponseMiddle, psn, 64))
			put(b, lookalike(macB, macA, []string{"tcp", "udp-4790", "fragment", "ipv4-options"}[i], roce.RCReadResponseMiddle))
		}
		psn++
		put(b, rocev2(t, macB, macA, v6, roce.RCReadResponseLast, psn, 64))
		psn++
	}
	put(c, rocev2(t, macC, macA, false, roce.RCReadResponseMiddle, 100, 64))
	bcast := lookalike(macA, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "udp-4790", roce.RCSendOnly)
	put(a, bcast)
	for _, s := range seq {
		// Half through SendBatch (the sender keeps its buffer), half through SendBuffer.
		if len(s.f)%2 == 0 {
			send(t, s.p, s.f)
		} else {
			buf := s.p.Buffer()[:len(s.f)]
			copy(buf, s.f)
			s.p.SendBuffer(buf)
		}
	}

	// The capture, parsed on its own: which faults each frame matches, in order.
	captured := pcaptest.Read(t, bytes.NewReader(pcap.Bytes()))
	if len(captured) != len(seq) || plan.Frames() != uint64(len(seq)) {
		t.Fatalf("captured %d frames, the plan was shown %d, %d were sent", len(captured), plan.Frames(), len(seq))
	}
	type want struct {
		seen   int
		frames []uint64
	}
	wants := make([]want, len(cases))
	dropped := map[int]bool{}
	dup := map[int]bool{}
	var flapFrames []uint64
	var p roce.Parser
	learned := map[[6]byte]bool{}
	for i, data := range captured {
		n := uint64(i + 1)
		src, dst := [6]byte(data[6:12]), [6]byte(data[0:6])
		// A frame from c, or one that would reach c (a broadcast, or one for a MAC the switch
		// has not learned yet: flooded) unless a fault dropped it first.
		reachesC := data[0] == 0xff || !learned[dst]
		learned[src] = true
		if src == macC {
			flapFrames = append(flapFrames, n)
			dropped[i] = true
			continue
		}
		var f roce.Frame
		err := p.Parse(&f, data)
		rocev2 := err == nil || roce.KindOf(err) == roce.KindBadICRC
		for k, fc := range cases {
			if !rocev2 {
				break // not RoCEv2: no fault may match it
			}
			if !fc.matches(src, &f) {
				continue
			}
			wants[k].seen++
			nth, _ := faultplan.Parse(fc.spec)
			fires := (nth.Nth > 0 && wants[k].seen == nth.Nth) || (nth.Nth == 0 && (nth.Count == 0 || len(wants[k].frames) < nth.Count))
			if fires && !dropped[i] {
				wants[k].frames = append(wants[k].frames, n)
				switch nth.Action {
				case faultplan.Drop:
					dropped[i] = true
				case faultplan.Duplicate:
					dup[i] = true
				}
			}
		}
		if reachesC && !dropped[i] {
			flapFrames = append(flapFrames, n)
		}
	}
	list := plan.List()
	for k, fc := range cases {
		e := list[k]
		if e.Seen != wants[k].seen || e.Fired != len(wants[k].frames) || !slices.Equal(e.Frames, wants[k].frames) {
			t.Errorf("%s: seen=%d fired=%d frames=%v; the capture says seen=%d fired=%d frames=%v",
				fc.spec, e.Seen, e.Fired, e.Frames, wants[k].seen, len(wants[k].frames), wants[k].frames)
		}
	}
	if e := list[len(cases)]; e.Fired != len(flapFrames) || !slices.Equal(e.Frames, flapFrames) {
		t.Errorf("flap: fired=%d frames=%v; the capture says %d frames %v", e.Fired, e.Frames, len(flapFrames), flapFrames)
	}
	if wants[0].frames == nil || wants[1].seen < 3 || wants[1].frames != nil {
		t.Fatalf("the sequence does not test what it should: %+v", wants)
	}

	// What each port received is the capture's frames for it, less the dropped, plus the
	// duplicates, in order (a corruption changes bytes, not which frames arrive).
	for _, port := range []struct {
		p   *ethswitch.Port
		mac [6]byte
	}{{a, macA}, {b, macB}} {
		var expect []string
		for i, data := range captured {
			if dropped[i] || [6]byte(data[6:12]) == port.mac || (data[0] != 0xff && [6]byte(data[0:6]) != port.mac) {
				continue
			}
			expect = append(expect, frameID(data))
			if dup[i] {
				expect = append(expect, frameID(data))
			}
		}
		var got []string
		bufs := [][]byte{make([]byte, roce.MaxFrameLen)}
		sizes := make([]int, 1)
		for port.p.Queued() > 0 {
			n, err := port.p.RecvBatch(bufs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				got = append(got, frameID(bufs[i][:sizes[i]]))
			}
		}
		if !slices.Equal(got, expect) {
			t.Errorf("port %s received\n%q\nthe capture less the drops says\n%q", port.p.Name(), got, expect)
		}
	}
	if n := c.Queued(); n != 0 {
		t.Errorf("c, whose link is down, has %d frames queued", n)
	}
}

// frameID names a frame by its bytes: a port receives exactly what the capture holds (a
// corruption happens before the tap sees the frame).
func frameID(f []byte) string {
	sum := sha256.Sum256(f)
	return fmt.Sprintf("%x>%x %x len=%d", f[11], f[5], sum[:6], len(f))
}
