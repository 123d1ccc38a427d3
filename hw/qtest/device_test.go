package qtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/driver"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/devscenario"
)

// The softirdma function served over vfio-user to a real QEMU 11.1, driven through QEMU's MMIO
// and memory as a driver would: found on the bus by its IDs, BARs assigned, MSI-X vector 0
// pointed into guest RAM; the control queue in guest RAM allocates a PD and registers an MR
// from a page list, and each completion arrives as the MSI-X write.
func TestQEMUDrivesTheFunction(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "dev.sock")
	srv, f, err := vfiouser.NewFunction(vfiouser.Config{SocketPath: sock}, hw.Config{Name: "fn", Clock: emu.NewWallClock()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-served })

	m := startQEMU(t, Config{Dir: dir, Devices: []string{fmt.Sprintf(`{"driver":"vfio-user-pci","socket":{"path":%q,"type":"unix"}}`, sock)}})
	p := NewPCI(m)
	fn, err := p.Find(0, abi.PCIVendorID, abi.PCIDeviceID)
	if err != nil {
		t.Fatalf("the function is not on the bus: %v\n%s", err, m.Stderr())
	}
	class, _ := fn.ConfigRead32(0x08)
	if class>>8 != abi.PCIClassCode {
		t.Fatalf("class 0x%06x", class>>8)
	}
	bars, err := fn.AssignBARs()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{abi.BARRegs, abi.BARDoorbell, abi.MSIXBar} {
		if bars[i].Size == 0 || bars[i].IO {
			t.Fatalf("BAR %d: %+v", i, bars[i])
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fn.Enable(false))
	x, err := fn.MSIX()
	must(err)
	must(x.Setup(bars))
	const msiAddr, msiData = 0x5000, 0xabcd
	must(m.Memset(msiAddr, 4, 0))
	must(x.SetVector(m, 0, msiAddr, msiData, false))
	must(fn.EnableMSIX(&x, true))

	regs := bars[abi.BARRegs].Addr
	if v, err := m.Readl(regs + abi.RegMagic); err != nil || v != abi.MagicValue {
		t.Fatalf("magic 0x%x %v", v, err)
	}
	const ctrlQ = 0x100000
	must(m.Memset(ctrlQ, 4096, 0))
	must(m.Writel(regs+abi.RegCtrlQBaseL, ctrlQ))
	must(m.Writel(regs+abi.RegCtrlQLog, 3))
	must(m.Writel(regs+abi.RegDevCtrl, abi.DevCtrlEnable))
	if v, _ := m.Readl(regs + abi.RegDevStatus); v != abi.DevStatusReady {
		t.Fatalf("status 0x%x", v)
	}
	// command runs one control command and waits for its completion's MSI-X write.
	prod := uint32(0)
	command := func(op uint16, args []byte) (uint32, uint32) {
		t.Helper()
		e := make([]byte, abi.CtrlEntrySize)
		binary.LittleEndian.PutUint16(e[abi.CtrlOpcode:], op)
		copy(e[abi.CtrlArgs:], args)
		at := uint64(ctrlQ + prod*abi.CtrlEntrySize)
		must(m.Write(at, e))
		must(m.Writel(msiAddr, 0))
		prod = (prod + 1) & 7
		must(m.Writel(regs+abi.RegCtrlQProd, prod))
		wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer wcancel()
		if err := m.WaitL(wctx, msiAddr, msiData); err != nil {
			t.Fatalf("no MSI-X write for command 0x%x: %v", op, err)
		}
		st, _ := m.Readl(at + abi.CtrlStatus)
		res, _ := m.Readl(at + abi.CtrlResult)
		return st, res
	}
	st, pdn := command(abi.OpAllocPD, nil)
	if st != abi.CtrlDone || pdn != 1 {
		t.Fatalf("ALLOC_PD: status 0x%x, PD %d", st, pdn)
	}
	// An MR over two pages of guest RAM, listed in a page at 0x110000.
	must(m.Writeq(0x110000, 0x120000))
	must(m.Writeq(0x110008, 0x121000))
	args := make([]byte, abi.RegMRPages+abi.PageListSize)
	binary.LittleEndian.PutUint32(args[abi.RegMRPD:], pdn)
	binary.LittleEndian.PutUint32(args[abi.RegMRAccess:], uint32(emu.AccessLocalWrite|emu.AccessRemoteWrite))
	binary.LittleEndian.PutUint64(args[abi.RegMRIOVA:], 0x7000_0000)
	binary.LittleEndian.PutUint64(args[abi.RegMRLength:], 8192)
	binary.LittleEndian.PutUint64(args[abi.RegMRPages+abi.PLAddr:], 0x110000)
	binary.LittleEndian.PutUint32(args[abi.RegMRPages+abi.PLPages:], 2)
	args[abi.RegMRPages+abi.PLShift], args[abi.RegMRPages+abi.PLLevels] = 12, 1
	st, stag := command(abi.OpRegMR, args)
	if st != abi.CtrlDone {
		t.Fatalf("REG_MR: status 0x%x", st)
	}
	if mr, ok := f.Device().MR(stag); !ok || mr.Len() != 8192 {
		t.Fatalf("MR 0x%x not in the engine", stag)
	}
}

