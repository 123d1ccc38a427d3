package engine_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// capturedRC is one frame of a capture with what these tests look at: who answered whom.
type capturedRC struct {
	from  *engine.Device
	dstQP uint32
	op    wire.Opcode
	psn   uint32
}

func (p *pair) captureRC(pcap *bytes.Buffer) []capturedRC {
	p.t.Helper()
	var out []capturedRC
	eachCapturedFrame(p.t, pcap, func(f *wire.Frame, _ gopacket.CaptureInfo) {
		from := p.a
		if f.SrcIP().Unmap() == p.b.IP().Unmap() {
			from = p.b
		}
		out = append(out, capturedRC{from: from, dstQP: f.BTH.DestQP(), op: f.Opcode, psn: f.BTH.PSN()})
	})
	return out
}

// isReadResponse says whether c is a READ response B sent to A's QP qpn.
func (p *pair) isReadResponse(c capturedRC, qpn uint32) bool {
	return c.from == p.b && c.dstQP == qpn && (c.op == wire.RCReadResponseFirst || c.op == wire.RCReadResponseOnly || c.op == wire.RCReadResponseMiddle || c.op == wire.RCReadResponseLast)
}

// readSpan returns the capture positions of the first and last READ response B sent to A's QP
// qpn, and how many there were.
func (p *pair) readSpan(frames []capturedRC, qpn uint32) (first, last, count int) {
	p.t.Helper()
	first, last = -1, -1
	for i, c := range frames {
		if p.isReadResponse(c, qpn) {
			count++
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		p.t.Fatal("no READ responses in the capture")
	}
	return first, last, count
}

// A 16 MiB READ's 4,096 responses leave in budgets, each a step of the scheduler, not all in
// the step that received the READ: a WRITE posted on another QP of the responder's device once
// the first response is out leaves before the READ's last response. (All of it happens at one
// instant of virtual time: the steps pace the work, the link model paces time.)
func TestLongReadResponsesTakeTurnsWithOtherQPs(t *testing.T) {
	const n = 16 << 20
	p := newPairWith(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU4096}, make([]byte, n), make([]byte, n))
	var pcap bytes.Buffer
	must(t, p.fab.CapturePcap(&pcap))
	caps := engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa2, qb2 := connectedRC(t, rcEnd{pd: p.pdA, cq: p.cqA, cap: caps}, rcEnd{pd: p.pdB, cq: p.cqB, cap: caps}, engine.ConnectOptions{})
	fill(p.bufB, 5)

	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	for p.fab.LinkStats(p.b).TxFrames == 0 {
		if !p.sim.Step() {
			t.Fatal("idle before B answered the READ")
		}
	}
	must(t, qb2.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrB, 0, 64), RemoteAddr: p.mrA.Addr(), RKey: p.mrA.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: n})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite})
	if !bytes.Equal(p.bufA[64:], p.bufB[64:]) {
		t.Fatal("READ data differs")
	}

	frames := p.captureRC(&pcap)
	first, last, count := p.readSpan(frames, p.qa.Num())
	write := -1
	for i, c := range frames {
		if c.from == p.b && c.dstQP == qa2.Num() && c.op == wire.RCWriteOnly {
			write = i
		}
	}
	if count != n/4096 {
		t.Fatalf("%d READ responses, want %d", count, n/4096)
	}
	if !(first < write && write < last) {
		t.Fatalf("capture positions: READ responses %d..%d, the other QP's WRITE %d; want it in between", first, last, write)
	}
}

// Answers leave in the order of the requests, whatever the budgets: a WRITE and a SEND posted
// behind a long READ on the same QP are acknowledged only after the READ's last response, and
// the responses go in PSN order.
func TestLongReadResponsesKeepOrderOnTheirQP(t *testing.T) {
	// 100 responses: more than a budget, and few enough PSNs for the requester to send the
	// WRITE and the SEND right behind the READ.
	const n = 100 << 10
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	var pcap bytes.Buffer
	must(t, p.fab.CapturePcap(&pcap))
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(p.mrB, 0, 64)}))
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, SGL: sge(p.mrA, 4096, n), RemoteAddr: p.mrB.Addr() + 4096, RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr() + 128, RKey: p.mrB.RKey()},
		engine.SendWR{ID: 3, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64)}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Opcode: engine.WCSend})

	frames := p.captureRC(&pcap)
	_, last, _ := p.readSpan(frames, p.qa.Num())
	prev := int32(-1)
	acks := 0
	for i, c := range frames {
		if c.from != p.b || c.dstQP != p.qa.Num() {
			continue
		}
		if c.op == wire.RCAcknowledge {
			acks++
			if i < last {
				t.Fatalf("ACK of psn %d at capture position %d, before the READ's last response at %d", c.psn, i, last)
			}
			continue
		}
		if int32(c.psn) <= prev {
			t.Fatalf("READ response psn %d after psn %d", c.psn, prev)
		}
		prev = int32(c.psn)
	}
	if acks == 0 {
		t.Fatal("B acknowledged nothing")
	}
}

