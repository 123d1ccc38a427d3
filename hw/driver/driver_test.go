package driver_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/driver"
	"github.com/softirdma/softirdma/hw/vfioserve"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/devscenario"
	"github.com/softirdma/softirdma/internal/lockedbuf"
	"github.com/softirdma/softirdma/internal/loophosts"
	"github.com/softirdma/softirdma/internal/vfiobus"
)

// clientBus is the in-process transport: the function behind a vfio-user server on one end of
// a socketpair, the client QEMU would be on the other, guest RAM a memfd both map. With sim,
// the function's engine runs on the simulator's virtual clock, driven by the driver's own
// waiting: every read of guest memory (a poll of a CQ or EQ ring) first runs what is due.
type clientBus struct {
	*vfiobus.Bus
	c   *vfiouser.Client
	ram []byte
	sim *emu.Sim
}

// step runs the simulator until nothing is due, if the function is on one.
func (b *clientBus) step() {
	if b.sim != nil {
		b.sim.RunUntilIdle(0)
	}
}

const ramBase, ramSize = 0x100000, 16 << 20

// inProcess starts the function behind a server and returns a bus to it with ramSize of guest
// RAM at ramBase, bus mastering on. The function runs on a simulator's virtual clock unless set
// gives it another.
func inProcess(t testing.TB, set func(*hw.Config)) *clientBus {
	t.Helper()
	sim := emu.NewSim()
	cfg := hw.Config{Name: "fn", Clock: sim, IP: netip.MustParseAddr("192.0.2.1")}
	if set != nil {
		set(&cfg)
	}
	srv, _, err := vfioserve.New(vfiouser.Config{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, b, err := vfiouser.Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(ctx, a) }()
	c := vfiouser.NewClient(b)
	t.Cleanup(func() { c.Close(); cancel(); <-done })
	bus := &clientBus{Bus: vfiobus.Attach(t, c, ramBase, ramSize), c: c}
	bus.ram = bus.RAM
	bus.sim, _ = cfg.Clock.(*emu.Sim)
	bus.Step = bus.step
	return bus
}

// waitWC polls cq until n completions arrived.
func waitWC(t *testing.T, cq *driver.CQ, n int) []driver.WC {
	t.Helper()
	var got []driver.WC
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < n {
		wcs, err := cq.Poll(n - len(got))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, wcs...)
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions: %+v", len(got), n, got)
		}
	}
	return got
}

