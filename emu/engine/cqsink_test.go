package engine_test

import (
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
)

// A CQ with a sink hands each completion to it, in order, and an arm fires as for any CQ; a
// sink with no room is an overflow: the QP goes to ERR and CQ_ERR and QP_FATAL are raised.
func TestCQSink(t *testing.T) {
	p := plainPair(t)
	la := recordAsync(p.a)
	var got []engine.WC
	room := 2
	cq, err := p.a.CreateCQSink(func(wc engine.WC) bool {
		if len(got) == room {
			return false
		}
		got = append(got, wc)
		return true
	})
	must(t, err)
	caps := engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa, _ := connectedRC(t, rcEnd{pd: p.pdA, cq: cq, cap: caps}, rcEnd{pd: p.pdB, cq: p.cqB, cap: caps}, engine.ConnectOptions{})
	must(t, cq.ReqNotify(false))
	for id := uint64(1); id <= 3; id++ {
		must(t, qa.PostSend(engine.SendWR{ID: id, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	}
	p.run()
	if len(got) != 2 || got[0].WRID != 1 || got[1].WRID != 2 || got[0].Status != engine.WCSuccess || got[0].QPNum != qa.Num() {
		t.Fatalf("sink got %s", fmtWC(got))
	}
	select {
	case <-cq.Events():
	default:
		t.Fatal("the armed CQ fired no event")
	}
	if n := cq.Poll(make([]engine.WC, 4)); n != 0 || cq.Len() != 0 {
		t.Fatalf("a sink CQ polled %d", n)
	}
	if qa.State() != engine.QPSErr {
		t.Fatalf("QP %s after the sink ran out of room", qa.State())
	}
	la.want(t, "A", engine.AsyncEvent{engine.AsyncCQErr, cq.Num()}, engine.AsyncEvent{engine.AsyncQPFatal, qa.Num()})
	if _, err := p.a.CreateCQSink(nil); err == nil {
		t.Fatal("a CQ without a sink")
	}
}
