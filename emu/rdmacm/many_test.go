package rdmacm_test

import (
	"bytes"
	"crypto/sha256"
	mrand "math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/rdmacm"
	"github.com/softirdma/softirdma/emu/sim"
)

// fleet is two devices on a fabric, each with a PD and a CQ, making RC QPs on demand.
type fleet struct {
	sim        *sim.Sim
	fab        *sim.Fabric
	devA, devB *engine.Device
	pdA, pdB   *engine.PD
	cqA, cqB   *engine.CQ
}

func newFleet(seed uint64, link sim.LinkConfig) *fleet {
	f := &fleet{sim: sim.NewSim()}
	f.fab = sim.NewFabric(f.sim, seed)
	f.devA, f.devB = f.fab.AddDevice("A", link), f.fab.AddDevice("B", link)
	f.pdA, _ = f.devA.AllocPD()
	f.pdB, _ = f.devB.AllocPD()
	f.cqA, _ = f.devA.CreateCQ(16)
	f.cqB, _ = f.devB.CreateCQ(16)
	return f
}

// qp makes an RC QP on side a (or b) for a connection to take.
func (f *fleet) qp(tb testing.TB, a bool) *engine.QP {
	pd, cq := f.pdB, f.cqB
	if a {
		pd, cq = f.pdA, f.cqA
	}
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: engine.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		tb.Fatal(err)
	}
	return qp
}

// manyConnections connects n QPs of device A at once to one listener on B, each accepted with a
// QP of its own, on a fabric of seed; it returns how many were established on each side, the
// virtual time it took, and the capture.
func manyConnections(tb testing.TB, n int, seed uint64) (a, b int, took time.Duration, pcap []byte) {
	tb.Helper()
	f := newFleet(seed, sim.LinkConfig{})
	var buf bytes.Buffer
	if err := f.fab.CapturePcap(&buf); err != nil {
		tb.Fatal(err)
	}
	mA, err := rdmacm.New(f.devA, rdmacm.Config{Rand: mrand.NewPCG(seed, 1), Events: func(e rdmacm.Event) {
		if e.Type == rdmacm.Established {
			a++
		}
	}})
	if err != nil {
		tb.Fatal(err)
	}
	mB, err := rdmacm.New(f.devB, rdmacm.Config{Rand: mrand.NewPCG(seed, 2), Events: func(e rdmacm.Event) {
		switch e.Type {
		case rdmacm.ConnectRequest:
			if err := e.ID.Accept(f.qp(tb, false), rdmacm.ConnParam{}); err != nil {
				tb.Error(err)
			}
		case rdmacm.Established:
			b++
		}
	}})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := mB.Listen(7174); err != nil {
		tb.Fatal(err)
	}
	for range n {
		if _, err := mA.Connect(f.qp(tb, true), f.devB.IP(), 7174, rdmacm.ConnParam{}); err != nil {
			tb.Fatal(err)
		}
	}
	f.sim.RunUntilIdle(0)
	return a, b, f.sim.Now(), buf.Bytes()
}

// TestThousandConnections: one listener, 1,000 QPs connecting at once (more REQs than the GSI
// QP has receives: the rest are sent again on their timers); every one is established on both
// sides, and the same seed gives the same capture.
func TestThousandConnections(t *testing.T) {
	a, b, took, pcap := manyConnections(t, 1000, 5)
	if a != 1000 || b != 1000 {
		t.Fatalf("established: %d on the connecting side, %d on the listening side", a, b)
	}
	_, _, _, again := manyConnections(t, 1000, 5)
	if sha256.Sum256(pcap) != sha256.Sum256(again) {
		t.Fatal("the same seed gave another capture")
	}
	t.Logf("1,000 connections in %v of virtual time", took)
}