// QEMU killed in the middle of driving the function, 50 times in a row: the server serves the
// next QEMU each time, the function starts each one at power-on, and neither descriptors nor
// goroutines grow.
func TestQEMUKilledMidTraffic(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "dev.sock")
	srv, _, err := vfiouser.NewFunction(vfiouser.Config{SocketPath: sock}, hw.Config{Name: "fn", Clock: emu.NewWallClock()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() { cancel(); <-served }()
	qemu := qemuBinary(t)
	round := func(i int) {
		t.Helper()
		mctx, mcancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer mcancel()
		m, err := Start(mctx, Config{QEMU: qemu, Dir: dir, Devices: []string{fmt.Sprintf(`{"driver":"vfio-user-pci","socket":{"path":%q,"type":"unix"}}`, sock)}})
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		defer m.Close()
		fn, err := NewPCI(m).Find(0, abi.PCIVendorID, abi.PCIDeviceID)
		if err != nil {
			t.Fatalf("round %d: %v\n%s", i, err, m.Stderr())
		}
		bars, err := fn.AssignBARs()
		if err != nil {
			t.Fatal(err)
		}
		if err := fn.Enable(false); err != nil {
			t.Fatal(err)
		}
		regs := bars[abi.BARRegs].Addr
		// Each QEMU finds the function at power-on, whatever the last one left.
		if st, _ := m.Readl(regs + abi.RegDevStatus); st != 0 {
			t.Fatalf("round %d: status 0x%x at start", i, st)
		}
		_ = m.Memset(0x100000, 4096, 0)
		_ = m.Writel(regs+abi.RegCtrlQBaseL, 0x100000)
		_ = m.Writel(regs+abi.RegCtrlQLog, 3)
		_ = m.Writel(regs+abi.RegDevCtrl, abi.DevCtrlEnable)
		// Commands in flight when QEMU dies: posted doorbells, no waiting.
		for k := 0; k < 5; k++ {
			_ = m.Writew(0x100000+uint64(k)*abi.CtrlEntrySize, abi.OpAllocPD)
		}
		_ = m.Writel(regs+abi.RegCtrlQProd, 5)
		// Close kills QEMU (SIGKILL) without a word to the server.
	}
	round(0) // warm up: lasting threads and pollers of the runtime
	fds, gs := countFDs(t), runtime.NumGoroutine()
	for i := 1; i <= 50; i++ {
		round(i)
	}
	round(51)
	settled(t, fds, gs)
}

// BenchmarkQEMUDoorbellToCompletion is BenchmarkDoorbellToCompletion of hw/driver through a real
// QEMU 11.1 under qtest: the WQE written into guest RAM and the doorbell written to BAR 2 by qtest
// commands, crossing QEMU's vfio-user client; the completion polled in guest RAM.
func BenchmarkQEMUDoorbellToCompletion(b *testing.B) {
	dir := shortDir(b)
	sock := filepath.Join(dir, "dev.sock")
	srv, _, err := vfiouser.NewFunction(vfiouser.Config{SocketPath: sock}, hw.Config{Name: "fn", Clock: emu.NewWallClock(),
		IP: netip.MustParseAddr("192.0.2.1")})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	b.Cleanup(func() { cancel(); <-served })
	m := startQEMU(b, Config{Dir: dir, Devices: []string{fmt.Sprintf(`{"driver":"vfio-user-pci","socket":{"path":%q,"type":"unix"}}`, sock)}})
	fn, err := NewPCI(m).Find(0, abi.PCIVendorID, abi.PCIDeviceID)
	if err != nil {
		b.Fatal(err)
	}
	bars, err := fn.AssignBARs()
	if err != nil {
		b.Fatal(err)
	}
	if err := fn.Enable(false); err != nil {
		b.Fatal(err)
	}
	d, err := driver.Open(qtestBus{m: m, bars: bars}, driver.Arena{Base: 0x200000, Size: 8 << 20})
	if err != nil {
		b.Fatal(err)
	}
	q, cq, mr := devscenario.LoopbackPair(b, d, netip.MustParseAddr("192.0.2.1"))
	for b.Loop() {
		devscenario.DoorbellToCompletion(b, q, cq, mr)
	}
}
