package engine_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
)

// BenchmarkFabricHeapPerDevice builds a 1,000-device fabric, each device with one PD, one MR
// over a small buffer, one MW and one RC QP with its own CQ, and reports the heap each device
// costs. Large simulations are bounded by this figure, not by speed.
func BenchmarkFabricHeapPerDevice(b *testing.B) {
	const n = 1000
	var perDev float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fab := sim.NewFabric(sim.NewSim(), 1)
		devs := make([]*engine.Device, 0, n)
		for i := range n {
			d := fab.AddDevice(fmt.Sprintf("d%d", i), sim.LinkConfig{})
			pd, err := d.AllocPD()
			must(b, err)
			_, err = pd.RegMR(make([]byte, 64), engine.AccessLocalWrite|engine.AccessRemoteWrite|engine.AccessMWBind)
			must(b, err)
			_, err = pd.AllocMW(engine.MWType2)
			must(b, err)
			cq, err := d.CreateCQ(16)
			must(b, err)
			caps := engine.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
			_, err = pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: caps})
			must(b, err)
			devs = append(devs, d)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perDev = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		runtime.KeepAlive(fab)
		runtime.KeepAlive(devs)
	}
	b.ReportMetric(perDev, "B/device")
}
