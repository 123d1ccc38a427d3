package engine_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// A READ of more than DefaultSendWindow responses loses (or receives late) one response past the
// 128th: the requester asks for the rest once, at once, and finishes without a timeout. It used
// to go back to that response from outside its own window and time out into the same state
// until RETRY_EXC_ERR.
func TestLongReadLostResponsePast128(t *testing.T) {
	const n = 256 << 10 // 256 responses at MTU 1024
	for _, tc := range []struct {
		name   string
		action sim.FaultAction
		// B sends the 256 responses, then the 56 asked for again from PSN 200; a late
		// response 200 arrives after the READ finished and is dropped.
		dropped uint64
	}{{"drop", sim.FaultDrop, 0}, {"reorder", sim.FaultDelay, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
			ft := p.fab.AddFault(sim.Fault{Name: "response 200", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseMiddle},
				MatchPSN: true, PSN: 200, Nth: 1, Action: tc.action, Delay: 50 * time.Microsecond})
			fill(p.bufB[:n], 5)
			must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
			p.run()
			wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: n})
			if !bytes.Equal(p.bufA[:n], p.bufB[:n]) {
				t.Fatal("READ data differs")
			}
			if ft.Fired() != 1 || p.a.Stats().TxFrames != 2 || p.b.Stats().TxFrames != 256+56 || p.a.Stats().Timeouts != 0 || p.a.Stats().RxDropped != tc.dropped {
				t.Fatalf("fault fired %d; A sent %d frames, B %d, A timed out %d times and dropped %d (want 1; 2, 312, 0, %d)",
					ft.Fired(), p.a.Stats().TxFrames, p.b.Stats().TxFrames, p.a.Stats().Timeouts, p.a.Stats().RxDropped, tc.dropped)
			}
			if n := len(p.eventsLike(engine.EvRetry, "200 expected: resend from 200")); n != 1 {
				t.Fatalf("%d requests for the responses from 200 on, want 1", n)
			}
		})
	}
}

// readUnderLoss runs one READ of n bytes at the MTU with the link losing frames both ways, and
// checks that it completes with the right bytes.
func readUnderLoss(t *testing.T, seed uint64, n int, mtu engine.MTU, loss float64) *pair {
	t.Helper()
	p := newPair(t, seed, sim.LinkConfig{Loss: loss}, engine.ConnectOptions{MTU: mtu, PSNA: uint32(seed*0x9e3779) & engine.PSNMask})
	p.fab.OnEvent(nil) // millions of events otherwise
	bufA, bufB := p.bufA, p.bufB
	mrA, mrB := p.mrA, p.mrB
	if n > len(bufA) {
		all := engine.AccessLocalWrite | engine.AccessRemoteRead
		bufA, bufB = make([]byte, n), make([]byte, n)
		var err error
		mrA, err = p.pdA.RegMR(bufA, all)
		must(t, err)
		mrB, err = p.pdB.RegMR(bufB, all)
		must(t, err)
	}
	fill(bufB[:n], byte(seed))
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(mrA, 0, uint32(n)), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}))
	if steps := p.sim.RunUntilIdle(50_000_000); steps == 50_000_000 {
		t.Fatalf("seed %d: still busy", seed)
	}
	got := poll(p.cqA)
	if len(got) != 1 || got[0].Status != engine.WCSuccess || got[0].ByteLen != uint32(n) {
		t.Fatalf("seed %d: completions %s, want one successful READ of %d bytes", seed, fmtWC(got), n)
	}
	if !bytes.Equal(bufA[:n], bufB[:n]) {
		t.Fatalf("seed %d: READ data differs", seed)
	}
	return p
}

// A 1 MiB READ (1024 responses) at 10% loss both ways completes on every seed.
func TestLongReadUnderLoss(t *testing.T) {
	seeds := 20
	if testing.Short() || raceDetector {
		seeds = 3 // each seed sends some 50,000 responses
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		readUnderLoss(t, seed, 1<<20, engine.MTU1024, 0.10)
	}
}

