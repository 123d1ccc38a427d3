package qtest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	bin := filepath.Join(dir, "softirdma")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/softirdma/softirdma/cmd/softirdma").CombinedOutput(); err != nil {
		t.Fatalf("building softirdma: %v\n%s", err, out)
	}
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
	serve := exec.Command(bin, "serve", "-socket", sock, "-link", fmt.Sprintf("dgram:127.0.0.1:%d,%s", servePort, link.LocalAddr()),
		"-ip", "192.0.2.1", "-pcap", pcapFile)
	var out, errs lockedbuf.Buffer
	serve.Stdout, serve.Stderr = &out, &errs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("serve exited: %v\n%s", err, errs.String())
		}
	})
	// Wait for the line serve prints once its socket listens.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "listening on") {
		select {
		case err := <-exited:
			t.Fatalf("serve exited: %v\n%s", err, errs.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve is not listening:\n%s", errs.String())
		}
	}

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

// withDriver starts QEMU with the function served on sock, finds it, assigns its BARs, points
// MSI-X vector 1 at msiAddr in guest RAM and opens the Go driver over qtest. It returns the
// scenario's Env with the driver and the MSI-X wait filled in.
func withDriver(t *testing.T, dir, sock string) devscenario.Env {
	t.Helper()
	m := startQEMU(t, Config{Dir: dir, Devices: []string{fmt.Sprintf(`{"driver":"vfio-user-pci","socket":{"path":%q,"type":"unix"}}`, sock)}})
	fn, err := NewPCI(m).Find(0, abi.PCIVendorID, abi.PCIDeviceID)
	if err != nil {
		t.Fatalf("%v\n%s", err, m.Stderr())
	}
	bars, err := fn.AssignBARs()
	if err != nil {
		t.Fatal(err)
	}
	x, err := fn.MSIX()
	if err != nil {
		t.Fatal(err)
	}
	const msiAddr, msiData = 0x5000, 0x5eed
	for _, err := range []error{fn.Enable(false), x.Setup(bars), x.SetVector(m, 1, msiAddr, msiData, false), fn.EnableMSIX(&x, true)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	d, err := driver.Open(qtestBus{m: m, bars: bars}, driver.Arena{Base: 0x200000, Size: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return devscenario.Env{Driver: d, Vector: 1,
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
