package qtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Every width lands in RAM little-endian, as one access, and reads back through every other width.
func TestRAMWidths(t *testing.T) {
	m := startQEMU(t, Config{})
	const a = 0x10000
	if err := m.Writeq(a, 0x0807060504030201); err != nil {
		t.Fatal(err)
	}
	if err := m.Writel(a+8, 0x0c0b0a09); err != nil {
		t.Fatal(err)
	}
	if err := m.Writew(a+12, 0x0e0d); err != nil {
		t.Fatal(err)
	}
	if err := m.Writeb(a+14, 0x0f); err != nil {
		t.Fatal(err)
	}
	if err := m.Writeb(a+15, 0x10); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	if err := m.Read(a, got); err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if !bytes.Equal(got, want) {
		t.Fatalf("RAM % x, want % x", got, want)
	}
	if v, err := m.Readb(a + 5); err != nil || v != 6 {
		t.Errorf("readb = %#x, %v", v, err)
	}
	if v, err := m.Readw(a + 1); err != nil || v != 0x0302 {
		t.Errorf("readw (unaligned) = %#x, %v", v, err)
	}
	if v, err := m.Readl(a + 12); err != nil || v != 0x100f0e0d {
		t.Errorf("readl = %#x, %v", v, err)
	}
	if v, err := m.Readq(a + 8); err != nil || v != 0x100f0e0d0c0b0a09 {
		t.Errorf("readq = %#x, %v", v, err)
	}
	// All ones, the value the parser must not confuse with a failed access.
	if err := m.Writeq(a, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Readq(a); err != nil || v != ^uint64(0) {
		t.Errorf("readq = %#x, %v", v, err)
	}
}

// Ranges of awkward sizes, across page boundaries and the 256 KiB chunk size, through both
// encodings in both directions. (0xA0000-0xFFFFF is VGA and BIOS ROM on q35, not RAM.)
func TestRAMRanges(t *testing.T) {
	m := startQEMU(t, Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		addr uint64
		n    int
	}{
		{0x1000, 1}, {0x1fff, 2}, {0x2ffe, 4096}, {0x4000, 4096}, {0x5001, 4097},
		{0x7ff3, 3 * 4096}, {0x200000 - 5, maxChunk + 11}, {0x300000, 2*maxChunk + 4096},
	}
	for _, c := range cases {
		data := make([]byte, c.n)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		// Guard bytes either side show a write stays inside its range.
		if err := m.Memset(c.addr-16, uint64(c.n)+32, 0x5a); err != nil {
			t.Fatal(err)
		}
		for _, enc := range []string{"b64", "hex"} {
			write, read := m.Write, m.ReadHex
			if enc == "hex" {
				write, read = m.WriteHex, m.Read
			}
			if err := write(c.addr, data); err != nil {
				t.Fatalf("%s write %#x+%d: %v", enc, c.addr, c.n, err)
			}
			got := make([]byte, c.n+32)
			if err := read(c.addr-16, got); err != nil {
				t.Fatalf("%s read %#x+%d: %v", enc, c.addr, c.n, err)
			}
			if !bytes.Equal(got[16:16+c.n], data) {
				t.Fatalf("%s %#x+%d: data differs", enc, c.addr, c.n)
			}
			if !bytes.Equal(got[:16], bytes.Repeat([]byte{0x5a}, 16)) || !bytes.Equal(got[16+c.n:], bytes.Repeat([]byte{0x5a}, 16)) {
				t.Fatalf("%s %#x+%d: guard bytes changed: % x ... % x", enc, c.addr, c.n, got[:16], got[16+c.n:])
			}
		}
	}
	// A zero-length range is a no-op here: QEMU would assert on it.
	if err := m.Read(0x1000, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Write(0x1000, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Write(^uint64(0)-1, make([]byte, 8)); err == nil {
		t.Fatal("a write that wraps the address space was sent")
	}
	if err := m.Sync(); err != nil {
		t.Fatal("after refused ranges:", err)
	}
}

// The scan agrees with QEMU's own view (QMP query-pci) on every function of bus 0, and the
// host bridge's configuration reads are right.
func TestPCIScanQ35(t *testing.T) {
	m := startQEMU(t, Config{})
	p := NewPCI(m)
	fns, err := p.Scan(0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fns {
		got = append(got, f.Addr.String()+" "+hex16(f.VendorID)+":"+hex16(f.DeviceID))
	}
	var want []string
	for _, d := range queryPCI(t, m) {
		want = append(want, Addr{0, d.Slot, d.Function}.String()+" "+hex16(d.ID.Vendor)+":"+hex16(d.ID.Device))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("scan %v, QEMU says %v", got, want)
	}
	hb, err := p.Find(0, 0x8086, 0x29c0)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Addr != (Addr{0, 0, 0}) {
		t.Fatalf("host bridge at %s", hb.Addr)
	}
	check := func(what string, got uint32, err error, want uint32) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s = %#x, %v; want %#x", what, got, err, want)
		}
	}
	v32, err := hb.ConfigRead32(CfgVendorID)
	check("id dword", v32, err, 0x29c08086)
	v16, err := hb.ConfigRead16(CfgDeviceID)
	check("device id", uint32(v16), err, 0x29c0)
	v8, err := hb.ConfigRead8(CfgVendorID + 1)
	check("vendor high byte", uint32(v8), err, 0x80)
	v16, err = hb.ConfigRead16(0x0a)
	check("class", uint32(v16), err, 0x0600)
	v8, err = hb.ConfigRead8(CfgHeaderType)
	check("header type", uint32(v8), err, 0)
	// A function that is not there reads as all ones.
	v32, err = p.Function(Addr{0, 30, 0}).ConfigRead32(CfgVendorID)
	check("absent function", v32, err, 0xffffffff)
	if _, err := p.Find(0, 0x1234, 0x5678); !errors.Is(err, ErrNotFound) {
		t.Errorf("Find of an absent ID: %v", err)
	}
	if _, err := hb.ConfigRead32(0x102); err == nil {
		t.Error("an unaligned offset beyond 256 bytes was accepted")
	}
}

func hex16(v uint16) string { return fmt.Sprintf("%04x", v) }

type qmpPCIDev struct {
	Slot, Function uint8
	ID             struct{ Vendor, Device uint16 }
	Regions        []struct {
		Bar     int
		Type    string
		Address int64
		Size    uint64
	}
}

func queryPCI(t *testing.T, m *Machine) []qmpPCIDev {
	t.Helper()
	r, err := m.QMP(ctxT(t), "query-pci", nil)
	if err != nil {
		t.Fatal(err)
	}
	var buses []struct {
		Bus     int
		Devices []qmpPCIDev
	}
	if err := json.Unmarshal(r, &buses); err != nil || len(buses) != 1 {
		t.Fatalf("query-pci: %v, %d buses", err, len(buses))
	}
	return buses[0].Devices
}

// BARs of a real device are sized and placed where QEMU then maps them, and its MSI-X
// capability and table are found and programmed through MMIO.
func TestPCIBARsAndMSIX(t *testing.T) {
	m, f, bars := virtioRNG(t, true)
	// virtio-rng-pci: BAR0 32 I/O ports, BAR1 the MSI-X page, BAR4 the 64-bit prefetchable modern BAR.
	want := [6]BAR{
		{Index: 0, Size: 32, IO: true, Addr: IOWindowStart},
		{Index: 1, Size: 4096, Addr: MMIOWindowStart},
		{Index: 2}, {Index: 3},
		{Index: 4, Size: 16384, Is64: true, Prefetch: true, Addr: MMIOWindowStart + 16384},
		{Index: 5},
	}
	if bars != want {
		t.Fatalf("BARs\n%+v, want\n%+v", bars, want)
	}
	for _, d := range queryPCI(t, m) {
		if d.Slot != 3 {
			continue
		}
		if len(d.Regions) != 3 {
			t.Fatalf("QEMU maps %d regions", len(d.Regions))
		}
		for _, r := range d.Regions {
			if b := bars[r.Bar]; uint64(r.Address) != b.Addr || r.Size != b.Size {
				t.Errorf("QEMU maps BAR %d at %#x size %#x; assigned %#x size %#x", r.Bar, r.Address, r.Size, b.Addr, b.Size)
			}
		}
	}
	x, err := f.MSIX()
	if err != nil {
		t.Fatal(err)
	}
	if x.Vectors != 2 || x.TableBAR != 1 || x.TableOff != 0 || x.PBABAR != 1 || x.PBAOff != 0x800 {
		t.Fatalf("MSI-X %+v", x)
	}
	if err := x.Setup(bars); err != nil {
		t.Fatal(err)
	}
	if err := x.SetVector(m, 1, 0x123456789a0, 0xabcd, false); err != nil {
		t.Fatal(err)
	}
	entry := make([]uint32, 4)
	for i := range entry {
		if entry[i], err = m.Readl(x.TableAddr(1) + 4*uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if entry[0] != 0x456789a0 || entry[1] != 0x123 || entry[2] != 0xabcd || entry[3] != 0 {
		t.Fatalf("table entry 1 reads back %#x", entry)
	}
	if err := f.EnableMSIX(&x, true); err != nil {
		t.Fatal(err)
	}
	if ctl, err := f.ConfigRead16(x.Cap + 2); err != nil || ctl&msixEnable == 0 || ctl&msixFuncMask != 0 {
		t.Fatalf("message control %#x, %v", ctl, err)
	}
	if pend, err := x.Pending(m, 1); err != nil || pend {
		t.Fatalf("vector 1 pending %v, %v", pend, err)
	}
	if err := x.SetVector(m, 2, 0, 0, false); err == nil {
		t.Fatal("vector 2 of 2 accepted")
	}
}

// The virtual clock moves only when told, and timers that fall due meanwhile run: the RTC's
// periodic interrupt, intercepted at the I/O APIC, rises within the step and falls when its
// status register is read.
func TestClockStepAndIRQ(t *testing.T) {
	m := startQEMU(t, Config{Args: []string{"-rtc", "clock=vm"}})
	t0, err := m.ClockStep(1000)
	if err != nil {
		t.Fatal(err)
	}
	t1, err := m.ClockStep(1000)
	if err != nil || t1 != t0+1000 {
		t.Fatalf("clock_step 1000 from %d: %d, %v", t0, t1, err)
	}
	if t2, err := m.ClockSet(t1 + 5000); err != nil || t2 != t1+5000 {
		t.Fatalf("clock_set: %d, %v", t2, err)
	}
	var ce *CommandError
	if _, err := m.ClockSet(t1); !errors.As(err, &ce) {
		t.Fatalf("clock_set into the past: %v", err)
	}
	if _, err := m.ClockStep(0); err == nil {
		t.Fatal("a zero step was sent")
	}

	if err := m.InterceptIn("ioapic"); err != nil {
		t.Fatal(err)
	}
	const rtcIRQ = 8
	cmos := func(reg, v uint8) {
		t.Helper()
		if err := m.Outb(0x70, reg); err != nil {
			t.Fatal(err)
		}
		if err := m.Outb(0x71, v); err != nil {
			t.Fatal(err)
		}
	}
	cmos(0x0a, 0x26)      // 32.768 kHz divider, rate 6: a periodic interrupt every 976.5625 us
	cmos(0x0b, 0x02|0x40) // 24-hour mode, periodic interrupt enabled
	if m.IRQ(rtcIRQ) {
		t.Fatal("RTC interrupt up before time moved")
	}
	if _, err := m.ClockStep(2_000_000); err != nil {
		t.Fatal(err)
	}
	if !m.IRQ(rtcIRQ) {
		t.Fatal("no RTC interrupt within 2 ms of virtual time")
	}
	if err := m.Outb(0x70, 0x0c); err != nil {
		t.Fatal(err)
	}
	if c, err := m.Inb(0x71); err != nil || c&0xc0 != 0xc0 {
		t.Fatalf("RTC register C %#x, %v: want IRQF and PF", c, err)
	}
	if m.IRQ(rtcIRQ) {
		t.Fatal("RTC interrupt still up after register C was read")
	}
}

// A command line QEMU refuses gives an error that carries QEMU's own words, and no process.
func TestStartReportsQEMUError(t *testing.T) {
	qemu := qemuBinary(t)
	_, err := Start(ctxT(t), Config{QEMU: qemu, Dir: shortDir(t), Devices: []string{"no-such-device-model"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-device-model") || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("error %v", err)
	}
	_, err = Start(ctxT(t), Config{QEMU: qemu, Dir: shortDir(t), Args: []string{"-no-such-option"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("error %v", err)
	}
	_, err = Start(ctxT(t), Config{QEMU: "/nonexistent/qemu", Dir: shortDir(t)})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("error %v", err)
	}
}

// Close and Shutdown leave no process (not even a zombie), no descriptor and no goroutine behind,
// whether QEMU quits when asked or has to be killed.
func TestCloseLeavesNothing(t *testing.T) {
	qemu := qemuBinary(t)
	dir := shortDir(t)
	run := func(graceful bool) int {
		m, err := Start(ctxT(t), Config{QEMU: qemu, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Writel(0x1000, 1); err != nil {
			t.Fatal(err)
		}
		pid := m.Pid()
		if graceful {
			if err := m.Shutdown(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if err := m.ExitErr(); err != nil {
				t.Fatalf("QEMU quit with %v", err)
			}
		} else if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal("second Close:", err)
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
			t.Fatalf("process %d still in /proc after Close (%v)", pid, err)
		}
		if err := m.Writel(0x1000, 1); err == nil {
			t.Fatal("a command succeeded after Close")
		}
		return pid
	}
	run(true) // warm up: the first run creates the runtime's lasting threads and pollers
	fds, gs := countFDs(t), runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		run(i%2 == 0)
		// A start QEMU refuses releases everything too.
		if _, err := Start(ctxT(t), Config{QEMU: qemu, Dir: dir, Devices: []string{"no-such-device-model"}}); err == nil {
			t.Fatal("a bad device started")
		}
	}
	settled(t, fds, gs)
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("sockets left in %s: %v", dir, ents)
	}
}

// settled waits until no more descriptors and goroutines are left than before (fds, gs): those
// of a client that went, or of a timer still due, end on their own, later on a busy machine.
// It reports what is left after 10 s.
func settled(t *testing.T, fds, gs int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		nf, ng := countFDs(t), runtime.NumGoroutine()
		if nf <= fds && ng <= gs {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d descriptors and %d goroutines left, %d and %d before", nf, ng, fds, gs)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Close ends a QEMU that no longer answers (stopped here), and a command blocked on it returns.
func TestCloseUnblocksHungQEMU(t *testing.T) {
	m := startQEMU(t, Config{})
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := m.Readl(0x1000); errc <- err }()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("a command to a stopped QEMU succeeded")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(m.Pid())); !os.IsNotExist(err) {
		t.Fatalf("process still in /proc after Close (%v)", err)
	}
}

// A -device in the JSON form reaches QEMU as given: vfio-user-pci connects to the socket it
// names and opens with VERSION (command 1). A server that then hangs up makes QEMU give up (11.1.3
// even aborts, on an assertion in error_setv), and Start reports what QEMU said.
func TestVFIOUserDeviceArgument(t *testing.T) {
	dir := shortDir(t)
	sock := dir + "/dev.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hdr := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			hdr <- nil
			return
		}
		defer c.Close()
		b := make([]byte, 16)
		if _, err := io.ReadFull(c, b); err != nil {
			hdr <- nil
			return
		}
		hdr <- b
	}()
	dev := `{"driver":"vfio-user-pci","socket":{"path":"` + sock + `","type":"unix"}}`
	_, err = Start(ctxT(t), Config{QEMU: qemuBinary(t), Dir: dir, Devices: []string{dev}})
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "qemu-system-x86_64: ") {
		t.Fatalf("Start: %v", err)
	}
	b := <-hdr
	if b == nil {
		t.Fatal("QEMU sent no vfio-user header")
	}
	if cmd, flags := binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[8:]); cmd != 1 || flags&0xf != 0 {
		t.Fatalf("first message: command %d flags %#x, want VERSION (1) as a command", cmd, flags)
	}
}