// A 16 MiB READ (16384 responses at MTU 1024) under loss. Every lost response costs the rest
// of the READ again (a responder answers a READ asked for again from the PSN asked for to its
// end), so the loss is kept low enough for that to stay cheap.
func TestHugeReadUnderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("16 MiB of responses, some more than once")
	}
	p := readUnderLoss(t, 1, 16<<20, engine.MTU1024, 0.001)
	if p.a.Stats().Retransmits == 0 {
		t.Fatal("nothing was lost: the test proves nothing")
	}
}

// readBWFigures is what a perftest-like READ workload put on the wire.
type readBWFigures struct {
	iters, pkts    int    // READs and responses per READ
	requests       uint64 // READ request frames (everything A sent)
	responses      uint64 // READ response frames
	naks           uint64 // sequence NAKs
	lost           uint64 // frames the link lost
	timeouts       uint64
	elapsedVirtual time.Duration
}

// extra is how many request and response frames went beyond the loss-free count.
func (f readBWFigures) extra() uint64 {
	return f.requests + f.responses - uint64(f.iters*(1+f.pkts))
}

func (f readBWFigures) String() string {
	ideal := f.iters * (1 + f.pkts)
	return fmt.Sprintf("frames %d (loss-free %d, x%.2f): READ requests %d (loss-free %d), responses %d (loss-free %d), NAKs %d; lost %d, extra requests+responses per lost frame %.1f; timeouts %d; %v virtual",
		f.requests+f.responses+f.naks, ideal, float64(f.requests+f.responses+f.naks)/float64(ideal),
		f.requests, f.iters, f.responses, f.iters*f.pkts, f.naks, f.lost, float64(f.extra())/float64(max(f.lost, 1)), f.timeouts, f.elapsedVirtual)
}

// readBW is ib_read_bw's client on the simulator: iters READs of size bytes, depth of them
// outstanding at a time, every one signalled, at mtu, over a 10 Gb/s link that loses frames
// both ways. (At an infinite rate every response of the READs in flight has arrived by the time
// a gap is seen, which hides what asking again for more than the gap costs.)
func readBW(t testing.TB, seed uint64, loss float64, iters, depth, size int, mtu engine.MTU) readBWFigures {
	t.Helper()
	p := newPair(t, seed, sim.LinkConfig{Loss: loss, Rate: 10e9, Latency: 2 * time.Microsecond}, engine.ConnectOptions{MTU: mtu, PSNA: uint32(seed*0x51ed27) & engine.PSNMask})
	p.fab.OnEvent(nil)
	const slots = 64
	fill(p.bufB[:slots*size], byte(seed))
	wc := make([]engine.WC, 64)
	posted, done := 0, 0
	for done < iters {
		for posted-done < depth && posted < iters {
			off := uint64(posted%slots) * uint64(size)
			must(t, p.qa.PostSend(engine.SendWR{ID: uint64(posted), Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, off, uint32(size)),
				RemoteAddr: p.mrB.Addr() + off, RKey: p.mrB.RKey()}))
			posted++
		}
		for p.cqA.Len() == 0 {
			if !p.sim.Step() {
				t.Fatalf("seed %d: idle with %d of %d READs done", seed, done, iters)
			}
		}
		k := p.cqA.Poll(wc)
		for _, c := range wc[:k] {
			if c.Status != engine.WCSuccess || c.WRID != uint64(done) {
				t.Fatalf("seed %d: completion %s, want READ %d successful", seed, fmtWC([]engine.WC{c}), done)
			}
			done++
		}
	}
	elapsed := p.sim.Now() // to the last completion
	p.run()
	if !bytes.Equal(p.bufA[:slots*size], p.bufB[:slots*size]) {
		t.Fatalf("seed %d: READ data differs", seed)
	}
	a, b := p.a.Stats(), p.b.Stats()
	return readBWFigures{iters: iters, pkts: (size + mtu.Bytes() - 1) / mtu.Bytes(),
		requests: a.TxFrames, responses: b.TxFrames - b.SeqNAKsSent, naks: b.SeqNAKsSent,
		lost: a.TxFrames + b.TxFrames - a.RxFrames - b.RxFrames, timeouts: a.Timeouts, elapsedVirtual: elapsed}
}

