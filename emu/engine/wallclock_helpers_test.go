package engine_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/wire/ethswitch"
)

// wallDevices are devices A (192.0.2.1) and B (192.0.2.2) on one wall clock, each resolving
// the other's address to the other's MAC, attached to no link yet.
func wallDevices() (a, b *engine.Device) {
	clock := realtime.NewWallClock()
	return wallDevicesOn(clock, clock)
}

// wallDevicesOn are wallDevices with A on clock ca and B on cb: on two clocks, each device
// runs its timers and requesters on a goroutine of its own, as each function of serve does.
func wallDevicesOn(ca, cb engine.Clock) (a, b *engine.Device) {
	macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	ipA, ipB := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	resolve := func(ip netip.Addr) ([6]byte, bool) {
		if ip == ipA {
			return macA, true
		}
		return macB, true
	}
	a = engine.NewDevice(engine.DeviceConfig{Name: "A", Clock: ca, MAC: macA, IP: ipA, Resolve: resolve})
	b = engine.NewDevice(engine.DeviceConfig{Name: "B", Clock: cb, MAC: macB, IP: ipB, Resolve: resolve})
	return a, b
}

// waitCQ returns once cq holds a completion or deadline has passed; the poll after it says
// which.
func waitCQ(cq *engine.CQ, deadline time.Time) {
	for cq.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// wallTraffic is the traffic checkWriteReadSend moves over a connected pair of QPs.
type wallTraffic struct {
	pdA, pdB         *engine.PD
	cqA, cqB         *engine.CQ
	qa, qb           *engine.QP
	recvLen, sendLen uint32 // the receive B posts at 32 KiB into its buffer; the SEND A posts
	seed             byte   // what A's buffer is filled from
	deadline         time.Duration
}

// checkWriteReadSend moves data over a connected pair of QPs outside the simulator: A WRITEs
// 20000 B into B's buffer, READs them back further along its own, and SENDs sendLen bytes
// into a receive at 32 KiB of B's; it waits for A's SEND and B's receive and checks their
// completions and every byte. label names the run in a failure.
func checkWriteReadSend(t *testing.T, w wallTraffic, label string) {
	t.Helper()
	bufA, bufB := make([]byte, 1<<16), make([]byte, 1<<16)
	fill(bufA, w.seed)
	mrA, _ := w.pdA.RegMR(bufA, engine.AccessLocalWrite)
	mrB, _ := w.pdB.RegMR(bufB, engine.AccessLocalWrite|engine.AccessRemoteWrite|engine.AccessRemoteRead)
	must(t, w.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(mrB, 32768, w.recvLen)}))
	must(t, w.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, SGL: sge(mrA, 0, 20000), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, SGL: sge(mrA, 40000, 20000), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()},
		engine.SendWR{ID: 3, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(mrA, 0, w.sendLen)}))
	deadline := time.Now().Add(w.deadline)
	waitCQ(w.cqA, deadline)
	wantWC(t, poll(w.cqA), engine.WC{WRID: 3, Opcode: engine.WCSend})
	waitCQ(w.cqB, deadline)
	wantWC(t, poll(w.cqB), engine.WC{WRID: 9, Opcode: engine.WCRecv, ByteLen: w.sendLen})
	if !bytes.Equal(bufB[:20000], bufA[:20000]) || !bytes.Equal(bufA[40000:60000], bufA[:20000]) || !bytes.Equal(bufB[32768:32768+w.sendLen], bufA[:w.sendLen]) {
		t.Fatalf("%s: data differs", label)
	}
}

// hostsOn are wall-clock hosts A (192.0.2.10) and B (192.0.2.11) on ports of sw, running until
// the test ends.
func hostsOn(tb testing.TB, sw *ethswitch.Switch) (ha, hb *realtime.Host) {
	mk := func(name string, mac [6]byte, ip string) *realtime.Host {
		h, err := realtime.NewHost(realtime.HostConfig{Name: name, Link: sw.NewPort(name), MAC: mac, IP: netip.MustParseAddr(ip), Answer: true})
		must(tb, err)
		go h.Run()
		tb.Cleanup(func() { h.Close() })
		return h
	}
	return mk("A", [6]byte{2, 0, 0, 0, 0, 0xa}, "192.0.2.10"), mk("B", [6]byte{2, 0, 0, 0, 0, 0xb}, "192.0.2.11")
}
