package engine_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire"
)

func TestRCBasicOperations(t *testing.T) {
	p := plainPair(t)
	fill(p.bufA[:8192], 1)

	// SEND of 64 B and of 5000 B (five packets at MTU 1024).
	for i, n := range []uint32{64, 5000} {
		if err := p.qb.PostRecv(engine.RecvWR{ID: uint64(100 + i), SGL: sge(p.mrB, uint64(i)*8192, 8192)}); err != nil {
			t.Fatal(err)
		}
		if err := p.qa.PostSend(engine.SendWR{ID: uint64(i + 1), Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n)}); err != nil {
			t.Fatal(err)
		}
	}
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCSend})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 100, Opcode: engine.WCRecv, ByteLen: 64}, engine.WC{WRID: 101, Opcode: engine.WCRecv, ByteLen: 5000})
	if !bytes.Equal(p.bufB[:64], p.bufA[:64]) || !bytes.Equal(p.bufB[8192:8192+5000], p.bufA[:5000]) {
		t.Fatal("SEND data differs")
	}

	// WRITE 10000 B, then READ it back into another place.
	fill(p.bufA[16384:26384], 9)
	must(t, p.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 16384, 10000),
		RemoteAddr: p.mrB.Addr() + 100000, RKey: p.mrB.RKey()}))
	must(t, p.qa.PostSend(engine.SendWR{ID: 4, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 65536, 10000),
		RemoteAddr: p.mrB.Addr() + 100000, RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 4, Opcode: engine.WCRDMARead, ByteLen: 10000})
	if !bytes.Equal(p.bufB[100000:110000], p.bufA[16384:26384]) || !bytes.Equal(p.bufA[65536:75536], p.bufA[16384:26384]) {
		t.Fatal("WRITE/READ data differs")
	}

	// Atomics on a little-endian word.
	binary.LittleEndian.PutUint64(p.bufB[200000:], 40)
	must(t, p.qa.PostSend(engine.SendWR{ID: 5, Opcode: engine.WRAtomicFetchAndAdd, Flags: engine.SendSignaled, SGL: sge(p.mrA, 300000, 8),
		RemoteAddr: p.mrB.Addr() + 200000, RKey: p.mrB.RKey(), CompareAdd: 2}))
	must(t, p.qa.PostSend(engine.SendWR{ID: 6, Opcode: engine.WRAtomicCmpAndSwp, Flags: engine.SendSignaled, SGL: sge(p.mrA, 300008, 8),
		RemoteAddr: p.mrB.Addr() + 200000, RKey: p.mrB.RKey(), CompareAdd: 42, Swap: 7}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 5, Opcode: engine.WCFetchAdd}, engine.WC{WRID: 6, Opcode: engine.WCCompSwap})
	if got := le64(p.bufB[200000:]); got != 7 {
		t.Fatalf("target word %d, want 7", got)
	}
	if a, b := le64(p.bufA[300000:]), le64(p.bufA[300008:]); a != 40 || b != 42 {
		t.Fatalf("atomic results %d %d, want 40 42", a, b)
	}

	// WRITE_WITH_IMM and SEND_WITH_IMM consume receives and carry the immediate.
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 200, SGL: sge(p.mrB, 0, 64)}, engine.RecvWR{ID: 201, SGL: sge(p.mrB, 64, 64)}))
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 7, Opcode: engine.WRRDMAWriteWithImm, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 3000), RemoteAddr: p.mrB.Addr() + 400000, RKey: p.mrB.RKey(), Imm: 0xabcd},
		engine.SendWR{ID: 8, Opcode: engine.WRSendWithImm, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 16), Imm: 0x1234}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 7, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 8, Opcode: engine.WCSend})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 200, Opcode: engine.WCRecvRDMAWithImm, ByteLen: 3000, Flags: engine.WCWithImm, Imm: 0xabcd},
		engine.WC{WRID: 201, Opcode: engine.WCRecv, ByteLen: 16, Flags: engine.WCWithImm, Imm: 0x1234})
	if p.a.Stats().Retransmits != 0 || p.b.Stats().RxDropped != 0 {
		t.Fatalf("clean link but stats %+v %+v", p.a.Stats(), p.b.Stats())
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The scenario catalogue: situations RDMA developers meet and cannot easily produce on real
// hardware, each driven deterministically on the simulator and checked by completion status and
// by the events the engine recorded.

func TestScenarioGhostACK(t *testing.T) {
	p := plainPair(t)
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 1, SGL: sge(p.mrB, 0, 64)}))
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8)}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend})
	// B "acknowledges" PSN 500, which A never sent.
	h := wire.Header{Opcode: wire.RCAcknowledge, DestQP: p.qa.Num(), PSN: 500, Syndrome: wire.ACKUnlimited}
	frame, err := p.qb.Builder().Build(make([]byte, 256), &h, nil)
	must(t, err)
	p.a.Receive(frame)
	if len(p.eventsLike(engine.EvDrop, "ghost ACK for psn 500")) != 1 || p.qa.State() != engine.QPSRTS {
		t.Fatalf("ghost ACK not dropped and recorded; QP %s", p.qa.State())
	}
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 2, SGL: sge(p.mrB, 0, 64)}))
	must(t, p.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8)}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 2, Opcode: engine.WCSend})
}

