package engine_test

import (
	"fmt"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
)

// wantFlushed asserts that every completion is WR_FLUSH_ERR and says why the QP is in ERR.
func wantFlushed(t *testing.T, what string, wcs []engine.WC, n int, why string) {
	t.Helper()
	if len(wcs) != n {
		t.Fatalf("%s: %d completions %s, want %d", what, len(wcs), fmtWC(wcs), n)
	}
	for _, wc := range wcs {
		if wc.Status != engine.WCWRFlushErr || wc.Err == nil || wc.Err.Error() != why {
			t.Errorf("%s: wr %d %s err %v\nwant WR_FLUSH_ERR with %q", what, wc.WRID, wc.Status, wc.Err, why)
		}
	}
}

// TestFlushedCompletionsSayWhy (T3): a completion flushed by a QP in ERR carries the reason the
// QP went there, as every error completion does: moved there by modify_qp, or the failure that
// took it there. Sends, receives, requests posted after the move, and a receive taken from an
// SRQ by a message cut short all say it.
func TestFlushedCompletionsSayWhy(t *testing.T) {
	t.Run("modify_qp", func(t *testing.T) {
		p := plainPair(t)
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 1, SGL: sge(p.mrB, 0, 8)}, engine.RecvWR{ID: 2, SGL: sge(p.mrB, 0, 8)}))
		toErr(t, p.qb)
		must(t, p.qb.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRSend, Flags: engine.SendSignaled}))
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 4}))
		p.run()
		wantFlushed(t, "B", poll(p.cqB), 4, fmt.Sprintf("flushed: QP 0x%06x was moved to ERR by modify_qp", p.qb.Num()))
	})
	t.Run("failure", func(t *testing.T) {
		p := plainPair(t)
		must(t, p.qa.PostRecv(engine.RecvWR{ID: 10, SGL: sge(p.mrA, 0, 8)}))
		must(t, p.qb.PostRecv(engine.RecvWR{ID: 20, SGL: sge(p.mrB, 0, 8)}))
		must(t, p.qa.PostSend(
			engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8),
				RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey() + 1}, // a wrong key8
			engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8),
				RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		p.run()
		must(t, p.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRSend}))
		p.run()
		wcs := poll(p.cqA)
		if len(wcs) == 0 || wcs[0].WRID != 1 || wcs[0].Status != engine.WCRemAccessErr {
			t.Fatalf("A: %s, want the WRITE failing first", fmtWC(wcs))
		}
		wantFlushed(t, "A", wcs[1:], 3,
			fmt.Sprintf("flushed: QP 0x%06x went to ERR: wr 0x1 RDMA_WRITE completed with REM_ACCESS_ERR", p.qa.Num()))
		wcs = poll(p.cqB)
		if len(wcs) != 1 || wcs[0].Err == nil {
			t.Fatalf("B: %s", fmtWC(wcs))
		}
		want := fmt.Sprintf("flushed: QP 0x%06x went to ERR: responder refused psn 0 with NAK_REM_ACCESS: ", p.qb.Num())
		if got := wcs[0].Err.Error(); len(got) <= len(want) || got[:len(want)] != want {
			t.Fatalf("B: %q, want it to start %q", got, want)
		}
	})
	t.Run("SRQ", func(t *testing.T) {
		p := newPair(t, 1, sim.LinkConfig{Rate: 1e9}, engine.ConnectOptions{}) // the SEND's packets arrive one by one
		srq := newSRQ(t, p.pdB, 4, 1)
		caps := engine.QPCap{MaxSendWR: 4, MaxSendSGE: 1}
		qa, qb := p.connectToSRQ(srq, caps, engine.ConnectOptions{})
		must(t, srq.PostRecv(engine.RecvWR{ID: 7, SGL: sge(p.mrB, 0, 4096)}))
		must(t, qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, SGL: sge(p.mrA, 0, 3000)})) // three packets at MTU 1024
		if !p.sim.RunUntil(func() bool { return qb.ExpectedPSN() == 1 }) {
			t.Fatal("the SEND's first packet never arrived")
		}
		toErr(t, qb)
		wantFlushed(t, "B", poll(p.cqB), 1, fmt.Sprintf("flushed: QP 0x%06x was moved to ERR by modify_qp", qb.Num()))
	})
}