// ib_read_bw's traffic (tx depth 128, 32 KiB READs at MTU 1024) at 5% loss: a lost response
// costs one request for the rest of its READ and that rest, a lost request the requests after
// it; it must not cost the READs after the gap being asked for again (every new gap used to
// send every later outstanding READ again: about three times the loss-free frames).
// -v prints the figures.
func TestReadBWRetransmitsPerLostFrame(t *testing.T) {
	const iters, depth, size = 400, 128, 32 << 10
	clean := readBW(t, 1, 0, iters, depth, size, engine.MTU1024)
	if clean.extra() != 0 || clean.naks != 0 || clean.lost != 0 {
		t.Fatalf("loss-free: %v", clean)
	}
	t.Logf("loss-free: %v", clean)
	for seed := uint64(1); seed <= 3; seed++ {
		f := readBW(t, seed, 0.05, iters, depth, size, engine.MTU1024)
		t.Logf("seed %d, 5%% loss: %v", seed, f)
		// A lost response costs one request and the rest of its READ (a loss behind it in
		// the same stream costs nothing more); a lost request the requests behind it. That
		// comes to about 9.5 frames per lost frame (asking again for every later READ too
		// cost about 17, and three times the frames of a loss-free run).
		if per := float64(f.extra()) / float64(f.lost); per > 12 {
			t.Errorf("seed %d: %.1f extra request and response frames per lost frame, want at most 12: %v", seed, per, f)
		}
		if total := f.requests + f.responses + f.naks; total > uint64(clean.requests+clean.responses)*5/2 {
			t.Errorf("seed %d: %d frames, want at most 2.5 times the %d of a loss-free run: %v", seed, total, clean.requests+clean.responses, f)
		}
	}
}

// BenchmarkReadBWLoss5 reports what ib_read_bw's traffic (400 READs of 32 KiB, tx depth 128, MTU
// 1024) puts on a 10 Gb/s wire that loses 5% of the frames: frames and READ requests per READ
// (33 and 1 without loss), extra request and response frames per lost frame, local ACK timeouts
// and the virtual time the run took.
func BenchmarkReadBWLoss5(b *testing.B) {
	const iters, depth, size = 400, 128, 32 << 10
	var f readBWFigures
	for b.Loop() {
		f = readBW(b, 1, 0.05, iters, depth, size, engine.MTU1024)
	}
	b.ReportMetric(float64(f.requests+f.responses+f.naks)/iters, "frames/READ")
	b.ReportMetric(float64(f.requests)/iters, "requests/READ")
	b.ReportMetric(float64(f.extra())/float64(max(f.lost, 1)), "extra/lost")
	b.ReportMetric(float64(f.timeouts), "timeouts")
	b.ReportMetric(float64(f.elapsedVirtual.Milliseconds()), "virtual-ms")
}

// frames is what each side sent and how often A's retransmission timer fired.
func (p *pair) frames() [3]uint64 {
	return [3]uint64{p.a.Stats().TxFrames, p.b.Stats().TxFrames, p.a.Stats().Timeouts}
}

// wantFrames asserts how many frames A and B sent and how often A's retransmission timer fired.
func (p *pair) wantFrames(a, b, timeouts uint64) {
	p.t.Helper()
	if got := p.frames(); got != [3]uint64{a, b, timeouts} {
		p.t.Fatalf("A sent %d frames, B %d, %d timeouts; want %d, %d, %d", got[0], got[1], got[2], a, b, timeouts)
	}
}

// reReadLost is a pair at MTU 1024 that loses B's second response to a READ and A's request
// for it again, with a 5000 B READ of B's buffer, filled from seed, posted.
func reReadLost(t *testing.T, seed byte) *pair {
	t.Helper()
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	p.fab.AddFault(sim.Fault{Name: "2nd response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseMiddle}, Nth: 1, Action: sim.FaultDrop})
	p.fab.AddFault(sim.Fault{Name: "the request again", Src: "A", Opcodes: []wire.Opcode{wire.RCReadRequest}, Nth: 2, Action: sim.FaultDrop})
	p.postRead5000(seed)
	return p
}

// The request for a READ's missing responses is lost too: the retransmission timer asks
// again, once, and the READ completes.
func TestReadReRequestLost(t *testing.T) {
	p := reReadLost(t, 3)
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: 5000})
	if !bytes.Equal(p.bufA[:5000], p.bufB[:5000]) {
		t.Fatal("READ data differs")
	}
	// A: the READ, the lost request from response 1, the same after the timeout; B: five
	// responses, then four from response 1.
	p.wantFrames(3, 9, 1)
}

