package driver_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/driver"
	"github.com/softirdma/softirdma/internal/devscenario"
	"github.com/softirdma/softirdma/wire/ethswitch"
)

// benchPair is two QPs of the function connected over its loopback, driven through the
// in-process transport (every register access a vfio-user message), and a 1 MiB MR.
func benchPair(b *testing.B) (*driver.QP, *driver.CQ, driver.MR) {
	// Real time: the engine on its own goroutines, as a device serves a guest.
	bus := inProcess(b, func(c *hw.Config) { c.Clock = emu.NewWallClock() })
	d, err := driver.Open(bus, driver.Arena{Base: ramBase, Size: ramSize})
	must(b, err)
	return devscenario.LoopbackPair(b, d, netip.MustParseAddr("192.0.2.1"))
}

// BenchmarkDoorbellToCompletion is an 8-byte WRITE posted by the Go driver through the
// in-process transport (WQE into guest RAM, doorbell as a vfio-user REGION_WRITE) to another
// QP of the function, until its completion is in the guest's CQ ring: ns/op is the latency.
func BenchmarkDoorbellToCompletion(b *testing.B) {
	q, cq, mr := benchPair(b)
	b.ReportAllocs()
	for b.Loop() {
		devscenario.DoorbellToCompletion(b, q, cq, mr)
	}
}

