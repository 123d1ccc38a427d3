package emu

import (
	"bytes"
	"testing"
	"time"

	"github.com/softirdma/softirdma/wire"
)

// Two QPs on one SRQ with overlapping multi-packet SENDs: each must get its own receive (a
// receive is taken off the SRQ when a message starts, not when it ends).
func TestSRQOverlappingSends(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{MTU: MTU1024})
	srq, err := p.pdB.CreateSRQ(4, 1)
	must(t, err)
	caps := QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	var qas, qbs [2]*QP
	for i := range 2 {
		qas[i], err = p.pdA.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: p.cqA, RecvCQ: p.cqA, Cap: caps})
		must(t, err)
		qbs[i], err = p.pdB.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: p.cqB, RecvCQ: p.cqB, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		must(t, err)
		must(t, ConnectRC(qas[i], qbs[i], ConnectOptions{MTU: MTU1024}))
	}
	must(t, srq.PostRecv(RecvWR{ID: 100, SGL: sge(p.mrB, 0, 8192)}, RecvWR{ID: 101, SGL: sge(p.mrB, 8192, 8192)}))
	// The first QP's packets after SEND_FIRST are held back, so the second SEND starts and
	// finishes in between.
	p.fab.AddFault(Fault{Src: "A", DestQP: qbs[0].Num(), Opcodes: []wire.Opcode{wire.RCSendMiddle, wire.RCSendLast}, Action: FaultDelay, Delay: 50 * time.Microsecond})
	fill(p.bufA[:4096], 1)
	fill(p.bufA[4096:8192], 2)
	must(t, qas[0].PostSend(SendWR{ID: 1, Opcode: WRSend, SGL: sge(p.mrA, 0, 4096)}))
	must(t, qas[1].PostSend(SendWR{ID: 2, Opcode: WRSend, SGL: sge(p.mrA, 4096, 4096)}))
	p.run()
	wcs := poll(p.cqB)
	if len(wcs) != 2 || wcs[0].WRID == wcs[1].WRID {
		t.Fatalf("receive completions %s", fmtWC(wcs))
	}
	for _, wc := range wcs {
		slot := p.bufB[(wc.WRID-100)*8192:][:4096]
		src := p.bufA[:4096]
		if wc.QPNum == qbs[1].Num() {
			src = p.bufA[4096:8192]
		}
		if wc.Status != WCSuccess || !bytes.Equal(slot, src) {
			t.Fatalf("receive %d on QP %#x: %s, data right %v", wc.WRID, wc.QPNum, wc.Status, bytes.Equal(slot, src))
		}
	}
	must(t, srq.PostRecv(RecvWR{ID: 102, SGL: sge(p.mrB, 0, 64)})) // the queue is sound
}

