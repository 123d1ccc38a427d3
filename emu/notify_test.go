package emu

import (
	"bytes"
	"testing"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/wire"
)

// fired takes the CQ's pending event, if there is one, without waiting.
func fired(cq *CQ) bool {
	select {
	case <-cq.Events():
		return true
	default:
		return false
	}
}

// wantFired asserts whether an event is waiting on cq.
func wantFired(t *testing.T, cq *CQ, want bool, what string) {
	t.Helper()
	if got := fired(cq); got != want {
		t.Fatalf("%s: event fired %v, want %v", what, got, want)
	}
}

// TestCQNotifyNextCompletion: armed for the next completion, a CQ fires once for the first
// completion queued after arming, not for those already in it, and not again until re-armed.
func TestCQNotifyNextCompletion(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{})
	for i := uint64(1); i <= 4; i++ {
		must(t, p.qb.PostRecv(RecvWR{ID: i, SGL: sge(p.mrB, 64*i, 64)}))
	}
	send := func(id uint64) {
		t.Helper()
		must(t, p.qa.PostSend(SendWR{ID: id, Opcode: WRSend, Flags: SendSignaled, SGL: sge(p.mrA, 0, 16)}))
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
	wantWC(t, poll(p.cqB), WC{WRID: 1, Opcode: WCRecv, ByteLen: 16}, WC{WRID: 2, Opcode: WCRecv, ByteLen: 16},
		WC{WRID: 3, Opcode: WCRecv, ByteLen: 16}, WC{WRID: 4, Opcode: WCRecv, ByteLen: 16})

	// A send completion fires a CQ armed for the next completion too.
	must(t, p.cqA.ReqNotify(false))
	wantWC(t, poll(p.cqA), WC{WRID: 1, Opcode: WCSend}, WC{WRID: 2, Opcode: WCSend}, WC{WRID: 3, Opcode: WCSend}, WC{WRID: 4, Opcode: WCSend})
	wantFired(t, p.cqA, false, "send CQ armed after polling")
	must(t, p.qb.PostRecv(RecvWR{ID: 5, SGL: sge(p.mrB, 0, 64)}))
	send(5)
	wantFired(t, p.cqA, true, "send completion after arming")
}