// Every request for a READ's missing responses is lost: the timeouts, and only they, count
// against retry_cnt (3 here), which ends in RETRY_EXC_ERR; the responses still arriving after
// the gap are not progress.
func TestReadReRequestAlwaysLostExhaustsRetries(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024, RetryCnt: 3, Timeout: 8})
	p.fab.AddFault(sim.Fault{Name: "2nd response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseMiddle}, Nth: 1, Action: sim.FaultDrop})
	p.fab.AddFault(sim.Fault{Name: "every request again", Src: "A", Opcodes: []wire.Opcode{wire.RCReadRequest}, MatchPSN: true, PSN: 1, Action: sim.FaultDrop})
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 5000), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 8192, 8), RemoteAddr: p.mrB.Addr() + 8192, RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRetryExcErr, Opcode: engine.WCRDMARead}, engine.WC{WRID: 2, Status: engine.WCWRFlushErr, Opcode: engine.WCRDMAWrite})
	// A: the READ and the WRITE, the request from response 1 when response 2 came, and once
	// after each of three timeouts; the fourth ends it. B: five responses and the WRITE's ACK.
	p.wantFrames(6, 6, 4)
}

// An atomic's acknowledgement says that the READ before it was executed: a READ whose response
// was lost is asked for again at once, not after a timeout.
func TestAtomicAckPassesLostReadResponse(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	p.fab.AddFault(sim.Fault{Name: "READ response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseOnly}, Nth: 1, Action: sim.FaultDrop})
	fill(p.bufB[:64], 9)
	binary.LittleEndian.PutUint64(p.bufB[4096:], 40)
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRAtomicFetchAndAdd, Flags: engine.SendSignaled, SGL: sge(p.mrA, 128, 8), RemoteAddr: p.mrB.Addr() + 4096, RKey: p.mrB.RKey(), CompareAdd: 2}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: 64}, engine.WC{WRID: 2, Opcode: engine.WCFetchAdd, ByteLen: 8})
	if !bytes.Equal(p.bufA[:64], p.bufB[:64]) || le64(p.bufA[128:]) != 40 || le64(p.bufB[4096:]) != 42 {
		t.Fatalf("READ data equal %v, atomic result %d (want 40), target %d (want 42)", bytes.Equal(p.bufA[:64], p.bufB[:64]), le64(p.bufA[128:]), le64(p.bufB[4096:]))
	}
	p.wantFrames(3, 3, 0)
}

// An atomic's acknowledgement is lost, and so is the request for it again that the next ACK
// prompts: the timeout sends it once more, with the same PSN, and the responder replays the
// saved result (T4): memory changes once and the result is the original value.
func TestT4AtomicAckAndItsReRequestLost(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	p.fab.AddFault(sim.Fault{Name: "atomic ack", Src: "B", Opcodes: []wire.Opcode{wire.RCAtomicAcknowledge}, Nth: 1, Action: sim.FaultDrop})
	p.fab.AddFault(sim.Fault{Name: "the atomic again", Src: "A", Opcodes: []wire.Opcode{wire.RCFetchAdd}, Nth: 2, Action: sim.FaultDrop})
	binary.LittleEndian.PutUint64(p.bufB[4096:], 7)
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRAtomicFetchAndAdd, Flags: engine.SendSignaled, SGL: sge(p.mrA, 128, 8), RemoteAddr: p.mrB.Addr() + 4096, RKey: p.mrB.RKey(), CompareAdd: 3},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 256, 8), RemoteAddr: p.mrB.Addr() + 8192, RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCFetchAdd, ByteLen: 8}, engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite, ByteLen: 8})
	if le64(p.bufA[128:]) != 7 || le64(p.bufB[4096:]) != 10 || len(p.eventsLike(engine.EvRecv, "saved result replayed")) != 1 {
		t.Fatalf("result %d (want 7), target %d (want 10), %d replays (want 1)", le64(p.bufA[128:]), le64(p.bufB[4096:]), len(p.eventsLike(engine.EvRecv, "saved result replayed")))
	}
	// A: the atomic, the WRITE, the atomic again (lost), the atomic after the timeout; B: the
	// lost acknowledgement, the WRITE's ACK, the replay.
	p.wantFrames(4, 3, 1)
}