// A request refused while a READ's responses are still owed is NAKed after them: the READ
// completes and the request behind it fails with its own error. A NAK that overtook the
// responses, or responses dropped when the QP went to ERR, would fail the READ instead.
func TestRefusalWaitsForOwedReadResponses(t *testing.T) {
	// 100 responses: more than a budget, and few enough PSNs for the requester to send the
	// WRITE right behind the READ.
	const n = 100 << 10
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	fill(p.bufB[:n], 3)
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, n, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey() + 1}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: n}, engine.WC{WRID: 2, Status: engine.WCRemAccessErr, Opcode: engine.WCRDMAWrite})
	if !bytes.Equal(p.bufA[:n], p.bufB[:n]) {
		t.Fatal("READ data differs")
	}
}

// Budgets are steps of the simulator like any other: the same seed gives the same pcap with
// long READs on two QPs over a lossy link.
func TestPacedReadResponsesAreDeterministic(t *testing.T) {
	run := func() []byte {
		const n = 4 << 20
		p := newPairWith(t, 7, sim.LinkConfig{Loss: 0.01, Reorder: 0.01}, engine.ConnectOptions{MTU: engine.MTU4096}, make([]byte, n), make([]byte, n))
		p.fab.OnEvent(nil)
		var pcap bytes.Buffer
		must(t, p.fab.CapturePcap(&pcap))
		caps := engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
		qa2, _ := connectedRC(t, rcEnd{pd: p.pdA, cq: p.cqA, cap: caps},
			rcEnd{pd: p.pdB, cq: p.cqB, cap: caps}, engine.ConnectOptions{MTU: engine.MTU4096})
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n/2), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		must(t, qa2.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, n/2, n/2), RemoteAddr: p.mrB.Addr() + n/2, RKey: p.mrB.RKey()}))
		p.run()
		got := poll(p.cqA)
		if len(got) != 2 || got[0].Status != engine.WCSuccess || got[1].Status != engine.WCSuccess {
			t.Fatalf("completions %s, want two successful READs", fmtWC(got))
		}
		return pcap.Bytes()
	}
	if a, b := run(), run(); !bytes.Equal(a, b) {
		t.Fatalf("two runs of one seed gave different pcaps (%d and %d bytes)", len(a), len(b))
	}
}

// A burst of WRITEs is acknowledged once (IBTA 9.7.5.1.2, coalesced ACKs): the responder's
// ACK waits for the end of the burst and names its last PSN. A SEND, whose receive completion
// the responder's application sees at once, is acknowledged at once, and carries the WRITEs
// before it with it. Every WRITE and the SEND complete, with the data in place.
func TestBurstOfWritesIsAckedOnce(t *testing.T) {
	p := plainPair(t)
	var pcap bytes.Buffer
	must(t, p.fab.CapturePcap(&pcap))
	fill(p.bufA[:1<<16], 9)
	const writes = 32
	var wrs []engine.SendWR
	for i := range writes {
		wrs = append(wrs, engine.SendWR{ID: uint64(i), Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, uint64(i*64), 64),
			RemoteAddr: p.mrB.Addr() + uint64(i*64), RKey: p.mrB.RKey()})
	}
	must(t, p.qa.PostSend(wrs...))
	p.run()
	if got := len(poll(p.cqA)); got != writes {
		t.Fatalf("%d completions, want %d", got, writes)
	}
	if !bytes.Equal(p.bufB[:writes*64], p.bufA[:writes*64]) {
		t.Fatal("data differs")
	}
	first := p.qa.Query().SQPSN
	acks := func() (psns []uint32) {
		for _, c := range p.captureRC(&pcap) {
			if c.from == p.b && c.op == wire.RCAcknowledge {
				psns = append(psns, c.psn)
			}
		}
		return psns
	}
	if got, want := acks(), []uint32{engine.PSNAdd(first, writes-1)}; !slices.Equal(got, want) {
		t.Fatalf("ACKs for PSNs %v, want %v: one for the burst's last", got, want)
	}

	// Two WRITEs, a SEND and two more WRITEs in one burst: the SEND's ACK leaves when it is
	// received, covering the WRITEs before it; the two after it get one of their own.
	pcap.Reset()
	must(t, p.fab.CapturePcap(&pcap))
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 7, SGL: sge(p.mrB, 1<<20, 64)}))
	base := engine.PSNAdd(first, writes)
	must(t, p.qa.PostSend(wrs[0], wrs[1], engine.SendWR{ID: 99, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64)}, wrs[2], wrs[3]))
	p.run()
	if got := len(poll(p.cqA)); got != 5 {
		t.Fatalf("%d completions, want 5", got)
	}
	wantWC(t, poll(p.cqB), engine.WC{WRID: 7, Opcode: engine.WCRecv, ByteLen: 64})
	if got, want := acks(), []uint32{engine.PSNAdd(base, 2), engine.PSNAdd(base, 4)}; !slices.Equal(got, want) {
		t.Fatalf("ACKs for PSNs %v, want %v", got, want)
	}
}
