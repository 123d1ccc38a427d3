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
	"github.com/softirdma/softirdma/internal/devscenario"
	"github.com/softirdma/softirdma/internal/lockedbuf"
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

// The key-space scenario (internal/devscenario) through a real QEMU 11.1: the Go driver over
// qtest drives the function served by hw/vfiouser, whose engine stands on a UDP link (QEMU
// -netdev dgram's kind) to a softirdma peer; completion events arrive as MSI-X writes into
// guest RAM.
func TestQEMUKeySpaceScenario(t *testing.T) {
	var pcap lockedbuf.Buffer
	hs, hc := loophosts.PairPcap(t, 0, 7, &pcap)
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
	devscenario.Run(t, devscenario.Env{Driver: d, Pcap: &pcap, Vector: 1, Peer: hc.Device(),
		PeerIP: netip.MustParseAddr("::ffff:192.0.2.2"), FunctionIP: netip.MustParseAddr("192.0.2.1"),
		Armed: func() { must(m.Writel(msiAddr, 0)) },
		Wait: func() error {
			wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer wcancel()
			return m.WaitL(wctx, msiAddr, msiData)
		}})
}