// A WRITE, a 64-response READ, an atomic and a SEND whose PSNs wrap from 0xFFFFFF to 0 in the
// middle of the READ. The response at 0xFFFFFF is lost (the one at 0 shows the gap) and so is
// the atomic's acknowledgement (the SEND's ACK passes it): both are asked for again at once,
// across the wrap, and everything completes without a timeout.
func TestReadAcrossPSNWrap(t *testing.T) {
	const n = 64 << 10
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024, PSNA: 0xFFFFF0})
	p.fab.AddFault(sim.Fault{Name: "response 0xFFFFFF", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseMiddle}, MatchPSN: true, PSN: 0xFFFFFF, Nth: 1, Action: sim.FaultDrop})
	p.fab.AddFault(sim.Fault{Name: "atomic ack", Src: "B", Opcodes: []wire.Opcode{wire.RCAtomicAcknowledge}, Nth: 1, Action: sim.FaultDrop})
	fill(p.bufB[:n], 1)
	fill(p.bufA[2*n:2*n+4096], 2)
	binary.LittleEndian.PutUint64(p.bufB[3*n:], 100)
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(p.mrB, 4*n, 64)}))
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 2*n, 2048), RemoteAddr: p.mrB.Addr() + 2*n, RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		engine.SendWR{ID: 3, Opcode: engine.WRAtomicFetchAndAdd, Flags: engine.SendSignaled, SGL: sge(p.mrA, 3*n, 8), RemoteAddr: p.mrB.Addr() + 3*n, RKey: p.mrB.RKey(), CompareAdd: 1},
		engine.SendWR{ID: 4, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 2*n, 64)}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, ByteLen: 2048}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead, ByteLen: n},
		engine.WC{WRID: 3, Opcode: engine.WCFetchAdd, ByteLen: 8}, engine.WC{WRID: 4, Opcode: engine.WCSend, ByteLen: 64})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 9, Opcode: engine.WCRecv, ByteLen: 64})
	if !bytes.Equal(p.bufA[:n], p.bufB[:n]) || !bytes.Equal(p.bufA[2*n:2*n+2048], p.bufB[2*n:2*n+2048]) ||
		le64(p.bufA[3*n:]) != 100 || le64(p.bufB[3*n:]) != 101 {
		t.Fatal("memory differs from what the requests should have left")
	}
	// A: two WRITE packets, the READ, the atomic, the SEND, then the READ from 0xFFFFFF (its
	// 14th response) and the atomic again. B: the WRITE's ACK, 64 responses, the lost
	// acknowledgement, the SEND's ACK, the 51 responses from 0xFFFFFF and the replay.
	p.wantFrames(7, 119, 0)
	if sent, acked := p.qa.RequesterPSNs(); sent != 0x34 || acked != 0x34 {
		t.Fatalf("sent up to %#x, acknowledged up to %#x; want 0x34 both", sent, acked)
	}
}

// A fenced WRITE after a READ whose response is lost waits until the READ has completed; the
// READ, with nothing after it on the wire to show the loss, is asked for again at the timeout.
func TestFencedWriteWaitsForRecoveredRead(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	p.fab.AddFault(sim.Fault{Name: "READ response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseOnly}, Nth: 1, Action: sim.FaultDrop})
	fill(p.bufB[:64], 5)
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		// The fenced WRITE sends what the READ brought in.
		engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled | engine.SendFence, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr() + 8192, RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: 64}, engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite, ByteLen: 64})
	if !bytes.Equal(p.bufB[8192:8192+64], p.bufB[:64]) {
		t.Fatal("the fenced WRITE did not carry what the READ read")
	}
	p.wantFrames(3, 3, 1)
}

