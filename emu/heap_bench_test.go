package emu

import (
	"fmt"
	"runtime"
	"testing"
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
		fab := NewFabric(NewSim(), 1)
		devs := make([]*Device, 0, n)
		for i := range n {
			d := fab.AddDevice(fmt.Sprintf("d%d", i), LinkConfig{})
			pd, err := d.AllocPD()
			must(b, err)
			_, err = pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessRemoteWrite|AccessMWBind)
			must(b, err)
			_, err = pd.AllocMW(MWType2)
			must(b, err)
			cq, err := d.CreateCQ(16)
			must(b, err)
			caps := QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
			_, err = pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: caps})
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