// BenchmarkConnections is connections set up per second of wall time in the simulator: one
// listener, 1,000 QPs connecting at once, REQ, REP and RTU each.
func BenchmarkConnections(b *testing.B) {
	const n = 1000
	for b.Loop() {
		if x, y, _, _ := manyConnections(b, n, 5); x != n || y != n {
			b.Fatalf("%d and %d established", x, y)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "conns/s")
}

// TestConnectionsUnderLoss: over a link that loses, duplicates and reorders CM messages, 100
// connections are set up and torn down, on several seeds; every one is established on both
// sides and then leaves its time wait on both sides.
func TestConnectionsUnderLoss(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		f := newFleet(seed, sim.LinkConfig{Loss: 0.1, Duplicate: 0.05, Reorder: 0.05})
		count := map[string]int{}
		var ids []*rdmacm.ID
		cfg := func(side string, r uint64) rdmacm.Config {
			return rdmacm.Config{Rand: mrand.NewPCG(seed, r), ResponseTimeout: 14, Events: func(e rdmacm.Event) {
				count[side+" "+e.Type.String()]++
				if e.Type == rdmacm.ConnectRequest {
					must(t, e.ID.Accept(f.qp(t, false), rdmacm.ConnParam{}))
				}
			}}
		}
		mA, err := rdmacm.New(f.devA, cfg("A", 1))
		must(t, err)
		mB, err := rdmacm.New(f.devB, cfg("B", 2))
		must(t, err)
		_, err = mB.Listen(7174)
		must(t, err)
		for range 100 {
			id, err := mA.Connect(f.qp(t, true), f.devB.IP(), 7174, rdmacm.ConnParam{})
			must(t, err)
			ids = append(ids, id)
		}
		f.sim.RunUntilIdle(0)
		for _, id := range ids {
			if id.State() == "ESTABLISHED" {
				must(t, id.Disconnect())
			}
		}
		f.sim.RunUntilIdle(0)
		for _, k := range []string{"A ESTABLISHED", "B CONNECT_REQUEST", "B ESTABLISHED", "A DISCONNECTED", "B DISCONNECTED", "A TIMEWAIT_EXIT", "B TIMEWAIT_EXIT"} {
			if count[k] != 100 {
				t.Fatalf("seed %d: %v", seed, count)
			}
		}
	}
}

// TestConnectDestroyHeapFlat: 10,000 connections made and destroyed, 100 at a time, each side
// destroying its ID and its QP (the connecting side first, the other on its DISCONNECTED),
// leave the heap where the first 1,000 left it, and neither manager holds an ID after.
func TestConnectDestroyHeapFlat(t *testing.T) {
	const batch, bound = 100, 256 << 10
	f := newFleet(7, sim.LinkConfig{})
	accepted := map[*rdmacm.ID]*engine.QP{}
	established := 0
	mA, err := rdmacm.New(f.devA, rdmacm.Config{Rand: mrand.NewPCG(7, 1), Events: func(e rdmacm.Event) {
		if e.Type == rdmacm.Established {
			established++
		}
	}})
	must(t, err)
	mB, err := rdmacm.New(f.devB, rdmacm.Config{Rand: mrand.NewPCG(7, 2), Events: func(e rdmacm.Event) {
		switch e.Type {
		case rdmacm.ConnectRequest:
			qp := f.qp(t, false)
			accepted[e.ID] = qp
			must(t, e.ID.Accept(qp, rdmacm.ConnParam{}))
		case rdmacm.Disconnected:
			must(t, e.ID.Destroy())
			must(t, accepted[e.ID].Destroy())
			delete(accepted, e.ID)
		}
	}})
	must(t, err)
	_, err = mB.Listen(7174)
	must(t, err)
	ids, qps := make([]*rdmacm.ID, batch), make([]*engine.QP, batch)
	rounds := func(n int) {
		for range n {
			for i := range batch {
				qps[i] = f.qp(t, true)
				ids[i], err = mA.Connect(qps[i], f.devB.IP(), 7174, rdmacm.ConnParam{})
				must(t, err)
			}
			f.sim.RunUntilIdle(0)
			for i := range batch {
				must(t, ids[i].Destroy())
			}
			f.sim.RunUntilIdle(0)
			for i := range batch {
				must(t, qps[i].Destroy())
			}
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	rounds(1000 / batch)
	after1k := heap()
	rounds(9000 / batch)
	after10k := heap()
	t.Logf("heap after 1,000 connections %d bytes, after 10,000 %d", after1k, after10k)
	if established != 10000 || len(accepted) != 0 {
		t.Fatalf("%d established, %d accepted left", established, len(accepted))
	}
	if a, b := rdmacm.HeldBy(mA), rdmacm.HeldBy(mB); a.Conns != 0 || a.Listeners != 0 || b.Conns != 0 || b.Listeners != 1 {
		t.Fatalf("A holds %+v, B %+v", a, b)
	}
	if after10k > after1k+bound {
		t.Fatalf("the heap grew by %d bytes from 1,000 connections to 10,000", after10k-after1k)
	}
}