// TestCQNotifySolicitedOnly: armed for solicited completions, a CQ fires for the receive of a
// message whose last packet had the SE bit (SEND, SEND_WITH_IMM, multi-packet SEND, RDMA
// WRITE_WITH_IMM) and for nothing else: not a SEND or WRITE_WITH_IMM without it, not a successful
// send completion. Arming for the next completion over a solicited arm widens it.
func TestCQNotifySolicitedOnly(t *testing.T) {
	p := newPair(t, 2, LinkConfig{}, ConnectOptions{})
	for i := uint64(1); i <= 16; i++ {
		must(t, p.qb.PostRecv(RecvWR{ID: i, SGL: sge(p.mrB, 8192*i, 8192)}))
	}
	post := func(wr SendWR) {
		t.Helper()
		if wr.Opcode == WRRDMAWriteWithImm || wr.Opcode == WRRDMAWrite {
			wr.RemoteAddr, wr.RKey = p.mrB.Addr()+1<<20, p.mrB.RKey()
		}
		if wr.SGL == nil {
			wr.SGL = sge(p.mrA, 0, 32)
		}
		wr.Flags |= SendSignaled
		must(t, p.qa.PostSend(wr))
		p.run()
	}
	must(t, p.cqB.ReqNotify(true))
	must(t, p.cqA.ReqNotify(true))

	post(SendWR{ID: 1, Opcode: WRSend})
	wantFired(t, p.cqB, false, "SEND without SE")
	post(SendWR{ID: 2, Opcode: WRSendWithImm, Imm: 7})
	wantFired(t, p.cqB, false, "SEND_WITH_IMM without SE")
	post(SendWR{ID: 3, Opcode: WRRDMAWriteWithImm, Imm: 8})
	wantFired(t, p.cqB, false, "WRITE_WITH_IMM without SE")
	post(SendWR{ID: 4, Opcode: WRRDMAWrite, Flags: SendSolicited})
	wantFired(t, p.cqB, false, "RDMA WRITE with SendSolicited (no receive completion)")

	post(SendWR{ID: 5, Opcode: WRSend, Flags: SendSolicited})
	wantFired(t, p.cqB, true, "SEND with SE")
	// Spent: a second solicited SEND fires nothing until re-armed.
	post(SendWR{ID: 6, Opcode: WRSend, Flags: SendSolicited})
	wantFired(t, p.cqB, false, "SEND with SE on a spent arm")

	must(t, p.cqB.ReqNotify(true))
	post(SendWR{ID: 7, Opcode: WRSendWithImm, Flags: SendSolicited, Imm: 9})
	wantFired(t, p.cqB, true, "SEND_WITH_IMM with SE")

	must(t, p.cqB.ReqNotify(true))
	post(SendWR{ID: 8, Opcode: WRRDMAWriteWithImm, Flags: SendSolicited, Imm: 10})
	wantFired(t, p.cqB, true, "WRITE_WITH_IMM with SE")

	must(t, p.cqB.ReqNotify(true))
	post(SendWR{ID: 9, Opcode: WRSend, Flags: SendSolicited, SGL: sge(p.mrA, 0, 5000)}) // five packets at MTU 1024
	wantFired(t, p.cqB, true, "multi-packet SEND with SE")

	// A solicited arm widened to any completion fires for a SEND without SE.
	must(t, p.cqB.ReqNotify(true))
	must(t, p.cqB.ReqNotify(false))
	post(SendWR{ID: 10, Opcode: WRSend})
	wantFired(t, p.cqB, true, "SEND without SE, solicited arm widened to next")
	// An arm for any completion is not narrowed by a later solicited arm.
	must(t, p.cqB.ReqNotify(false))
	must(t, p.cqB.ReqNotify(true))
	post(SendWR{ID: 11, Opcode: WRSend})
	wantFired(t, p.cqB, true, "SEND without SE, next arm not narrowed")

	// The requester's own successful completions are never solicited.
	wantFired(t, p.cqA, false, "successful send completions on a solicited arm")

	// Receive WQEs 1 to 10, in order: the plain WRITE took none.
	wantWC(t, poll(p.cqB),
		WC{WRID: 1, Opcode: WCRecv, ByteLen: 32}, WC{WRID: 2, Opcode: WCRecv, Flags: WCWithImm, Imm: 7},
		WC{WRID: 3, Opcode: WCRecvRDMAWithImm, Flags: WCWithImm, Imm: 8},
		WC{WRID: 4, Opcode: WCRecv}, WC{WRID: 5, Opcode: WCRecv},
		WC{WRID: 6, Opcode: WCRecv, Flags: WCWithImm, Imm: 9},
		WC{WRID: 7, Opcode: WCRecvRDMAWithImm, Flags: WCWithImm, Imm: 10},
		WC{WRID: 8, Opcode: WCRecv, ByteLen: 5000}, WC{WRID: 9, Opcode: WCRecv}, WC{WRID: 10, Opcode: WCRecv})
}

