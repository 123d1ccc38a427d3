package engine_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// Two QPs on one SRQ with overlapping multi-packet SENDs: each must get its own receive (a
// receive is taken off the SRQ when a message starts, not when it ends).
func TestSRQOverlappingSends(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
	srq := newSRQ(t, p.pdB, 4, 1)
	caps := engine.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	var qas, qbs [2]*engine.QP
	for i := range 2 {
		qas[i], qbs[i] = p.connectToSRQ(srq, caps, engine.ConnectOptions{MTU: engine.MTU1024})
	}
	must(t, srq.PostRecv(engine.RecvWR{ID: 100, SGL: sge(p.mrB, 0, 8192)}, engine.RecvWR{ID: 101, SGL: sge(p.mrB, 8192, 8192)}))
	// The first QP's packets after SEND_FIRST are held back, so the second SEND starts and
	// finishes in between.
	p.fab.AddFault(sim.Fault{Src: "A", DestQP: qbs[0].Num(), Opcodes: []wire.Opcode{wire.RCSendMiddle, wire.RCSendLast}, Action: sim.FaultDelay, Delay: 50 * time.Microsecond})
	fill(p.bufA[:4096], 1)
	fill(p.bufA[4096:8192], 2)
	must(t, qas[0].PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 4096)}))
	must(t, qas[1].PostSend(engine.SendWR{ID: 2, Opcode: engine.WRSend, SGL: sge(p.mrA, 4096, 4096)}))
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
		if wc.Status != engine.WCSuccess || !bytes.Equal(slot, src) {
			t.Fatalf("receive %d on QP %#x: %s, data right %v", wc.WRID, wc.QPNum, wc.Status, bytes.Equal(slot, src))
		}
	}
	must(t, srq.PostRecv(engine.RecvWR{ID: 102, SGL: sge(p.mrB, 0, 64)})) // the queue is sound
}

// A full CQ while a send completion is retired: the QP goes to ERR, nothing is retired twice,
// and posting afterwards is safe.
func TestCQOverflowDoesNotCorruptTheSendQueue(t *testing.T) {
	p := plainPair(t)
	cq, err := p.a.CreateCQ(1)
	must(t, err)
	qp, _ := connectedRC(t, rcEnd{pd: p.pdA, cq: cq, cap: engine.QPCap{MaxSendWR: 3, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, sigAll: true},
		rcEnd{pd: p.pdB, cq: p.cqB, cap: engine.QPCap{MaxSendWR: 3, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}, engine.ConnectOptions{})
	w := engine.SendWR{Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
	must(t, qp.PostSend(w, w))
	p.run()
	if qp.State() != engine.QPSErr || !cq.Overflowed() || qp.SendQueueLen() != 0 {
		t.Fatalf("state %s, overflowed %v, send queue %d", qp.State(), cq.Overflowed(), qp.SendQueueLen())
	}
	must(t, qp.PostSend(w)) // flushed at once, no panic
	if n := qp.SendQueueLen(); n != 0 {
		t.Fatalf("send queue %d", n)
	}
}

// A duplicated sequence NAK or RNR NAK costs one retry, not two.
func TestDuplicatedNAKsCostOneRetry(t *testing.T) {
	t.Run("sequence", func(t *testing.T) {
		p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{RetryCnt: 1, NoDefaults: true, MTU: engine.MTU1024, Timeout: 14, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 1, Access: engine.AccessRemoteWrite})
		p.fab.AddFault(sim.Fault{Src: "A", Opcodes: []wire.Opcode{wire.RCWriteOnly}, Nth: 1, Action: sim.FaultDrop})
		p.fab.AddFault(sim.Fault{Src: "B", Opcodes: []wire.Opcode{wire.RCAcknowledge}, Nth: 1, Action: sim.FaultDuplicate})
		w := engine.SendWR{Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
		w1, w2 := w, w
		w1.ID, w2.ID = 1, 2
		must(t, p.qa.PostSend(w1, w2))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite})
	})
	t.Run("rnr", func(t *testing.T) {
		p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{RNRRetry: 1, NoDefaults: true, MTU: engine.MTU1024, Timeout: 14, RetryCnt: 7, MinRNRTimer: 14, MaxRdAtomic: 1})
		p.fab.AddFault(sim.Fault{Src: "B", Opcodes: []wire.Opcode{wire.RCAcknowledge}, Nth: 1, Action: sim.FaultDuplicate})
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8)}))
		p.sim.RunFor(500 * time.Microsecond) // one RNR NAK (and its copy) back
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(p.mrB, 0, 64)}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend})
	})
}

// Type 1 binds can be queued back to back: the verb checks the window as the key space has it,
// and the handle runs ahead.
func TestPipelinedType1Binds(t *testing.T) {
	p := plainPair(t)
	mw, err := p.pdB.AllocMW(engine.MWType1)
	must(t, err)
	k0 := mw.RKey()
	must(t, p.qb.BindMW(mw, engine.MWBind{ID: 1, Flags: engine.SendSignaled, MR: p.mrB, Addr: p.mrB.Addr(), Length: 4096, Access: engine.AccessRemoteWrite}))
	must(t, p.qb.BindMW(mw, engine.MWBind{ID: 2, Flags: engine.SendSignaled}))
	must(t, p.qb.BindMW(mw, engine.MWBind{ID: 3, Flags: engine.SendSignaled, MR: p.mrB, Addr: p.mrB.Addr(), Length: 64, Access: engine.AccessRemoteRead}))
	if mw.RKey() != k0+3 {
		t.Fatalf("handle %#x after three binds from %#x", mw.RKey(), k0)
	}
	p.run()
	wantWC(t, poll(p.cqB), engine.WC{WRID: 1, Opcode: engine.WCBindMW}, engine.WC{WRID: 2, Opcode: engine.WCBindMW}, engine.WC{WRID: 3, Opcode: engine.WCBindMW})
	info, err := p.b.QueryMW(mw)
	if err != nil || uint32(info.Key) != mw.RKey() || info.Len != 64 {
		t.Fatalf("window %+v %v, handle %#x", info, err, mw.RKey())
	}
	// A failing bind in the middle of a queue: the handle ends where the key space is.
	noBind, err := p.pdB.RegMR(make([]byte, 64), engine.AccessLocalWrite)
	must(t, err)
	ks := mw.RKey()
	must(t, p.qb.BindMW(mw, engine.MWBind{ID: 4, MR: noBind, Addr: noBind.Addr(), Length: 64, Access: engine.AccessRemoteRead}))
	must(t, p.qb.BindMW(mw, engine.MWBind{ID: 5}))
	p.run()
	wantWC(t, poll(p.cqB), engine.WC{WRID: 4, Status: engine.WCMWBindErr, Opcode: engine.WCBindMW}, engine.WC{WRID: 5, Status: engine.WCWRFlushErr, Opcode: engine.WCBindMW})
	if mw.RKey() != ks {
		t.Fatalf("handle %#x after a failed queue, key space %#x", mw.RKey(), ks)
	}
	must(t, mw.Dealloc())
}
