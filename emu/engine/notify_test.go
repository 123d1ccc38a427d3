package engine_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// fired takes the CQ's pending event, if there is one, without waiting.
func fired(cq *engine.CQ) bool {
	select {
	case <-cq.Events():
		return true
	default:
		return false
	}
}

// wantFired asserts whether an event is waiting on cq.
func wantFired(t *testing.T, cq *engine.CQ, want bool, what string) {
	t.Helper()
	if got := fired(cq); got != want {
		t.Fatalf("%s: event fired %v, want %v", what, got, want)
	}
}

// TestCQNotifyNextCompletion: armed for the next completion, a CQ fires once for the first
// completion queued after arming, not for those already in it, and not again until re-armed.
func TestCQNotifyNextCompletion(t *testing.T) {
	p := plainPair(t)
	for i := uint64(1); i <= 4; i++ {
		must(t, p.qb.PostRecv(engine.RecvWR{ID: i, SGL: sge(p.mrB, 64*i, 64)}))
	}
	send := func(id uint64) {
		t.Helper()
		must(t, p.qa.PostSend(engine.SendWR{ID: id, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 16)}))
		p.run()
	}

	// Not armed: completions, no event.
	send(1)
	wantFired(t, p.cqB, false, "unarmed CQ")

	// Armed with a completion already waiting: that one fires nothing.
	if p.cqB.Len() != 1 {
		t.Fatalf("receive CQ holds %d completions, want 1", p.cqB.Len())
	}
	must(t, p.cqB.ReqNotify(false))
	p.run()
	wantFired(t, p.cqB, false, "armed over a waiting completion")

	// The next completion fires once...
	send(2)
	wantFired(t, p.cqB, true, "first completion after arming")
	wantFired(t, p.cqB, false, "the same arm, taken twice")
	// ...and the one after it fires nothing: the arm is spent.
	send(3)
	wantFired(t, p.cqB, false, "second completion after one arm")

	// Re-armed, the next completion fires again.
	must(t, p.cqB.ReqNotify(false))
	send(4)
	wantFired(t, p.cqB, true, "completion after re-arming")
	wantWC(t, poll(p.cqB), engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 16}, engine.WC{WRID: 2, Opcode: engine.WCRecv, ByteLen: 16},
		engine.WC{WRID: 3, Opcode: engine.WCRecv, ByteLen: 16}, engine.WC{WRID: 4, Opcode: engine.WCRecv, ByteLen: 16})

	// A send completion fires a CQ armed for the next completion too.
	must(t, p.cqA.ReqNotify(false))
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCSend}, engine.WC{WRID: 3, Opcode: engine.WCSend}, engine.WC{WRID: 4, Opcode: engine.WCSend})
	wantFired(t, p.cqA, false, "send CQ armed after polling")
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 5, SGL: sge(p.mrB, 0, 64)}))
	send(5)
	wantFired(t, p.cqA, true, "send completion after arming")
}