// A full CQ while a send completion is retired: the QP goes to ERR, nothing is retired twice,
// and posting afterwards is safe.
func TestCQOverflowDoesNotCorruptTheSendQueue(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{})
	cq, err := p.a.CreateCQ(1)
	must(t, err)
	qp, err := p.pdA.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, SigAll: true, Cap: QPCap{MaxSendWR: 3, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	qb, err := p.pdB.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: p.cqB, RecvCQ: p.cqB, Cap: QPCap{MaxSendWR: 3, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	must(t, ConnectRC(qp, qb, ConnectOptions{}))
	w := SendWR{Opcode: WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
	must(t, qp.PostSend(w, w))
	p.run()
	if qp.State() != QPSErr || !cq.Overflowed() || qp.sq.n != 0 {
		t.Fatalf("state %s, overflowed %v, send queue %d", qp.State(), cq.Overflowed(), qp.sq.n)
	}
	must(t, qp.PostSend(w)) // flushed at once, no panic
	if qp.sq.n != 0 {
		t.Fatalf("send queue %d", qp.sq.n)
	}
}

// A duplicated sequence NAK or RNR NAK costs one retry, not two.
func TestDuplicatedNAKsCostOneRetry(t *testing.T) {
	t.Run("sequence", func(t *testing.T) {
		p := newPair(t, 1, LinkConfig{}, ConnectOptions{RetryCnt: 1, NoDefaults: true, MTU: MTU1024, Timeout: 14, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 1, Access: AccessRemoteWrite})
		p.fab.AddFault(Fault{Src: "A", Opcodes: []wire.Opcode{wire.RCWriteOnly}, Nth: 1, Action: FaultDrop})
		p.fab.AddFault(Fault{Src: "B", Opcodes: []wire.Opcode{wire.RCAcknowledge}, Nth: 1, Action: FaultDuplicate})
		w := SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
		w1, w2 := w, w
		w1.ID, w2.ID = 1, 2
		must(t, p.qa.PostSend(w1, w2))
		p.run()
		wantWC(t, poll(p.cqA), WC{WRID: 1, Opcode: WCRDMAWrite}, WC{WRID: 2, Opcode: WCRDMAWrite})
	})
	t.Run("rnr", func(t *testing.T) {
		p := newPair(t, 1, LinkConfig{}, ConnectOptions{RNRRetry: 1, NoDefaults: true, MTU: MTU1024, Timeout: 14, RetryCnt: 7, MinRNRTimer: 14, MaxRdAtomic: 1})
		p.fab.AddFault(Fault{Src: "B", Opcodes: []wire.Opcode{wire.RCAcknowledge}, Nth: 1, Action: FaultDuplicate})
		must(t, p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: sge(p.mrA, 0, 8)}))
		p.sim.RunFor(500 * time.Microsecond) // one RNR NAK (and its copy) back
		must(t, p.qb.PostRecv(RecvWR{ID: 9, SGL: sge(p.mrB, 0, 64)}))
		p.run()
		wantWC(t, poll(p.cqA), WC{WRID: 1, Opcode: WCSend})
	})
}

// Type 1 binds can be queued back to back: the verb checks the window as the key space has it,
// and the handle runs ahead.
func TestPipelinedType1Binds(t *testing.T) {
	p := newPair(t, 1, LinkConfig{}, ConnectOptions{})
	mw, err := p.pdB.AllocMW(MWType1)
	must(t, err)
	k0 := mw.RKey()
	must(t, p.qb.BindMW(mw, MWBind{ID: 1, Flags: SendSignaled, MR: p.mrB, Addr: p.mrB.Addr(), Length: 4096, Access: AccessRemoteWrite}))
	must(t, p.qb.BindMW(mw, MWBind{ID: 2, Flags: SendSignaled}))
	must(t, p.qb.BindMW(mw, MWBind{ID: 3, Flags: SendSignaled, MR: p.mrB, Addr: p.mrB.Addr(), Length: 64, Access: AccessRemoteRead}))
	if mw.RKey() != k0+3 {
		t.Fatalf("handle %#x after three binds from %#x", mw.RKey(), k0)
	}
	p.run()
	wantWC(t, poll(p.cqB), WC{WRID: 1, Opcode: WCBindMW}, WC{WRID: 2, Opcode: WCBindMW}, WC{WRID: 3, Opcode: WCBindMW})
	info, err := p.b.QueryMW(mw)
	if err != nil || uint32(info.Key) != mw.RKey() || info.Len != 64 {
		t.Fatalf("window %+v %v, handle %#x", info, err, mw.RKey())
	}
	// A failing bind in the middle of a queue: the handle ends where the key space is.
	noBind, err := p.pdB.RegMR(make([]byte, 64), AccessLocalWrite)
	must(t, err)
	ks := mw.RKey()
	must(t, p.qb.BindMW(mw, MWBind{ID: 4, MR: noBind, Addr: noBind.Addr(), Length: 64, Access: AccessRemoteRead}))
	must(t, p.qb.BindMW(mw, MWBind{ID: 5}))
	p.run()
	wantWC(t, poll(p.cqB), WC{WRID: 4, Status: WCMWBindErr, Opcode: WCBindMW}, WC{WRID: 5, Status: WCWRFlushErr, Opcode: WCBindMW})
	if mw.RKey() != ks {
		t.Fatalf("handle %#x after a failed queue, key space %#x", mw.RKey(), ks)
	}
	must(t, mw.Dealloc())
}