// readThroughFault runs a 5000 B READ by A of B's buffer, filled from seed, five responses at
// MTU 1024, with f on the fabric; it checks the READ's completion and the data it brought and
// returns the pair and the fault for what f itself is to have done.
func readThroughFault(t *testing.T, f sim.Fault, seed byte) (*pair, *sim.Fault) {
	t.Helper()
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	ft := p.fab.AddFault(f)
	p.postRead5000(seed)
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMARead, ByteLen: 5000})
	if !bytes.Equal(p.bufA[:5000], p.bufB[:5000]) {
		t.Fatal("READ data differs")
	}
	return p, ft
}

func TestScenarioDuplicateReadRequest(t *testing.T) {
	p, ft := readThroughFault(t, sim.Fault{Name: "dup READ", Src: "A", Opcodes: []wire.Opcode{wire.RCReadRequest}, Nth: 1, Action: sim.FaultDuplicate}, 4)
	// B answers the copy again; A has finished by the time the second set arrives and drops
	// all five.
	if ft.Fired() != 1 || len(p.eventsLike(engine.EvRecv, "duplicate READ")) != 1 || p.a.Stats().RxDropped != 5 {
		t.Fatalf("fired %d, re-executions %d, responses dropped %d (want 1, 1, 5)",
			ft.Fired(), len(p.eventsLike(engine.EvRecv, "duplicate READ")), p.a.Stats().RxDropped)
	}
}

func TestScenarioLostReadResponse(t *testing.T) {
	p, ft := readThroughFault(t, sim.Fault{Name: "lose 2nd response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseMiddle}, Nth: 1, Action: sim.FaultDrop}, 8)
	if ft.Fired() != 1 || len(p.eventsLike(engine.EvRetry, "expected: resend from")) != 1 {
		t.Fatalf("fault fired %d; resends %d", ft.Fired(), len(p.eventsLike(engine.EvRetry, "expected: resend from")))
	}
}

func TestScenarioRetryExceeded(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{Timeout: 10, RetryCnt: 3})
	p.fab.LinkDown(p.b, time.Hour)
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 8)}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRetryExcErr, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Status: engine.WCWRFlushErr, Opcode: engine.WCSend})
	if n := len(p.eventsLike(engine.EvRetry, "local ACK timeout")); n != 4 {
		t.Fatalf("%d timeout events, want 3 retries and the last", n)
	}
	if p.sim.Now() > time.Second {
		t.Fatalf("virtual time %v", p.sim.Now())
	}
}

func TestScenarioRNRRetryExceeded(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{RNRRetry: 3, MinRNRTimer: 14})
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 64)}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRNRRetryExcErr, Opcode: engine.WCSend})
	if n := len(p.eventsLike(engine.EvNAK, "RNR NAK (timer 14)")); n != 4 {
		t.Fatalf("%d RNR NAKs sent, want 4 (the first and 3 retries)", n)
	}
	// 3 waits of 1.28 ms each.
	if now := p.sim.Now(); now < 3*1280*time.Microsecond || now > 4*time.Millisecond {
		t.Fatalf("gave up at %v", now)
	}
}

