package qtest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/driver"
	"github.com/softirdma/softirdma/hw/vfioserve"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/devscenario"
	"github.com/softirdma/softirdma/internal/lockedbuf"
	"github.com/softirdma/softirdma/internal/loophosts"
	"github.com/softirdma/softirdma/internal/servetest"
	"github.com/softirdma/softirdma/wire/neigh"
	"github.com/softirdma/softirdma/wire/qemu"
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
	serveInProcess(t, sock, hw.Config{Name: "fn", Clock: emu.NewWallClock(),
		IP: netip.MustParseAddr("192.0.2.1"), MAC: hs.Device().MAC(),
		Engine: func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *emu.Device { return hs.Rebind(mac, ip, ips) }})
	env := withDriver(t, dir, sock)
	env.Peer, env.Pcap = hc.Device(), pcap.Bytes
	devscenario.Run(t, env)
}

// The key-space scenario with the device in its own process: `softirdma serve` on a UDP link
// (-link dgram, as a QEMU guest's -netdev dgram) to a softirdma peer in the test, QEMU 11.1
// attached to serve's socket, the Go driver over qtest; serve's -pcap of the link decodes clean.
func TestQEMUServeKeySpaceScenario(t *testing.T) {
	qemuBinary(t) // skips early where QEMU is not provisioned
	dir := shortDir(t)
	// The peer's end of the link, and a free port for serve's.
	link, err := qemu.ListenDgram("127.0.0.1:0", "127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	servePort := probe.LocalAddr().(*net.UDPAddr).Port
	probe.Close()
	if err := link.SetRemote(fmt.Sprintf("127.0.0.1:%d", servePort)); err != nil {
		t.Fatal(err)
	}
	peerMAC := [6]byte{2, 0, 0, 0, 0, 2}
	peer, err := emu.NewHost(emu.HostConfig{Name: "peer", Link: link, MAC: peerMAC, IP: netip.MustParseAddr("192.0.2.2"),
		IPs: []netip.Addr{neigh.LinkLocal(peerMAC)}, Answer: true})
	if err != nil {
		t.Fatal(err)
	}
	go peer.Run()
	t.Cleanup(func() { peer.Close() })

	sock, pcapFile := filepath.Join(dir, "dev.sock"), filepath.Join(dir, "link.pcap")
	startServe(t, dir, sock, "-link", fmt.Sprintf("dgram:127.0.0.1:%d,%s", servePort, link.LocalAddr()), "-ip", "192.0.2.1", "-pcap", pcapFile)
	env := withDriver(t, dir, sock)
	env.Peer = peer.Device()
	env.Pcap = func() []byte {
		b, err := os.ReadFile(pcapFile)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	devscenario.Run(t, env)
}

// startServe builds softirdma into dir and runs `softirdma serve -socket sock` with args as a
// process of its own, until it listens. When the test ends (or the test calls its Stop), serve
// is stopped and checked to exit with status 0 and remove its socket.
func startServe(t *testing.T, dir, sock string, args ...string) *servetest.Process {
	t.Helper()
	bin := filepath.Join(dir, "softirdma")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/softirdma/softirdma/cmd/softirdma").CombinedOutput(); err != nil {
		t.Fatalf("building softirdma: %v\n%s", err, out)
	}
	return servetest.Start(t, exec.Command(bin, append([]string{"serve", "-socket", sock}, args...)...), sock)
}

// withDriver starts QEMU with the function served on sock, finds it, assigns its BARs, points
// MSI-X vector 1 at msiAddr in guest RAM and opens the Go driver over qtest. It returns the
// scenario's Env with the driver and the MSI-X wait filled in.
func withDriver(t *testing.T, dir, sock string) devscenario.Env {
	t.Helper()
	m := startQEMU(t, Config{Dir: dir, Devices: []string{vfioUserDevice(sock)}})
	fn, bars := enabledFunction(t, m)
	x, err := fn.MSIX()
	if err != nil {
		t.Fatal(err)
	}
	const msiAddr, msiData = 0x5000, 0x5eed
	for _, err := range []error{x.Setup(bars), x.SetVector(m, 1, msiAddr, msiData, false), fn.EnableMSIX(&x, true)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return devscenario.Env{Driver: openDriver(t, m, bars), Vector: 1,
		PeerIP: netip.MustParseAddr("::ffff:192.0.2.2"), FunctionIP: netip.MustParseAddr("192.0.2.1"),
		Armed: func() {
			if err := m.Writel(msiAddr, 0); err != nil {
				t.Fatal(err)
			}
		},
		Wait: func() error {
			wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer wcancel()
			return m.WaitL(wctx, msiAddr, msiData)
		}}
}

// vfioUserDevice is the -device argument that attaches the function served on sock.
func vfioUserDevice(sock string) string {
	return fmt.Sprintf(`{"driver":"vfio-user-pci","socket":{"path":%q,"type":"unix"}}`, sock)
}

// enabledFunction finds the function on m's bus, assigns its BARs and turns on its memory
// decoding and bus mastering.
func enabledFunction(tb testing.TB, m *Machine) (*Function, [6]BAR) {
	tb.Helper()
	fn, err := NewPCI(m).Find(0, abi.PCIVendorID, abi.PCIDeviceID)
	if err != nil {
		tb.Fatalf("the function is not on the bus: %v\n%s", err, m.Stderr())
	}
	bars, err := fn.AssignBARs()
	if err != nil {
		tb.Fatal(err)
	}
	if err := fn.Enable(false); err != nil {
		tb.Fatal(err)
	}
	return fn, bars
}

// openDriver opens the Go driver on the function over qtest, its arena the 8 MiB of guest RAM
// from 2 MiB.
func openDriver(tb testing.TB, m *Machine, bars [6]BAR) *driver.Driver {
	tb.Helper()
	d, err := driver.Open(qtestBus{m: m, bars: bars}, driver.Arena{Base: 0x200000, Size: 8 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// serveInProcess serves the function of fcfg on sock from this process until the test ends.
func serveInProcess(tb testing.TB, sock string, fcfg hw.Config) *hw.Function {
	tb.Helper()
	srv, f, err := vfioserve.New(vfiouser.Config{SocketPath: sock}, fcfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return f
}