// BenchmarkGuestWrite is WRITEs of 64 KiB from guest memory, 16 outstanding, one signaled in
// 16, through the in-process transport to another QP of the function (WQEs/s and goodput), and
// the engine's own RCWrite/64KiB between two devices in process as the baseline in the same run.
func BenchmarkGuestWrite(b *testing.B) {
	const size = 64 << 10
	b.Run("driver/64KiB", func(b *testing.B) {
		q, cq, mr := benchPair(b)
		guestWrites(b, q, cq, mr, mr.Addr+512<<10, mr.Key)
	})
	b.Run("driver-to-peer/64KiB", func(b *testing.B) {
		// The function's engine joined to a peer device by a function call, as the engine
		// baseline below: what the device model and the transport add is the difference.
		clock := emu.NewWallClock()
		peer := emu.NewDevice(emu.DeviceConfig{Name: "peer", Clock: clock, IP: netip.MustParseAddr("192.0.2.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2},
			Resolve: func(netip.Addr) ([6]byte, bool) { return [6]byte{2, 0, 0, 0, 0, 1}, true }})
		bus := inProcess(b, func(c *hw.Config) {
			c.Clock = clock
			c.Engine = func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *emu.Device {
				fn := emu.NewDevice(emu.DeviceConfig{Name: "fn", Clock: clock, IP: ip, IPs: ips, MAC: mac,
					Resolve: func(netip.Addr) ([6]byte, bool) { return peer.MAC(), true }})
				fn.Attach(callLink{to: peer})
				peer.Attach(callLink{to: fn})
				return fn
			}
		})
		d, err := driver.Open(bus, driver.Arena{Base: ramBase, Size: ramSize})
		must(b, err)
		pd, err := d.AllocPD()
		must(b, err)
		mr, err := d.RegMR(pd, 1<<20, 1)
		must(b, err)
		cq, err := d.CreateCQ(8, nil)
		must(b, err)
		q, err := d.CreateQP(pd, cq, cq, driver.QPCaps{SendLog: 7, RecvLog: 2, MaxSendSGE: 1, MaxRecvSGE: 1})
		must(b, err)
		pqp, _, pmr := enginePeer(b, peer)
		devscenario.ConnectPeer(b, q, pqp, peer.IP(), netip.MustParseAddr("192.0.2.1"), uint8(emu.MTU4096))
		guestWrites(b, q, cq, mr, pmr.Addr(), pmr.RKey())
	})
	for _, mtu := range []emu.MTU{emu.MTU1024, emu.MTU4096} {
		b.Run(fmt.Sprintf("switch-mtu%d/64KiB", mtu.Bytes()), func(b *testing.B) {
			// Two functions on the fabric of serve -function (wire/ethswitch), each on its
			// realtime host as serve runs it: what a guest-to-guest transfer costs on the
			// host, the guests' CPUs aside.
			sw := ethswitch.New()
			f, g := newSwitchFunction(b, sw, 0, 1<<20), newSwitchFunction(b, sw, 1, 1<<20)
			q, err := f.d.CreateQP(f.pd, f.cq, f.cq, driver.QPCaps{SendLog: 7, RecvLog: 2, MaxSendSGE: 1, MaxRecvSGE: 1})
			must(b, err)
			r, err := g.d.CreateQP(g.pd, g.cq, g.cq, driver.QPCaps{SendLog: 2, RecvLog: 2, MaxSendSGE: 1, MaxRecvSGE: 1})
			must(b, err)
			toRTSMTU(b, q, r.Num, g.ip.As16(), allAccess, mtu)
			toRTSMTU(b, r, q.Num, f.ip.As16(), allAccess, mtu)
			guestWrites(b, q, f.cq, f.mr, g.mr.Addr+512<<10, g.mr.Key)
		})
	}
	b.Run("engine/64KiB", func(b *testing.B) {
		// Two engine devices on one wall clock, joined by a function call: the engine's work
		// with no device model and no transport around it.
		clock := emu.NewWallClock()
		var devA, devB *emu.Device
		devA = emu.NewDevice(emu.DeviceConfig{Name: "A", Clock: clock, IP: netip.MustParseAddr("192.0.2.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1},
			Resolve: func(netip.Addr) ([6]byte, bool) { return [6]byte{2, 0, 0, 0, 0, 2}, true }})
		devB = emu.NewDevice(emu.DeviceConfig{Name: "B", Clock: clock, IP: netip.MustParseAddr("192.0.2.2"), MAC: [6]byte{2, 0, 0, 0, 0, 2},
			Resolve: func(netip.Addr) ([6]byte, bool) { return [6]byte{2, 0, 0, 0, 0, 1}, true }})
		devA.Attach(callLink{to: devB})
		devB.Attach(callLink{to: devA})
		qa, cqa, mra := enginePeer(b, devA)
		qb, _, mrb := enginePeer(b, devB)
		must(b, emu.ConnectRC(qa, qb, emu.ConnectOptions{MTU: emu.MTU4096}))
		b.SetBytes(size)
		wc := make([]emu.WC, 1)
		posted := 0
		for b.Loop() {
			wr := emu.SendWR{ID: uint64(posted), Opcode: emu.WRRDMAWrite, SGL: []emu.SGE{{Addr: mra.Addr(), Length: size, LKey: mra.LKey()}},
				RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}
			if posted%16 == 15 {
				wr.Flags = emu.SendSignaled
			}
			must(b, qa.PostSend(wr))
			posted++
			if posted%16 == 0 {
				for cqa.Poll(wc) == 0 {
				}
				if wc[0].Status != emu.WCSuccess {
					b.Fatal(fmt.Sprint(wc[0]))
				}
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "WQEs/s")
	})
}

// guestWrites is the benchmark loop: 64 KiB WRITEs from the start of mr to remote through rkey,
// 16 outstanding, one signaled in 16.
func guestWrites(b *testing.B, q *driver.QP, cq *driver.CQ, mr driver.MR, remote uint64, rkey uint32) {
	const size = 64 << 10
	b.SetBytes(size)
	posted := 0
	for b.Loop() {
		wr := driver.SendWR{ID: uint64(posted), Opcode: driver.WRRDMAWrite,
			SGL: []driver.SGE{{Addr: mr.Addr, Length: size, Key: mr.Key}}, RemoteAddr: remote, RKey: rkey}
		if posted%16 == 15 {
			wr.Flags = driver.SendSignaled
		}
		must(b, q.PostSend(wr))
		posted++
		if posted%16 == 0 {
			devscenario.WaitOne(b, cq)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "WQEs/s")
}

// enginePeer makes an RC QP on dev, 128 deep, with a CQ and a 1 MiB MR others may write.
func enginePeer(b *testing.B, dev *emu.Device) (*emu.QP, *emu.CQ, *emu.MR) {
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(256)
	qp, err := pd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: emu.QPCap{MaxSendWR: 128, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(b, err)
	mr, err := pd.RegMR(make([]byte, 1<<20), emu.AccessLocalWrite|emu.AccessRemoteWrite)
	must(b, err)
	return qp, cq, mr
}

// callLink hands a frame straight to the other device, as a wire of zero length would.
type callLink struct{ to *emu.Device }

func (l callLink) Send(frame []byte) error {
	l.to.Receive(frame)
	return nil
}