// TestCQNotifySolicitedOnly: armed for solicited completions, a CQ fires for the receive of a
// message whose last packet had the SE bit (SEND, SEND_WITH_IMM, multi-packet SEND, RDMA
// WRITE_WITH_IMM) and for nothing else: not a SEND or WRITE_WITH_IMM without it, not a successful
// send completion. Arming for the next completion over a solicited arm widens it.
func TestCQNotifySolicitedOnly(t *testing.T) {
	p := newPair(t, 2, sim.LinkConfig{}, engine.ConnectOptions{})
	for i := uint64(1); i <= 16; i++ {
		must(t, p.qb.PostRecv(engine.RecvWR{ID: i, SGL: sge(p.mrB, 8192*i, 8192)}))
	}
	post := func(wr engine.SendWR) {
		t.Helper()
		if wr.Opcode == engine.WRRDMAWriteWithImm || wr.Opcode == engine.WRRDMAWrite {
			wr.RemoteAddr, wr.RKey = p.mrB.Addr()+1<<20, p.mrB.RKey()
		}
		if wr.SGL == nil {
			wr.SGL = sge(p.mrA, 0, 32)
		}
		wr.Flags |= engine.SendSignaled
		must(t, p.qa.PostSend(wr))
		p.run()
	}
	must(t, p.cqB.ReqNotify(true))
	must(t, p.cqA.ReqNotify(true))

	post(engine.SendWR{ID: 1, Opcode: engine.WRSend})
	wantFired(t, p.cqB, false, "SEND without SE")
	post(engine.SendWR{ID: 2, Opcode: engine.WRSendWithImm, Imm: 7})
	wantFired(t, p.cqB, false, "SEND_WITH_IMM without SE")
	post(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWriteWithImm, Imm: 8})
	wantFired(t, p.cqB, false, "WRITE_WITH_IMM without SE")
	post(engine.SendWR{ID: 4, Opcode: engine.WRRDMAWrite, Flags: engine.SendSolicited})
	wantFired(t, p.cqB, false, "RDMA WRITE with SendSolicited (no receive completion)")

	post(engine.SendWR{ID: 5, Opcode: engine.WRSend, Flags: engine.SendSolicited})
	wantFired(t, p.cqB, true, "SEND with SE")
	// Spent: a second solicited SEND fires nothing until re-armed.
	post(engine.SendWR{ID: 6, Opcode: engine.WRSend, Flags: engine.SendSolicited})
	wantFired(t, p.cqB, false, "SEND with SE on a spent arm")

	must(t, p.cqB.ReqNotify(true))
	post(engine.SendWR{ID: 7, Opcode: engine.WRSendWithImm, Flags: engine.SendSolicited, Imm: 9})
	wantFired(t, p.cqB, true, "SEND_WITH_IMM with SE")

	must(t, p.cqB.ReqNotify(true))
	post(engine.SendWR{ID: 8, Opcode: engine.WRRDMAWriteWithImm, Flags: engine.SendSolicited, Imm: 10})
	wantFired(t, p.cqB, true, "WRITE_WITH_IMM with SE")

	must(t, p.cqB.ReqNotify(true))
	post(engine.SendWR{ID: 9, Opcode: engine.WRSend, Flags: engine.SendSolicited, SGL: sge(p.mrA, 0, 5000)}) // five packets at MTU 1024
	wantFired(t, p.cqB, true, "multi-packet SEND with SE")

	// A solicited arm widened to any completion fires for a SEND without SE.
	must(t, p.cqB.ReqNotify(true))
	must(t, p.cqB.ReqNotify(false))
	post(engine.SendWR{ID: 10, Opcode: engine.WRSend})
	wantFired(t, p.cqB, true, "SEND without SE, solicited arm widened to next")
	// An arm for any completion is not narrowed by a later solicited arm.
	must(t, p.cqB.ReqNotify(false))
	must(t, p.cqB.ReqNotify(true))
	post(engine.SendWR{ID: 11, Opcode: engine.WRSend})
	wantFired(t, p.cqB, true, "SEND without SE, next arm not narrowed")

	// The requester's own successful completions are never solicited.
	wantFired(t, p.cqA, false, "successful send completions on a solicited arm")

	// Receive WQEs 1 to 10, in order: the plain WRITE took none.
	wantWC(t, poll(p.cqB),
		engine.WC{WRID: 1, Opcode: engine.WCRecv, ByteLen: 32}, engine.WC{WRID: 2, Opcode: engine.WCRecv, Flags: engine.WCWithImm, Imm: 7},
		engine.WC{WRID: 3, Opcode: engine.WCRecvRDMAWithImm, Flags: engine.WCWithImm, Imm: 8},
		engine.WC{WRID: 4, Opcode: engine.WCRecv}, engine.WC{WRID: 5, Opcode: engine.WCRecv},
		engine.WC{WRID: 6, Opcode: engine.WCRecv, Flags: engine.WCWithImm, Imm: 9},
		engine.WC{WRID: 7, Opcode: engine.WCRecvRDMAWithImm, Flags: engine.WCWithImm, Imm: 10},
		engine.WC{WRID: 8, Opcode: engine.WCRecv, ByteLen: 5000}, engine.WC{WRID: 9, Opcode: engine.WCRecv}, engine.WC{WRID: 10, Opcode: engine.WCRecv})
}