func TestScenarioRkeyInvalidatedMidRead(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	rkey := p.windowOnB(9, 16384, engine.AccessRemoteRead).RKey()
	ft := p.fab.AddFault(sim.Fault{Name: "lose response 3", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseMiddle}, Nth: 2, Action: sim.FaultDrop})
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8192), RemoteAddr: p.mrB.Addr(), RKey: rkey}))
	p.sim.RunUntil(func() bool { return ft.Fired() == 1 })
	// The READ has been answered but one response is lost; the window goes before A asks again.
	must(t, p.qb.PostSend(engine.SendWR{ID: 10, Opcode: engine.WRLocalInv, Flags: engine.SendSignaled, Imm: rkey}))
	p.run()
	wantWC(t, poll(p.cqB), engine.WC{WRID: 10, Opcode: engine.WCLocalInv})
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemAccessErr, Opcode: engine.WCRDMARead})
	if len(p.eventsLike(engine.EvAccess, "revoked by LOCAL_INV")) != 1 || len(p.eventsLike(engine.EvRecv, "duplicate READ")) != 1 {
		t.Fatal("the refusal of the resent READ does not say the rkey was invalidated by LOCAL_INV")
	}
}

func TestScenarioLocalInvRacingWrite(t *testing.T) {
	// A 1 Gb/s link spaces the WRITE's packets about 8 us apart, so B can invalidate the window
	// between them.
	p := newPair(t, 1, sim.LinkConfig{Rate: 1e9}, engine.ConnectOptions{MTU: engine.MTU1024})
	rkey := p.windowOnB(9, 16384, engine.AccessRemoteWrite).RKey()
	fill(p.bufA[:8192], 3)
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8192), RemoteAddr: p.mrB.Addr(), RKey: rkey}))
	// Run until the first 2 KiB have landed.
	p.sim.RunUntil(func() bool { return bytes.Equal(p.bufB[1024:2048], p.bufA[1024:2048]) })
	must(t, p.qb.PostSend(engine.SendWR{ID: 10, Opcode: engine.WRLocalInv, Flags: engine.SendSignaled, Imm: rkey}))
	p.run()
	wantWC(t, poll(p.cqB), engine.WC{WRID: 10, Opcode: engine.WCLocalInv})
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRemAccessErr, Opcode: engine.WCRDMAWrite})
	if !bytes.Equal(p.bufB[:2048], p.bufA[:2048]) || !bytes.Equal(p.bufB[4096:8192], make([]byte, 4096)) {
		t.Fatal("the bytes before the invalidation should have landed, none after it")
	}
	inv := p.eventsLike(engine.EvKey, "LOCAL_INV invalidated")
	if len(inv) != 1 {
		t.Fatalf("%d invalidations recorded", len(inv))
	}
	why := fmt.Sprintf("(key %s was revoked by LOCAL_INV on QP 0x%06x at t=%v)", keys.Key(rkey), p.qb.Num(), inv[0].T)
	if len(p.eventsLike(engine.EvAccess, why)) != 1 {
		t.Fatalf("no recorded reason says %q", why)
	}
}

func TestScenarioPeerStops(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{Rate: 1e9}, engine.ConnectOptions{MTU: engine.MTU1024, Timeout: 12, RetryCnt: 2})
	fill(p.bufA[:65536], 1)
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 65536), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	p.sim.RunUntil(func() bool { return p.bufB[10000] != 0 })
	p.b.Stop()
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCRetryExcErr, Opcode: engine.WCRDMAWrite})
	if len(p.eventsLike(engine.EvFault, "device stopped")) != 1 || len(p.eventsLike(engine.EvRetry, "retries exhausted")) != 1 {
		t.Fatal("the stop and the exhausted retries were not recorded")
	}
}
