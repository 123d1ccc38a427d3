package emu

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire"
)

// The scenario catalogue: situations RDMA developers meet and cannot easily produce on real
// hardware, each driven deterministically on the simulator and checked by completion status and
// by the events the engine recorded.

func TestScenarioGhostACK(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{})
	must(t, p.qb.PostRecv(RecvWR{ID: 1, SGL: sge(p.mrB, 0, 64)}))
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: sge(p.mrA, 0, 8)}))
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 1, Opcode: WCSend})
	// B "acknowledges" PSN 500, which A never sent.
	h := wire.Header{Opcode: wire.RCAcknowledge, DestQP: p.qa.Num(), PSN: 500, Syndrome: wire.ACKUnlimited}
	frame, err := p.qb.builder.Build(make([]byte, 256), &h, nil)
	must(t, err)
	p.a.Receive(frame)
	if len(p.eventsLike(EvDrop, "ghost ACK for psn 500")) != 1 || p.qa.State() != QPSRTS {
		t.Fatalf("ghost ACK not dropped and recorded; QP %s", p.qa.State())
	}
	must(t, p.qb.PostRecv(RecvWR{ID: 2, SGL: sge(p.mrB, 0, 64)}))
	must(t, p.qa.PostSend(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: sge(p.mrA, 0, 8)}))
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 2, Opcode: WCSend})
}

func TestScenarioDuplicateReadRequest(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{MTU: MTU1024})
	ft := p.fab.AddFault(Fault{Name: "dup READ", Src: "A", Opcodes: []wire.Opcode{wire.RCReadRequest}, Nth: 1, Action: FaultDuplicate})
	fill(p.bufB[:5000], 4)
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: sge(p.mrA, 0, 5000), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 1, Opcode: WCRDMARead, ByteLen: 5000})
	// B answers the copy again; A has finished by the time the second set arrives and drops
	// all five.
	if ft.Fired() != 1 || len(p.eventsLike(EvRecv, "duplicate READ")) != 1 || p.a.Stats().RxDropped != 5 {
		t.Fatalf("fired %d, re-executions %d, responses dropped %d (want 1, 1, 5)",
			ft.Fired(), len(p.eventsLike(EvRecv, "duplicate READ")), p.a.Stats().RxDropped)
	}
	if !bytes.Equal(p.bufA[:5000], p.bufB[:5000]) {
		t.Fatal("READ data differs")
	}
}

func TestScenarioLostReadResponse(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{MTU: MTU1024})
	ft := p.fab.AddFault(Fault{Name: "lose 2nd response", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseMiddle}, Nth: 1, Action: FaultDrop})
	fill(p.bufB[:5000], 8)
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: sge(p.mrA, 0, 5000), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 1, Opcode: WCRDMARead, ByteLen: 5000})
	if ft.Fired() != 1 || len(p.eventsLike(EvRetry, "expected: resend from")) != 1 {
		t.Fatalf("fault fired %d; resends %d", ft.Fired(), len(p.eventsLike(EvRetry, "expected: resend from")))
	}
	if !bytes.Equal(p.bufA[:5000], p.bufB[:5000]) {
		t.Fatal("READ data differs")
	}
}

func TestScenarioRetryExceeded(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{Timeout: 10, RetryCnt: 3})
	p.fab.LinkDown(p.b, time.Hour)
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMAWrite, SGL: sge(p.mrA, 0, 64), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		SendWR{ID: 2, Opcode: WRSend, SGL: sge(p.mrA, 0, 8)}))
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 1, Status: WCRetryExcErr, Opcode: WCRDMAWrite}, WC{WRID: 2, Status: WCWRFlushErr, Opcode: WCSend})
	if n := len(p.eventsLike(EvRetry, "local ACK timeout")); n != 4 {
		t.Fatalf("%d timeout events, want 3 retries and the last", n)
	}
	if p.sim.Now() > time.Second {
		t.Fatalf("virtual time %v", p.sim.Now())
	}
}

func TestScenarioRNRRetryExceeded(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{RNRRetry: 3, MinRNRTimer: 14})
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, SGL: sge(p.mrA, 0, 64)}))
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 1, Status: WCRNRRetryExcErr, Opcode: WCSend})
	if n := len(p.eventsLike(EvNAK, "RNR NAK (timer 14)")); n != 4 {
		t.Fatalf("%d RNR NAKs sent, want 4 (the first and 3 retries)", n)
	}
	// 3 waits of 1.28 ms each.
	if now := p.sim.Now(); now < 3*1280*time.Microsecond || now > 4*time.Millisecond {
		t.Fatalf("gave up at %v", now)
	}
}