// A READ's response is lost and the SEND after it is RNR NAKed, which shows the loss: the READ
// is asked for again and its response arrives while the requester waits out a long RNR timer.
// That response must not start the local ACK timer for the SEND, which the responder has
// answered (with the RNR NAK): waiting out 655 ms must not run into retry_cnt's timeouts.
func TestReadRecoveredDuringRNRWait(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 0, NoDefaults: true,
		MaxRdAtomic: 4, Access: engine.AccessRemoteWrite | engine.AccessRemoteRead | engine.AccessRemoteAtomic})
	p.fab.AddFault(sim.Fault{Name: "READ response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseOnly}, Nth: 1, Action: sim.FaultDrop})
	fill(p.bufB[:64], 6)
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 4096, 32)}))
	p.sim.RunFor(10 * time.Millisecond)
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(p.mrB, 8192, 64)}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: 64}, engine.WC{WRID: 2, Opcode: engine.WCSend, ByteLen: 32})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 9, Opcode: engine.WCRecv, ByteLen: 32})
	// A: the READ, the SEND, the READ again, the SEND after the RNR wait; B: the lost
	// response, the RNR NAK, the response, the ACK. No timeout.
	p.wantFrames(4, 4, 0)
}

// The request for a READ's missing responses is lost; a WRITE posted after it is acknowledged
// while the gap is still open. On a path that keeps order, the responder got the request before
// the WRITE and would have answered it first, so the READ is asked for again at once instead of
// at the local ACK timeout.
func TestReadReRequestLostShownByLaterAck(t *testing.T) {
	p := reReadLost(t, 4)
	p.sim.RunFor(100 * time.Microsecond) // the responses are in, the gap asked for, the request lost
	if got := p.frames(); got != [3]uint64{2, 5, 0} || poll(p.cqA) != nil {
		t.Fatalf("A sent %d frames, B %d, %d timeouts before the WRITE; want 2, 5, 0 and no completion", got[0], got[1], got[2])
	}
	must(t, p.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 8192, 8), RemoteAddr: p.mrB.Addr() + 8192, RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: 5000}, engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite, ByteLen: 8})
	if !bytes.Equal(p.bufA[:5000], p.bufB[:5000]) {
		t.Fatal("READ data differs")
	}
	// A: the READ, the lost request, the WRITE, the request again; B: five responses, the
	// WRITE's ACK, four responses from 1.
	if got := p.frames(); got != [3]uint64{4, 10, 0} || len(p.eventsLike(engine.EvRetry, "has been answered, it has not")) != 1 {
		t.Fatalf("A sent %d frames, B %d, %d timeouts, %d early requests; want 4, 10, 0, 1", got[0], got[1], got[2],
			len(p.eventsLike(engine.EvRetry, "has been answered, it has not")))
	}
}

// Two READs each lose a response; the request asking for the first one's is lost too. The
// first response to the second one's request, sent later, shows that loss: the first READ is
// asked for again at once.
func TestReadReRequestLostShownByLaterReRequest(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	p.fab.AddFault(sim.Fault{Name: "READ 1 response 1", Src: "B", MatchPSN: true, PSN: 1, Nth: 1, Action: sim.FaultDrop})
	p.fab.AddFault(sim.Fault{Name: "READ 2 response 1", Src: "B", MatchPSN: true, PSN: 6, Nth: 1, Action: sim.FaultDrop})
	p.fab.AddFault(sim.Fault{Name: "READ 1 asked again", Src: "A", Opcodes: []wire.Opcode{wire.RCReadRequest}, Nth: 3, Action: sim.FaultDrop})
	fill(p.bufB[:10000], 4)
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 5000), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 5000, 5000), RemoteAddr: p.mrB.Addr() + 5000, RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: 5000}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead, ByteLen: 5000})
	if !bytes.Equal(p.bufA[:10000], p.bufB[:10000]) {
		t.Fatal("READ data differs")
	}
	// A: two READs, READ 1 from 1 (lost), READ 2 from 6, READ 1 from 1 again; B: ten
	// responses, four from 6, four from 1.
	p.wantFrames(5, 18, 0)
}
