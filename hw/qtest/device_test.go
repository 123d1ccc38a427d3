package qtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
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

// The softirdma function served over vfio-user to a real QEMU 11.1, driven through QEMU's MMIO
// and memory as a driver would: found on the bus by its IDs, BARs assigned, MSI-X vector 0
// pointed into guest RAM; the control queue in guest RAM allocates a PD and registers an MR
// from a page list, and each completion arrives as the MSI-X write.
func TestQEMUDrivesTheFunction(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "dev.sock")
	f := serveInProcess(t, sock, hw.Config{Name: "fn", Clock: emu.NewWallClock()})
	m := startQEMU(t, Config{Dir: dir, Devices: []string{vfioUserDevice(sock)}})
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

// QEMU killed mid-traffic 50 times in a row: `softirdma serve`, a process of its own, keeps
// running with no growth in descriptors or goroutines and serves the next QEMU. Each QEMU has
// the Go driver make a PD, a CQ, an MR and a loopback QP pair and post a stream of WRITEs with
// doorbells, and is killed (SIGKILL) while they are under way; serve's "client gone" line for
// each gives the process's figures once that QEMU's release is done. A 51st QEMU then gets a
// WRITE through and stays attached while serve is stopped with SIGTERM.
func TestQEMUKilledMidTraffic(t *testing.T) {
	qemuBinary(t) // skips early where QEMU is not provisioned
	dir := shortDir(t)
	sock := filepath.Join(dir, "dev.sock")
	serve := startServe(t, dir, sock)
	const rounds = 50
	inFlight := 0
	for i := 1; i <= rounds; i++ {
		if killMidStream(t, dir, sock) {
			inFlight++
		}
	}
	// Only the CQ, read just before each kill, can tell; each stream is tens of ms of the
	// engine's work, posted in a few, so WRITEs are under way at most kills.
	t.Logf("WRITEs in flight at %d kills of %d", inFlight, rounds)
	if inFlight == 0 {
		t.Fatal("every stream had completed before its QEMU was killed")
	}
	var gone [][2]int
	deadline := time.Now().Add(30 * time.Second)
	for {
		gone = clientGoneFigures(serve.Log())
		if len(gone) >= rounds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve logged %d clients gone of %d:\n%s", len(gone), rounds, serve.Log())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Against the first QEMU's figures, which count what serve keeps for good once it has served
	// one: a leak of one goroutine or descriptor a QEMU would be 49 over by the last. The slack
	// is for the one goroutine that comes and goes on its own: the engine's wall clock runs one
	// while any call is scheduled on it (a timer of a QP the reset engine no longer heeds, say)
	// and none once they have run, so a figure taken at one moment is one more or one less; two
	// leave room for a goroutine of the runtime's own. Descriptors get none: the release closes
	// every one a QEMU gave before the line is logged.
	const goroutineSlack, fdSlack = 2, 0
	first := gone[0]
	for i, g := range gone[:rounds] {
		if g[0] > first[0]+goroutineSlack || g[1] > first[1]+fdSlack {
			t.Fatalf("QEMU %d gone: %d goroutines and %d descriptors, the first left %d and %d; all QEMUs': %v", i+1, g[0], g[1], first[0], first[1], gone)
		}
	}
	t.Logf("goroutines and descriptors once the first QEMU had gone %v, once the last had %v", first, gone[rounds-1])

	// The next QEMU is served: a PD, a QP pair and a WRITE whose bytes land.
	m := startQEMU(t, Config{Dir: dir, Devices: []string{vfioUserDevice(sock)}})
	_, bars := enabledFunction(t, m)
	q, cq, mr := devscenario.LoopbackPair(t, openDriver(t, m, bars), functionIP)
	want := []byte("softirdm")
	if err := m.Write(mr.Addr, want); err != nil {
		t.Fatal(err)
	}
	devscenario.DoorbellToCompletion(t, q, cq, mr)
	got := make([]byte, len(want))
	if err := m.Read(mr.Addr+4096, got); err != nil || string(got) != string(want) {
		t.Fatalf("the WRITE of the QEMU after the killed ones left %q (%v)", got, err)
	}
	// serve stops on SIGTERM with that QEMU attached (Stop checks the status and the socket),
	// releasing it as it goes.
	serve.Stop(syscall.SIGTERM)
	if n := len(clientGoneFigures(serve.Log())); n != rounds+1 {
		t.Fatalf("serve logged %d clients gone of %d:\n%s", n, rounds+1, serve.Log())
	}
}

// functionIP is the function's address on its loopback in the tests that use no link.
var functionIP = netip.MustParseAddr("192.0.2.1")

// killMidStream starts a QEMU with the function served on sock, checks the function is as at
// power-on, has the Go driver make a loopback QP pair and post a stream of WRITEs with a
// doorbell a batch, and kills QEMU (SIGKILL) without waiting for them. It says whether WRITEs
// were still in flight as far as the CQ showed just before the kill.
func killMidStream(t *testing.T, dir, sock string) bool {
	t.Helper()
	m := startQEMU(t, Config{Dir: dir, Devices: []string{vfioUserDevice(sock)}})
	defer m.Close() // SIGKILL, without a word to serve
	_, bars := enabledFunction(t, m)
	// Each QEMU finds the function at power-on, whatever the last one left.
	if st, err := m.Readl(bars[abi.BARRegs].Addr + abi.RegDevStatus); err != nil || st != 0 {
		t.Fatalf("status 0x%x at start (%v)", st, err)
	}
	q, cq, mr := devscenario.LoopbackPair(t, openDriver(t, m, bars), functionIP)
	// 96 WRITEs of 512 KiB (of the 127 the send queue holds), the last of each batch of 16
	// signaled: 48 MiB for the engine to move, tens of ms of its work, posted in a few.
	const batches, perBatch, size = 6, 16, 512 << 10
	wrs := make([]driver.SendWR, perBatch)
	for i := range wrs {
		wrs[i] = driver.SendWR{ID: uint64(i), Opcode: driver.WRRDMAWrite,
			SGL: []driver.SGE{{Addr: mr.Addr, Length: size, Key: mr.Key}}, RemoteAddr: mr.Addr + size, RKey: mr.Key}
	}
	wrs[perBatch-1].Flags = driver.SendSignaled
	for range batches {
		if err := q.PostSend(wrs...); err != nil {
			t.Fatal(err)
		}
	}
	wcs, err := cq.Poll(batches)
	if err != nil {
		t.Fatal(err)
	}
	return len(wcs) < batches
}

// clientGoneFigures reads the goroutines and descriptors of each "client gone" line in serve's
// log, in order.
func clientGoneFigures(log string) [][2]int {
	var out [][2]int
	for _, m := range clientGoneLine.FindAllStringSubmatch(log, -1) {
		g, _ := strconv.Atoi(m[1])
		f, _ := strconv.Atoi(m[2])
		out = append(out, [2]int{g, f})
	}
	return out
}

var clientGoneLine = regexp.MustCompile(`(?m)msg="client gone" err=.* goroutines=([0-9]+) fds=([0-9]+)$`)

// qemuLoopbackPair serves the function from this process to a QEMU under qtest and makes,
// through the Go driver over qtest, the loopback QP pair of devscenario.LoopbackPair.
func qemuLoopbackPair(b *testing.B) (*driver.QP, *driver.CQ, driver.MR) {
	dir := shortDir(b)
	sock := filepath.Join(dir, "dev.sock")
	serveInProcess(b, sock, hw.Config{Name: "fn", Clock: emu.NewWallClock(), IP: functionIP})
	m := startQEMU(b, Config{Dir: dir, Devices: []string{vfioUserDevice(sock)}})
	_, bars := enabledFunction(b, m)
	return devscenario.LoopbackPair(b, openDriver(b, m, bars), functionIP)
}

// BenchmarkQEMUDoorbellToCompletion is BenchmarkDoorbellToCompletion of hw/driver through a real
// QEMU 11.1 under qtest: the WQE written into guest RAM and the doorbell written to BAR 2 by qtest
// commands, crossing QEMU's vfio-user client; the completion polled in guest RAM.
func BenchmarkQEMUDoorbellToCompletion(b *testing.B) {
	q, cq, mr := qemuLoopbackPair(b)
	for b.Loop() {
		devscenario.DoorbellToCompletion(b, q, cq, mr)
	}
}

// BenchmarkQEMUWQEsPerSecond is BenchmarkWQEsPerSecond of hw/driver through a real QEMU 11.1
// under qtest: batches of signaled 8-byte WRITEs to the other QP of a loopback pair, each batch
// written into guest RAM and rung with one doorbell by qtest commands, its completions polled
// in guest RAM. Every WQE written and every completion read is a qtest command (BenchmarkQtest
// prices one), which bounds the rate far below the function's own.
func BenchmarkQEMUWQEsPerSecond(b *testing.B) {
	devscenario.WQERate(b, qemuLoopbackPair)
}

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
