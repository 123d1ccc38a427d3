package qtest

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/driver"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// qtestBus is the driver's transport through QEMU under qtest: BAR registers as MMIO, guest
// memory through qtest's memory commands, every access crossing QEMU's vfio-user client.
type qtestBus struct {
	m    *Machine
	bars [6]BAR
}

func (b qtestBus) ReadReg(bar int, off uint32) (uint32, error) {
	return b.m.Readl(b.bars[bar].Addr + uint64(off))
}
func (b qtestBus) WriteReg(bar int, off uint32, v uint32) error {
	return b.m.Writel(b.bars[bar].Addr+uint64(off), v)
}
func (b qtestBus) ReadMem(addr uint64, p []byte) error  { return b.m.Read(addr, p) }
func (b qtestBus) WriteMem(addr uint64, p []byte) error { return b.m.Write(addr, p) }

// The key-space story through a real QEMU 11.1: the Go driver over qtest drives the function
// served by hw/vfiouser, whose engine stands on a UDP link (QEMU -netdev dgram's kind) to a
// softirdma peer. A type 2 window bound by a BIND_MW WQE is written through by the peer; the
// guest's LOCAL_INV makes the next WRITE fail REM_ACCESS_ERR; a rebind with a new key8 works
// again; the peer's SEND_WITH_INV invalidates it remotely. Completion events arrive as MSI-X
// writes into guest RAM.
func TestQEMUKeySpaceScenario(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 7)
	dir := shortDir(t)
	sock := filepath.Join(dir, "dev.sock")
	srv, _, err := vfiouser.NewFunction(vfiouser.Config{SocketPath: sock}, hw.Config{Name: "fn", Clock: emu.NewWallClock(),
		IP: netip.MustParseAddr("192.0.2.1"), MAC: hs.Device().MAC(),
		Engine: func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *emu.Device { return hs.Rebind(mac, ip, ips) }})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(srv.Listen())
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-served })
	m := startQEMU(t, Config{Dir: dir, Devices: []string{fmt.Sprintf(`{"driver":"vfio-user-pci","socket":{"path":%q,"type":"unix"}}`, sock)}})

	fn, err := NewPCI(m).Find(0, abi.PCIVendorID, abi.PCIDeviceID)
	must(err)
	bars, err := fn.AssignBARs()
	must(err)
	must(fn.Enable(false))
	x, err := fn.MSIX()
	must(err)
	must(x.Setup(bars))
	const msiAddr, msiData = 0x5000, 0x5eed
	must(x.SetVector(m, 1, msiAddr, msiData, false))
	must(fn.EnableMSIX(&x, true))

	d, err := driver.Open(qtestBus{m: m, bars: bars}, driver.Arena{Base: 0x200000, Size: 8 << 20})
	must(err)
	eq, err := d.CreateEQ(4, abi.EQCompletion, 1)
	must(err)
	cq, err := d.CreateCQ(6, eq)
	must(err)
	pd, err := d.AllocPD()
	must(err)
	mr, err := d.RegMR(pd, 8192, 1|2|4|8|16)
	must(err)
	q, err := d.CreateQP(pd, cq, cq, driver.QPCaps{SendLog: 4, RecvLog: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64})
	must(err)

	peer := hc.Device()
	ppd, _ := peer.AllocPD()
	pcq, _ := peer.CreateCQ(64)
	src := make([]byte, 256)
	for i := range src {
		src[i] = byte(i ^ 0x5a)
	}
	pmr, err := ppd.RegMR(src, emu.AccessLocalWrite)
	must(err)
	var pqp *emu.QP
	// connect makes a fresh peer QP and takes both through INIT, RTR, RTS (again after an error).
	connect := func() {
		t.Helper()
		var err error
		pqp, err = ppd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: pcq, RecvCQ: pcq, Cap: emu.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(err)
		must(q.Modify(driver.QPAttr{State: 0}, 1))
		must(q.Modify(driver.QPAttr{State: 1, PortNum: 1, AccessFlags: 2 | 4 | 8}, 1|8|16|32))
		gid := netip.MustParseAddr("::ffff:192.0.2.2").As16()
		must(q.Modify(driver.QPAttr{State: 2, PathMTU: 3, DestQPN: pqp.Num(), MaxDestRdAtomic: 4, MinRNRTimer: 12, HopLimit: 64, DGID: gid},
			1|128|256|1<<20|1<<12|1<<17|1<<15))
		must(q.Modify(driver.QPAttr{State: 3, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}, 1|1<<16|1<<9|1<<10|1<<11|1<<13))
		must(pqp.Modify(emu.QPAttr{State: emu.QPSInit, Port: 1, AccessFlags: emu.AccessRemoteWrite}, emu.AttrState|emu.AttrPKeyIndex|emu.AttrPort|emu.AttrAccessFlags))
		must(pqp.Modify(emu.QPAttr{State: emu.QPSRTR, AH: emu.AHAttr{DGID: netip.MustParseAddr("192.0.2.1"), HopLimit: 64},
			PathMTU: emu.MTU1024, DestQPN: q.Num, MaxDestRdAtomic: 4, MinRNRTimer: 12},
			emu.AttrState|emu.AttrAV|emu.AttrPathMTU|emu.AttrDestQPN|emu.AttrRQPSN|emu.AttrMaxDestRdAtomic|emu.AttrMinRNRTimer))
		must(pqp.Modify(emu.QPAttr{State: emu.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			emu.AttrState|emu.AttrSQPSN|emu.AttrTimeout|emu.AttrRetryCnt|emu.AttrRNRRetry|emu.AttrMaxQPRdAtomic))
	}
	connect()

	// guestDone arms the CQ, waits for the MSI-X write its event makes, and returns the CQE.
	armed := func() {
		t.Helper()
		must(m.Writel(msiAddr, 0))
		must(d.Arm(cq, false))
	}
	guestDone := func() driver.WC {
		t.Helper()
		wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer wcancel()
		must(m.WaitL(wctx, msiAddr, msiData))
		ev, err := eq.Poll()
		must(err)
		if len(ev) == 0 || ev[0].Num != cq.Num {
			t.Fatalf("EQ entries %v", ev)
		}
		wcs, err := cq.Poll(1)
		must(err)
		if len(wcs) != 1 {
			t.Fatal("an event without its completion")
		}
		return wcs[0]
	}
	// peerWrite RDMA-WRITEs 64 bytes through rkey into the window and returns the peer's status.
	peerWrite := func(rkey uint32) emu.WCStatus {
		t.Helper()
		must(pqp.PostSend(emu.SendWR{ID: 7, Opcode: emu.WRRDMAWrite, Flags: emu.SendSignaled,
			SGL: []emu.SGE{{Addr: pmr.Addr(), Length: 64, LKey: pmr.LKey()}}, RemoteAddr: mr.Addr + 4096, RKey: rkey}))
		wc := make([]emu.WC, 1)
		deadline := time.Now().Add(30 * time.Second)
		for pcq.Poll(wc) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the peer's WRITE did not complete")
			}
			time.Sleep(time.Millisecond)
		}
		return wc[0].Status
	}
	bind := func(mw, key uint32) {
		t.Helper()
		armed()
		must(q.PostSend(driver.SendWR{ID: 60, Opcode: driver.WRBindMW, Flags: driver.SendSignaled,
			Bind: driver.Bind{MWRKey: mw, NewRKey: key, MRLKey: mr.Key, Addr: mr.Addr + 4096, Length: 4096, Access: 2}}))
		if wc := guestDone(); wc.WRID != 60 || wc.Status != 0 {
			t.Fatalf("bind completion %+v", wc)
		}
	}

	mw, err := d.AllocMW(pd, abi.STagMWType2B)
	must(err)
	key1 := mw&^0xff | (mw+1)&0xff
	bind(mw, key1)
	if st := peerWrite(key1); st != emu.WCSuccess {
		t.Fatalf("WRITE through the bound window: %s", st)
	}
	got := make([]byte, 64)
	must(m.Read(mr.Addr+4096, got))
	if string(got) != string(src[:64]) {
		t.Fatalf("guest RAM after the peer's WRITE: % x", got[:8])
	}

	// LOCAL_INV by the guest; the next WRITE is refused.
	armed()
	must(q.PostSend(driver.SendWR{ID: 61, Opcode: driver.WRLocalInv, Flags: driver.SendSignaled, Imm: key1}))
	if wc := guestDone(); wc.WRID != 61 || wc.Status != 0 {
		t.Fatalf("LOCAL_INV completion %+v", wc)
	}
	if st := peerWrite(key1); st != emu.WCRemAccessErr {
		t.Fatalf("WRITE after LOCAL_INV: %s, want REM_ACCESS_ERR", st)
	}

	// A rebind with a new key8 works again (the refusal failed both QPs: they start over).
	connect()
	key2 := mw&^0xff | (mw+2)&0xff
	bind(mw, key2)
	if st := peerWrite(key2); st != emu.WCSuccess {
		t.Fatalf("WRITE after the rebind: %s", st)
	}

	// SEND_WITH_INV from the peer invalidates the window remotely; the guest's receive says so.
	armed()
	must(q.PostRecv(70, driver.SGE{Addr: mr.Addr, Length: 256, Key: mr.Key}))
	must(pqp.PostSend(emu.SendWR{ID: 8, Opcode: emu.WRSendWithInv, Imm: key2, SGL: []emu.SGE{{Addr: pmr.Addr(), Length: 16, LKey: pmr.LKey()}}}))
	if wc := guestDone(); wc.WRID != 70 || wc.Status != 0 || wc.Flags&8 == 0 || wc.Imm != key2 {
		t.Fatalf("receive of SEND_WITH_INV %+v", wc)
	}
	if st := peerWrite(key2); st != emu.WCRemAccessErr {
		t.Fatalf("WRITE after SEND_WITH_INV: %s, want REM_ACCESS_ERR", st)
	}
}