// TestCQNotifySolicitedOnlyFiresOnError: an unsuccessful completion is solicited (IBTA): a
// receive failing with LOC_LEN_ERR fires a solicited arm though its SEND had no SE, and so do the
// flushed receives of a QP moved to ERR, once per arm.
func TestCQNotifySolicitedOnlyFiresOnError(t *testing.T) {
	p := newPair(t, 3, sim.LinkConfig{}, engine.ConnectOptions{})
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 1, SGL: sge(p.mrB, 0, 8)}))
	must(t, p.cqB.ReqNotify(true))
	must(t, p.cqA.ReqNotify(true))
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64)}))
	p.run()
	wantFired(t, p.cqB, true, "LOC_LEN_ERR receive")
	wantWC(t, poll(p.cqB), engine.WC{WRID: 1, Opcode: engine.WCRecv, Status: engine.WCLocLenErr})
	// The requester's REM_INV_REQ_ERR fires its own solicited arm too.
	wantFired(t, p.cqA, true, "REM_INV_REQ_ERR send completion")
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend, Status: engine.WCRemInvReqErr})

	q := newPair(t, 4, sim.LinkConfig{}, engine.ConnectOptions{})
	for i := uint64(1); i <= 3; i++ {
		must(t, q.qb.PostRecv(engine.RecvWR{ID: i, SGL: sge(q.mrB, 0, 64)}))
	}
	must(t, q.cqB.ReqNotify(true))
	toErr(t, q.qb)
	q.run()
	wantFired(t, q.cqB, true, "flushed receives")
	wantFired(t, q.cqB, false, "flushed receives, one arm")
	wantWC(t, poll(q.cqB), engine.WC{WRID: 1, Opcode: engine.WCRecv, Status: engine.WCWRFlushErr},
		engine.WC{WRID: 2, Opcode: engine.WCRecv, Status: engine.WCWRFlushErr}, engine.WC{WRID: 3, Opcode: engine.WCRecv, Status: engine.WCWRFlushErr})
}

// TestCQNotifySolicitedRequesterError: a send completion in error fires a solicited arm on the
// requester's CQ.
func TestCQNotifySolicitedRequesterError(t *testing.T) {
	p := newPair(t, 5, sim.LinkConfig{}, engine.ConnectOptions{})
	must(t, p.cqA.ReqNotify(true))
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64),
		RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey() ^ 0x80}))
	p.run()
	wantFired(t, p.cqA, true, "REM_ACCESS_ERR send completion")
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, Status: engine.WCRemAccessErr})
}

// seFrame is a captured request: its opcode and Solicited Event bit.
type seFrame struct {
	op wire.Opcode
	se bool
}

// solicitedTraffic posts one message of each kind that can carry SE, with and without it, and
// returns the request frames on the wire and the whole pcap.
func solicitedTraffic(t *testing.T, seed uint64) ([]seFrame, []byte) {
	p := newPair(t, seed, sim.LinkConfig{}, engine.ConnectOptions{})
	var pcap bytes.Buffer
	must(t, p.fab.CapturePcap(&pcap))
	for i := uint64(1); i <= 8; i++ {
		must(t, p.qb.PostRecv(engine.RecvWR{ID: i, SGL: sge(p.mrB, 8192*i, 8192)}))
	}
	remote := func(wr engine.SendWR) engine.SendWR {
		wr.RemoteAddr, wr.RKey = p.mrB.Addr()+1<<20, p.mrB.RKey()
		return wr
	}
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 16)},
		engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSolicited, SGL: sge(p.mrA, 0, 2500)},
		engine.SendWR{ID: 3, Opcode: engine.WRSendWithImm, Flags: engine.SendSolicited, SGL: sge(p.mrA, 0, 16)},
		remote(engine.SendWR{ID: 4, Opcode: engine.WRRDMAWriteWithImm, Flags: engine.SendSolicited, SGL: sge(p.mrA, 0, 2500)}),
		remote(engine.SendWR{ID: 5, Opcode: engine.WRRDMAWriteWithImm, SGL: sge(p.mrA, 0, 16)}),
		remote(engine.SendWR{ID: 6, Opcode: engine.WRRDMAWrite, Flags: engine.SendSolicited, SGL: sge(p.mrA, 0, 16)}),
		remote(engine.SendWR{ID: 7, Opcode: engine.WRRDMARead, Flags: engine.SendSolicited, SGL: sge(p.mrA, 0, 16)}),
		// An rkey nobody can invalidate: the responder refuses it, but the SE bit was sent.
		engine.SendWR{ID: 8, Opcode: engine.WRSendWithInv, Flags: engine.SendSolicited | engine.SendSignaled, Imm: p.mrB.RKey(), SGL: sge(p.mrA, 0, 16)},
	))
	p.run()
	var out []seFrame
	eachCapturedFrame(t, &pcap, func(f *wire.Frame, _ gopacket.CaptureInfo) {
		if !f.Info.Response {
			out = append(out, seFrame{f.Opcode, f.BTH.SE()})
		}
	})
	return out, pcap.Bytes()
}