// TestCQNotifySolicitedOnlyFiresOnError: an unsuccessful completion is solicited (IBTA): a
// receive failing with LOC_LEN_ERR fires a solicited arm though its SEND had no SE, and so do the
// flushed receives of a QP moved to ERR, once per arm.
func TestCQNotifySolicitedOnlyFiresOnError(t *testing.T) {
	p := newPair(t, 3, LinkConfig{}, ConnectOptions{})
	must(t, p.qb.PostRecv(RecvWR{ID: 1, SGL: sge(p.mrB, 0, 8)}))
	must(t, p.cqB.ReqNotify(true))
	must(t, p.cqA.ReqNotify(true))
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: sge(p.mrA, 0, 64)}))
	p.run()
	wantFired(t, p.cqB, true, "LOC_LEN_ERR receive")
	wantWC(t, poll(p.cqB), WC{WRID: 1, Opcode: WCRecv, Status: WCLocLenErr})
	// The requester's REM_INV_REQ_ERR fires its own solicited arm too.
	wantFired(t, p.cqA, true, "REM_INV_REQ_ERR send completion")
	wantWC(t, poll(p.cqA), WC{WRID: 1, Opcode: WCSend, Status: WCRemInvReqErr})

	q := newPair(t, 4, LinkConfig{}, ConnectOptions{})
	for i := uint64(1); i <= 3; i++ {
		must(t, q.qb.PostRecv(RecvWR{ID: i, SGL: sge(q.mrB, 0, 64)}))
	}
	must(t, q.cqB.ReqNotify(true))
	must(t, q.qb.Modify(QPAttr{State: QPSErr}, AttrState))
	q.run()
	wantFired(t, q.cqB, true, "flushed receives")
	wantFired(t, q.cqB, false, "flushed receives, one arm")
	wantWC(t, poll(q.cqB), WC{WRID: 1, Opcode: WCRecv, Status: WCWRFlushErr},
		WC{WRID: 2, Opcode: WCRecv, Status: WCWRFlushErr}, WC{WRID: 3, Opcode: WCRecv, Status: WCWRFlushErr})
}

// TestCQNotifySolicitedRequesterError: a send completion in error fires a solicited arm on the
// requester's CQ.
func TestCQNotifySolicitedRequesterError(t *testing.T) {
	p := newPair(t, 5, LinkConfig{}, ConnectOptions{})
	must(t, p.cqA.ReqNotify(true))
	must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: sge(p.mrA, 0, 64),
		RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey() ^ 0x80}))
	p.run()
	wantFired(t, p.cqA, true, "REM_ACCESS_ERR send completion")
	wantWC(t, poll(p.cqA), WC{WRID: 1, Opcode: WCRDMAWrite, Status: WCRemAccessErr})
}

// seFrame is a captured request: its opcode and Solicited Event bit.
type seFrame struct {
	op wire.Opcode
	se bool
}

// solicitedTraffic posts one message of each kind that can carry SE, with and without it, and
// returns the request frames on the wire and the whole pcap.
func solicitedTraffic(t *testing.T, seed uint64) ([]seFrame, []byte) {
	p := newPair(t, seed, LinkConfig{}, ConnectOptions{})
	var pcap bytes.Buffer
	must(t, p.fab.CapturePcap(&pcap))
	for i := uint64(1); i <= 8; i++ {
		must(t, p.qb.PostRecv(RecvWR{ID: i, SGL: sge(p.mrB, 8192*i, 8192)}))
	}
	remote := func(wr SendWR) SendWR {
		wr.RemoteAddr, wr.RKey = p.mrB.Addr()+1<<20, p.mrB.RKey()
		return wr
	}
	must(t, p.qa.PostSend(
		SendWR{ID: 1, Opcode: WRSend, SGL: sge(p.mrA, 0, 16)},
		SendWR{ID: 2, Opcode: WRSend, Flags: SendSolicited, SGL: sge(p.mrA, 0, 2500)},
		SendWR{ID: 3, Opcode: WRSendWithImm, Flags: SendSolicited, SGL: sge(p.mrA, 0, 16)},
		remote(SendWR{ID: 4, Opcode: WRRDMAWriteWithImm, Flags: SendSolicited, SGL: sge(p.mrA, 0, 2500)}),
		remote(SendWR{ID: 5, Opcode: WRRDMAWriteWithImm, SGL: sge(p.mrA, 0, 16)}),
		remote(SendWR{ID: 6, Opcode: WRRDMAWrite, Flags: SendSolicited, SGL: sge(p.mrA, 0, 16)}),
		remote(SendWR{ID: 7, Opcode: WRRDMARead, Flags: SendSolicited, SGL: sge(p.mrA, 0, 16)}),
		// An rkey nobody can invalidate: the responder refuses it, but the SE bit was sent.
		SendWR{ID: 8, Opcode: WRSendWithInv, Flags: SendSolicited | SendSignaled, Imm: p.mrB.RKey(), SGL: sge(p.mrA, 0, 16)},
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
