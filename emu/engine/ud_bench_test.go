package engine_test

import (
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
)

// BenchmarkUDSend is a stream of 4 KiB datagrams (one packet each at the port MTU, 4096) from one
// UD QP to another on the simulated fabric, in batches of 64 as a bandwidth test posts them, the
// receives reposted as they complete: DETH, GRH area and Q_Key checks included. Compare its MB/s
// with BenchmarkIdealPipe/64KiB and /4KiB.
func BenchmarkUDSend(b *testing.B) {
	const (
		n     = 4096
		batch = 64
	)
	s := sim.NewSim()
	fab := sim.NewFabric(s, 1)
	nodes := make([]*dgNode, 2)
	for i := range nodes {
		dev := fab.AddDevice(string(rune('A'+i)), sim.LinkConfig{})
		nd := &dgNode{dev: dev, buf: make([]byte, 2*batch*(n+engine.GRHLen))}
		var err error
		nd.pd, _ = dev.AllocPD()
		nd.cq, _ = dev.CreateCQ(4 * batch)
		nd.qp, err = nd.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeUD, SendCQ: nd.cq, RecvCQ: nd.cq,
			Cap: engine.QPCap{MaxSendWR: batch, MaxRecvWR: 2 * batch, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(b, err)
		must(b, nd.qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, QKey: testQKey}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrQKey))
		must(b, nd.qp.Modify(engine.QPAttr{State: engine.QPSRTR}, engine.AttrState))
		must(b, nd.qp.Modify(engine.QPAttr{State: engine.QPSRTS}, engine.AttrState|engine.AttrSQPSN))
		nd.mr, err = nd.pd.RegMR(nd.buf, engine.AccessLocalWrite)
		must(b, err)
		nodes[i] = nd
	}
	a, r := nodes[0], nodes[1]
	ah, err := a.pd.CreateAH(engine.AHAttr{DGID: r.dev.IP(), HopLimit: 64})
	must(b, err)
	wrs := make([]engine.SendWR, batch)
	for i := range wrs {
		wrs[i] = engine.SendWR{ID: uint64(i), Opcode: engine.WRSend, SGL: sge(a.mr, uint64(i*n), n), AH: ah, RemoteQPN: r.qp.Num(), RemoteQKey: testQKey}
	}
	wrs[batch-1].Flags = engine.SendSignaled
	recvs := make([]engine.RecvWR, batch)
	for i := range recvs {
		recvs[i] = engine.RecvWR{ID: uint64(i), SGL: sge(r.mr, uint64(i*(n+engine.GRHLen)), n+engine.GRHLen)}
	}
	wc := make([]engine.WC, batch)
	done := false
	a.cq.OnCompletion(func() { done = true })
	b.SetBytes(n * batch)
	b.ReportAllocs()
	for b.Loop() {
		must(b, r.qp.PostRecv(recvs...))
		must(b, a.qp.PostSend(wrs...))
		for done = false; !done; {
			if !s.Step() {
				b.Fatal("no completion")
			}
		}
		a.cq.Poll(wc)
		s.RunUntilIdle(0)
		if got := r.cq.Poll(wc); got != batch || wc[batch-1].Status != engine.WCSuccess {
			b.Fatalf("%d datagrams received of %d", got, batch)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "datagrams/s")
}