// The Go driver over the in-process transport: PD, MR, driver.CQ, two QPs of the function connected
// over its loopback, WRITE, SEND into a posted receive, READ, an atomic, a type 2 window bound
// by a BIND_MW WQE and written through, each checked in guest RAM and in its completion.
func TestDriverInProcess(t *testing.T) {
	lb := newLoopback(t)
	bus, d, pd, mr, cq, q1, q2 := lb.bus, lb.d, lb.pd, lb.mr, lb.cq, lb.q1, lb.q2
	src, dst := mr.Addr, mr.Addr+8192
	pattern := make([]byte, 3000)
	for i := range pattern {
		pattern[i] = byte(i*13 + 1)
	}
	must(t, bus.WriteMem(src, pattern))
	must(t, q2.PostRecv(50, driver.SGE{Addr: dst + 4096, Length: 3000, Key: mr.Key}))
	must(t, q1.PostSend(
		driver.SendWR{ID: 1, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled, SGL: []driver.SGE{{Addr: src, Length: 3000, Key: mr.Key}}, RemoteAddr: dst, RKey: mr.Key},
		driver.SendWR{ID: 2, Opcode: driver.WRSendWithImm, Flags: driver.SendSignaled, Imm: 0x01020304, SGL: []driver.SGE{{Addr: src, Length: 3000, Key: mr.Key}}},
		driver.SendWR{ID: 3, Opcode: driver.WRAtomicFetchAndAdd, Flags: driver.SendSignaled, SGL: []driver.SGE{{Addr: src + 4000, Length: 8, Key: mr.Key}},
			RemoteAddr: dst + 3000 + 8, RKey: mr.Key, CompareAdd: 5},
	))
	wcs := waitWC(t, cq, 4)
	byID := map[uint64]driver.WC{}
	for _, wc := range wcs {
		if wc.Status != 0 {
			t.Fatalf("completion %+v", wc)
		}
		byID[wc.WRID] = wc
	}
	if w := byID[50]; w.Opcode != 128 || w.ByteLen != 3000 || w.Imm != 0x01020304 || w.QPNum != q2.Num {
		t.Fatalf("receive completion %+v", w)
	}
	got := make([]byte, 3000)
	must(t, bus.ReadMem(dst, got))
	if !bytes.Equal(got, pattern) {
		t.Fatal("the WRITE did not land")
	}
	must(t, bus.ReadMem(dst+4096, got))
	if !bytes.Equal(got, pattern) {
		t.Fatal("the SEND did not land")
	}
	var word [8]byte
	must(t, bus.ReadMem(dst+3008, word[:]))
	if binary.LittleEndian.Uint64(word[:]) != 5 {
		t.Fatalf("fetch-and-add left %d", binary.LittleEndian.Uint64(word[:]))
	}

	// A type 2 window over the MR's second page, bound by a WQE, then written through.
	mw, err := d.AllocMW(pd, abi.STagMWType2B)
	if err != nil {
		t.Fatal(err)
	}
	newKey := mw&^0xff | (mw+1)&0xff
	must(t, q2.PostSend(driver.SendWR{ID: 60, Opcode: driver.WRBindMW, Flags: driver.SendSignaled,
		Bind: driver.Bind{MWRKey: mw, NewRKey: newKey, MRLKey: mr.Key, Addr: mr.Addr + 4096, Length: 4096, Access: 2}}))
	waitWC(t, cq, 1)
	must(t, q1.PostSend(driver.SendWR{ID: 61, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled | driver.SendInline, Inline: []byte("through the window"),
		RemoteAddr: mr.Addr + 4096, RKey: newKey}))
	if w := waitWC(t, cq, 1)[0]; w.WRID != 61 || w.Status != 0 {
		t.Fatalf("WRITE through the window %+v", w)
	}
	got = got[:18]
	must(t, bus.ReadMem(mr.Addr+4096, got))
	if string(got) != "through the window" {
		t.Fatalf("window write landed as %q", got)
	}
	// The MR cannot go while the window is bound: EBUSY, as the verbs API says.
	if err := d.DeallocSTag(mr.Key); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("dereg with a window bound: %v", err)
	}
}

// loopback is two QPs of one function connected to each other over its loopback through the
// driver, one CQ for both, and an MR of 16 KiB that every operation may target.
type loopback struct {
	bus    *clientBus
	d      *driver.Driver
	pd     uint32
	mr     driver.MR
	cq     *driver.CQ
	q1, q2 *driver.QP
}

// ibv_access_flags: LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND,
// FLUSH_GLOBAL, FLUSH_PERSISTENT.
const allAccess = 1 | 2 | 4 | 8 | 16 | 1<<8 | 1<<9

func newLoopback(t *testing.T) *loopback {
	t.Helper()
	lb := &loopback{bus: inProcess(t, nil)}
	var err error
	lb.d, err = driver.Open(lb.bus, driver.Arena{Base: ramBase, Size: ramSize})
	must(t, err)
	lb.pd, err = lb.d.AllocPD()
	must(t, err)
	lb.mr, err = lb.d.RegMR(lb.pd, 16384, allAccess)
	must(t, err)
	lb.cq, err = lb.d.CreateCQ(7, nil)
	must(t, err)
	caps := driver.QPCaps{SendLog: 5, RecvLog: 4, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}
	lb.q1, err = lb.d.CreateQP(lb.pd, lb.cq, lb.cq, caps)
	must(t, err)
	lb.q2, err = lb.d.CreateQP(lb.pd, lb.cq, lb.cq, caps)
	must(t, err)
	connect(t, lb.q1, lb.q2)
	connect(t, lb.q2, lb.q1)
	return lb
}

// connect takes q through INIT and RTR to RTS towards peer, a QP of the same function, granting
// every remote right (ATOMIC_WRITE needs REMOTE_WRITE, FLUSH its placement types').
func connect(t *testing.T, q, peer *driver.QP) {
	t.Helper()
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1} // the function's default address
	toRTS(t, q, peer.Num, gid, allAccess&^(1|16))
}