func TestScenarioRkeyInvalidatedMidRead(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{MTU: MTU1024})
	mw, err := p.pdB.AllocMW(MWType2)
	must(t, err)
	must(t, p.qb.PostSend(SendWR{ID: 9, Opcode: WRBindMW, Bind: BindInfo{MW: mw, RKey: uint32(keys.Key(mw.RKey()).Inc()), MR: p.mrB,
		Addr: p.mrB.Addr(), Length: 16384, Access: AccessRemoteRead}}))
	p.run()
	rkey := mw.RKey()
	ft := p.fab.AddFault(Fault{Name: "lose response 3", Src: "B", Opcodes: []wire.Opcode{wire.RCReadResponseMiddle}, Nth: 2, Action: FaultDrop})
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: sge(p.mrA, 0, 8192), RemoteAddr: p.mrB.Addr(), RKey: rkey}))
	p.sim.RunUntil(func() bool { return ft.Fired() == 1 })
	// The READ has been answered but one response is lost; the window goes before A asks again.
	must(t, p.qb.PostSend(SendWR{ID: 10, Opcode: WRLocalInv, Flags: SendSignaled, Imm: rkey}))
	p.run()
	wantWC(t, poll(p.cqB), WC{WRID: 10, Opcode: WCLocalInv})
	wantWC(t, poll(p.cqA), WC{WRID: 1, Status: WCRemAccessErr, Opcode: WCRDMARead})
	if len(p.eventsLike(EvAccess, "revoked by LOCAL_INV")) != 1 || len(p.eventsLike(EvRecv, "duplicate READ")) != 1 {
		t.Fatal("the refusal of the resent READ does not say the rkey was invalidated by LOCAL_INV")
	}
}

func TestScenarioLocalInvRacingWrite(t *testing.T) {
	// A 1 Gb/s link spaces the WRITE's packets about 8 us apart, so B can invalidate the window
	// between them.
	p := newPair(t, 1, LinkConfig{Rate: 1e9}, ConnectOptions{MTU: MTU1024})
	mw, err := p.pdB.AllocMW(MWType2)
	must(t, err)
	must(t, p.qb.PostSend(SendWR{ID: 9, Opcode: WRBindMW, Bind: BindInfo{MW: mw, RKey: uint32(keys.Key(mw.RKey()).Inc()), MR: p.mrB,
		Addr: p.mrB.Addr(), Length: 16384, Access: AccessRemoteWrite}}))
	p.run()
	rkey := mw.RKey()
	fill(p.bufA[:8192], 3)
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: sge(p.mrA, 0, 8192), RemoteAddr: p.mrB.Addr(), RKey: rkey}))
	// Run until the first 2 KiB have landed.
	p.sim.RunUntil(func() bool { return bytes.Equal(p.bufB[1024:2048], p.bufA[1024:2048]) })
	must(t, p.qb.PostSend(SendWR{ID: 10, Opcode: WRLocalInv, Flags: SendSignaled, Imm: rkey}))
	p.run()
	wantWC(t, poll(p.cqB), WC{WRID: 10, Opcode: WCLocalInv})
	wantWC(t, poll(p.cqA), WC{WRID: 1, Status: WCRemAccessErr, Opcode: WCRDMAWrite})
	if !bytes.Equal(p.bufB[:2048], p.bufA[:2048]) || !bytes.Equal(p.bufB[4096:8192], make([]byte, 4096)) {
		t.Fatal("the bytes before the invalidation should have landed, none after it")
	}
	inv := p.eventsLike(EvKey, "LOCAL_INV invalidated")
	if len(inv) != 1 {
		t.Fatalf("%d invalidations recorded", len(inv))
	}
	why := fmt.Sprintf("(key %s was revoked by LOCAL_INV on QP 0x%06x at t=%v)", keys.Key(rkey), p.qb.Num(), inv[0].T)
	if len(p.eventsLike(EvAccess, why)) != 1 {
		t.Fatalf("no recorded reason says %q", why)
	}
}

func TestScenarioPeerStops(t *testing.T) {
	p := newPair(t, 1, LinkConfig{Rate: 1e9}, ConnectOptions{MTU: MTU1024, Timeout: 12, RetryCnt: 2})
	fill(p.bufA[:65536], 1)
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: sge(p.mrA, 0, 65536), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	p.sim.RunUntil(func() bool { return p.bufB[10000] != 0 })
	p.b.Stop()
	p.run()
	wantWC(t, poll(p.cqA), WC{WRID: 1, Status: WCRetryExcErr, Opcode: WCRDMAWrite})
	if len(p.eventsLike(EvFault, "device stopped")) != 1 || len(p.eventsLike(EvRetry, "retries exhausted")) != 1 {
		t.Fatal("the stop and the exhausted retries were not recorded")
	}
}