// TestSolicitedEventBitOnWire: SendSolicited sets the BTH SE bit on the last packet of a SEND,
// SEND_WITH_IMM, SEND_WITH_INV or RDMA WRITE_WITH_IMM, and nowhere else: not on FIRST or MIDDLE
// packets, not on a plain WRITE or a READ request. The same seed gives the same pcap.
func TestSolicitedEventBitOnWire(t *testing.T) {
	got, pcap := solicitedTraffic(t, 6)
	want := []seFrame{
		{wire.RCSendOnly, false},
		{wire.RCSendFirst, false}, {wire.RCSendMiddle, false}, {wire.RCSendLast, true},
		{wire.RCSendOnlyImm, true},
		{wire.RCWriteFirst, false}, {wire.RCWriteMiddle, false}, {wire.RCWriteLastImm, true},
		{wire.RCWriteOnlyImm, false},
		{wire.RCWriteOnly, false},
		{wire.RCReadRequest, false},
		{wire.RCSendOnlyInv, true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d request frames %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("request frame %d: got %s SE=%v, want %s SE=%v", i, got[i].op, got[i].se, want[i].op, want[i].se)
		}
	}
	if _, again := solicitedTraffic(t, 6); !bytes.Equal(pcap, again) {
		t.Fatal("the same seed gave a different pcap")
	}
}

// TestCQNotifyCallbackSeesItsEvent: the call OnCompletion sets finds the event of the
// completion it follows already on Events, whichever goroutine carries the device's outbox out
// (any call into the engine may: here another goroutine keeps calling into A while the ACKs
// that complete A's WRITEs arrive). A device model that announces an event from that call, as
// hw's CQs in guest memory do, would otherwise take nothing, leave the event in the channel,
// and leave its guest's reader asleep on a disarmed CQ.
func TestCQNotifyCallbackSeesItsEvent(t *testing.T) {
	a, b := wallDevices()
	carry(t, a, b)
	pdA, err := a.AllocPD()
	must(t, err)
	pdB, err := b.AllocPD()
	must(t, err)
	cq, err := a.CreateCQ(16)
	must(t, err)
	other, err := a.CreateCQ(1)
	must(t, err)
	cqB, err := b.CreateCQ(16)
	must(t, err)
	caps := engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa, _ := connectedRC(t, rcEnd{pd: pdA, cq: cq, cap: caps}, rcEnd{pd: pdB, cq: cqB, cap: caps}, engine.ConnectOptions{})
	mrA, err := pdA.RegMR(make([]byte, 64), engine.AccessLocalWrite)
	must(t, err)
	mrB, err := pdB.RegMR(make([]byte, 64), engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(t, err)
	saw := make(chan bool, 1)
	cq.OnCompletion(func() { saw <- fired(cq) })
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				other.Len() // takes a lock of A's engine, then carries A's outbox out
			}
		}
	}()
	defer func() { close(stop); <-done }()
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	for i := range rounds {
		must(t, cq.ReqNotify(false))
		must(t, qa.PostSend(engine.SendWR{ID: uint64(i), Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled,
			SGL: sge(mrA, 0, 8), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}))
		select {
		case got := <-saw:
			if !got {
				t.Fatalf("round %d: the completion's call found no event waiting (left behind: %v)", i, fired(cq))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no call for the completion", i)
		}
		wantWC(t, poll(cq), engine.WC{WRID: uint64(i), Opcode: engine.WCRDMAWrite})
	}
}