// toRTS takes q through INIT (granting the remote rights access) and RTR (towards QP destQPN at
// GID dgid, 1024-byte path MTU) to RTS (timeout 14, seven retries).
func toRTS(t testing.TB, q *driver.QP, destQPN uint32, dgid [16]byte, access uint32) {
	t.Helper()
	toRTSMTU(t, q, destQPN, dgid, access, emu.MTU1024)
}

// toRTSMTU is toRTS with a path MTU of its own.
func toRTSMTU(t testing.TB, q *driver.QP, destQPN uint32, dgid [16]byte, access uint32, mtu emu.MTU) {
	t.Helper()
	must(t, q.Modify(driver.QPAttr{State: 1, PortNum: 1, AccessFlags: access}, 1|8|16|32))
	must(t, q.Modify(driver.QPAttr{State: 2, PathMTU: uint8(mtu), DestQPN: destQPN, MaxDestRdAtomic: 4, MinRNRTimer: 12, HopLimit: 64, DGID: dgid},
		1|128|256|1<<20|1<<12|1<<17|1<<15))
	must(t, q.Modify(driver.QPAttr{State: 3, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}, 1|1<<16|1<<9|1<<10|1<<11|1<<13))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The key-space scenario (internal/devscenario) over the in-process transport: the same
// vfio-user messages QEMU sends, the function's engine and a softirdma peer on a simulated link
// running on virtual time, completion events as MSI-X eventfd signals.
func TestKeySpaceScenarioInProcess(t *testing.T) {
	sim := emu.NewSim()
	fab := emu.NewFabric(sim, 7)
	var pcap lockedbuf.Buffer // the server's goroutine sends too
	must(t, fab.CapturePcap(&pcap))
	peer := fab.AddDeviceAt("peer", [6]byte{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("192.0.2.2"), emu.LinkConfig{})
	bus := inProcess(t, func(c *hw.Config) {
		c.Clock = sim
		c.Engine = func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *emu.Device {
			dev := fab.AddDeviceAt("fn", mac, ip, emu.LinkConfig{})
			dev.SetAddresses(mac, ip, ips)
			return dev
		}
	})
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	const vector = 1
	must(t, bus.c.SetIRQEventfds(vfiouser.PCIMSIXIRQ, vector, []int{efd}))
	d, err := driver.Open(bus, driver.Arena{Base: ramBase, Size: ramSize})
	must(t, err)
	var counter [8]byte
	devscenario.Run(t, devscenario.Env{Driver: d, Pcap: pcap.Bytes, Vector: vector, Peer: peer,
		PeerIP: netip.MustParseAddr("::ffff:192.0.2.2"), FunctionIP: netip.MustParseAddr("192.0.2.1"),
		Step:  bus.step,
		Armed: func() { _, _ = unix.Read(efd, counter[:]) },
		Wait: func() error {
			// The doorbell reaches the server on its own goroutine: run the clock until the
			// event's signal is there.
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				bus.step()
				fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
				if n, _ := unix.Poll(fds, 1); n == 1 {
					_, _ = unix.Read(efd, counter[:])
					return nil
				}
			}
			return errors.New("no MSI-X signal in 30 s")
		}})
}

// DMA_UNMAP of the guest RAM an MR and the QP's rings use, sent as QEMU sends it while a peer
// streams WRITEs into the MR: the function's QP fails with its rings (a QP in ERR answers
// nothing), so the peer's WRITEs after it end in RETRY_EXC_ERR (or REM_ACCESS_ERR, had one met
// the revoked MR first), then flushes; the memory is not touched once the unmap is answered,
// nothing crashes, and the server goes on answering.
func TestDMAUnmapMidTraffic(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 9)
	bus := inProcess(t, func(c *hw.Config) {
		c.Clock = emu.NewWallClock() // the engine is a host's, on real sockets
		c.MAC = hs.Device().MAC()
		c.Engine = func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *emu.Device { return hs.Rebind(mac, ip, ips) }
	})
	d, err := driver.Open(bus, driver.Arena{Base: ramBase, Size: ramSize})
	must(t, err)
	pd, err := d.AllocPD()
	must(t, err)
	mr, err := d.RegMR(pd, 1<<20, 1|2)
	must(t, err)
	cq, err := d.CreateCQ(6, nil)
	must(t, err)
	q, err := d.CreateQP(pd, cq, cq, driver.QPCaps{SendLog: 4, RecvLog: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	must(t, err)

	peer := hc.Device()
	ppd, _ := peer.AllocPD()
	pcq, _ := peer.CreateCQ(256)
	pqp, err := ppd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: pcq, RecvCQ: pcq, Cap: emu.QPCap{MaxSendWR: 256, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	src := bytes.Repeat([]byte{0x77}, 4096)
	pmr, err := ppd.RegMR(src, emu.AccessLocalWrite)
	must(t, err)
	toRTS(t, q, pqp.Num(), netip.MustParseAddr("::ffff:192.0.2.2").As16(), 2)
	must(t, pqp.Modify(emu.QPAttr{State: emu.QPSInit, Port: 1}, emu.AttrState|emu.AttrPKeyIndex|emu.AttrPort|emu.AttrAccessFlags))
	must(t, pqp.Modify(emu.QPAttr{State: emu.QPSRTR, AH: emu.AHAttr{DGID: netip.MustParseAddr("192.0.2.1"), HopLimit: 64},
		PathMTU: emu.MTU1024, DestQPN: q.Num, MaxDestRdAtomic: 4, MinRNRTimer: 12},
		emu.AttrState|emu.AttrAV|emu.AttrPathMTU|emu.AttrDestQPN|emu.AttrRQPSN|emu.AttrMaxDestRdAtomic|emu.AttrMinRNRTimer))
	must(t, pqp.Modify(emu.QPAttr{State: emu.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
		emu.AttrState|emu.AttrSQPSN|emu.AttrTimeout|emu.AttrRetryCnt|emu.AttrRNRRetry|emu.AttrMaxQPRdAtomic))

	const writes = 128
	for i := range writes {
		must(t, pqp.PostSend(emu.SendWR{ID: uint64(i), Opcode: emu.WRRDMAWrite, Flags: emu.SendSignaled,
			SGL: []emu.SGE{{Addr: pmr.Addr(), Length: 4096, LKey: pmr.LKey()}}, RemoteAddr: mr.Addr + uint64(i%256)*4096, RKey: mr.Key}))
	}
	// Unmap once the first completions are in.
	var wcs []emu.WC
	for len(wcs) < 4 {
		wcs = append(wcs, devscenario.WaitPeer(t, pcq))
	}
	must(t, bus.c.DMAUnmap(ramBase, ramSize, false))
	before := bytes.Clone(bus.ram)
	// The WRITEs still in flight may all have landed before the unmap (the machine is busy,
	// the ACKs come coalesced); one posted after it is answered must be refused.
	must(t, pqp.PostSend(emu.SendWR{ID: writes, Opcode: emu.WRRDMAWrite, Flags: emu.SendSignaled,
		SGL: []emu.SGE{{Addr: pmr.Addr(), Length: 4096, LKey: pmr.LKey()}}, RemoteAddr: mr.Addr, RKey: mr.Key}))
	for len(wcs) < writes+1 {
		wcs = append(wcs, devscenario.WaitPeer(t, pcq))
	}
	ok := 0
	for ok < len(wcs) && wcs[ok].Status == emu.WCSuccess {
		ok++
	}
	if ok == writes+1 || wcs[ok].Status != emu.WCRetryExcErr && wcs[ok].Status != emu.WCRemAccessErr {
		t.Fatalf("after %d successes: %+v, want RETRY_EXC_ERR or REM_ACCESS_ERR", ok, wcs[min(ok, writes)])
	}
	for _, wc := range wcs[ok+1:] {
		if wc.Status != emu.WCWRFlushErr {
			t.Fatalf("after the refusal: %+v, want WR_FLUSH_ERR", wc)
		}
	}
	if !bytes.Equal(bus.ram, before) {
		t.Fatal("guest memory changed after DMA_UNMAP was answered")
	}
	// The server goes on answering.
	if _, err := bus.c.GetDeviceInfo(); err != nil {
		t.Fatal(err)
	}
}
