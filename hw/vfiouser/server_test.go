package vfiouser

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/internal/lockedbuf"
	"github.com/softirdma/softirdma/internal/sockguard"
	"golang.org/x/sys/unix"
)

func wantErrno(t *testing.T, what string, err error, errno syscall.Errno) {
	t.Helper()
	var re *RemoteError
	if !errors.As(err, &re) || re.Errno != errno {
		t.Fatalf("%s: got %v, want an error reply with %v", what, err, errno)
	}
}

// QEMU's start-up order, message for message, against the fake device.
func TestQEMUStartupSequence(t *testing.T) {
	dev := newFakeDev(t)
	c, wait := serveFresh(t, newServer(t, dev))

	caps, err := c.Version()
	if err != nil {
		t.Fatal(err)
	}
	want := Caps{MaxMsgFDs: 16, MaxDataXferSize: 1 << 20, Pgsizes: 4096, MaxDMAMaps: 65535, WriteMultiple: true}
	if caps != want {
		t.Fatalf("caps %+v, want %+v", caps, want)
	}

	// RAM in two memfd-backed sections, then a ROM section without fd, read-only.
	ram := memfd(t, 3<<20, func(b []byte) { b[0], b[2<<20] = 0xaa, 0xbb })
	defer unix.Close(ram)
	if err := c.DMAMap(0, 2<<20, ram, 0, DMARead|DMAWrite); err != nil {
		t.Fatal(err)
	}
	if err := c.DMAMap(0x100000000, 1<<20, ram, 2<<20, DMARead|DMAWrite); err != nil {
		t.Fatal(err)
	}
	if err := c.DMAMap(0xfffc0000, 0x40000, -1, 0, DMARead); err != nil {
		t.Fatal(err)
	}

	info, err := c.GetDeviceInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info != (DeviceInfo{Flags: DeviceFlagPCI | DeviceFlagReset, NumRegions: 9, NumIRQs: 5}) {
		t.Fatalf("device info %+v", info)
	}
	for _, i := range []uint32{0, 1, 2, 3, 4, 5, 7} {
		ri, err := c.GetRegionInfo(i)
		if err != nil {
			t.Fatalf("region %d: %v", i, err)
		}
		switch i {
		case 0:
			if ri.Size != 4096 || ri.Flags != RegionFlagRead|RegionFlagWrite || ri.FD != -1 {
				t.Fatalf("region 0: %+v", ri)
			}
		case 2:
			if ri.Size != 8192 || ri.Flags != RegionFlagRead|RegionFlagWrite|RegionFlagMmap|RegionFlagCaps || ri.FD < 0 ||
				!slices.Equal(ri.Sparse, []SparseArea{{4096, 4096}}) {
				t.Fatalf("region 2: %+v", ri)
			}
			// The client's mapping of the sparse area is the device's memory.
			m, err := unix.Mmap(ri.FD, int64(ri.Offset+4096), 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			m[8] = 0x5a
			var got [1]byte
			dev.bar2.ReadAt(got[:], 4096+8)
			if got[0] != 0x5a {
				t.Fatalf("the device does not see the client's write to the sparse mmap")
			}
			unix.Munmap(m)
			unix.Close(ri.FD)
		case 1, 3, 5:
			if ri.Size != 0 || ri.Flags != 0 || ri.FD != -1 {
				t.Fatalf("unused region %d: %+v", i, ri)
			}
		case 7:
			if ri.Size != 4096 {
				t.Fatalf("config region: %+v", ri)
			}
		}
	}
	cfg := make([]byte, 4096)
	if err := c.RegionRead(PCIConfigRegion, 0, cfg); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfg, dev.cfg) {
		t.Fatal("config space read differs from the device's")
	}
	if irq, err := c.GetIRQInfo(PCIErrIRQ); err != nil || irq.Count != 1 {
		t.Fatalf("ERR irq info %+v, %v", irq, err)
	}
	// ROM sizing and BAR probing are config space accesses QEMU emulates around; the PBA read
	// reaches BAR0.
	var rom [4]byte
	if err := c.RegionRead(PCIConfigRegion, 0x30, rom[:]); err != nil {
		t.Fatal(err)
	}
	if irq, err := c.GetIRQInfo(PCIMSIXIRQ); err != nil || irq != (IRQ{Count: 4, Flags: IRQEventfd | IRQNoResize}) {
		t.Fatalf("MSI-X irq info %+v, %v", irq, err)
	}
	// MSI-X enabled, vector 0 unmasked: first without an fd, then with one.
	if err := c.SetIRQEventfds(PCIMSIXIRQ, 0, []int{-1}); err != nil {
		t.Fatal(err)
	}
	efd := eventfd(t)
	defer unix.Close(efd)
	if err := c.SetIRQEventfds(PCIMSIXIRQ, 0, []int{efd}); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	dev.wantCalls(t, "after reset",
		"map 0x0 0x200000 mem=true w=true",
		"map 0x100000000 0x100000 mem=true w=true",
		"map 0xfffc0000 0x40000 mem=false w=false",
		"read 7 0x0 4096",
		"read 7 0x30 4",
		"reset")
	dev.mu.Lock()
	lo, hi := dev.dma[0], dev.dma[0x100000000]
	dev.mu.Unlock()
	if lo[0] != 0xaa || hi[0] != 0xbb {
		t.Fatalf("DMA memory at the wrong file offsets: %x %x", lo[0], hi[0])
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	// The client went: every map was withdrawn from the device, then the device was reset.
	if got := dev.takeCalls(); len(got) != 4 || got[3] != "reset" || len(dev.dma) != 0 {
		t.Fatalf("after disconnect: calls %q, maps left %d", got, len(dev.dma))
	}
}

// The VERSION reply is never larger than the request, since QEMU sizes its receive buffer from
// its own message; a request too small for any offer is refused.
func TestVersionReplyFitsRequest(t *testing.T) {
	c, _ := serve(t, newServer(t, newFakeDev(t)))
	for _, js := range []string{`{}`, `{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"write_multiple":true}}`, QEMUVersionJSON} {
		req := append(append(make([]byte, 4), js...), 0)
		r, _, err := c.Call(CmdVersion, 0, req, nil)
		if js == `{}` {
			wantErrno(t, "tiny VERSION", err, syscall.EINVAL)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(r) > len(req) || r[len(r)-1] != 0 || le.Uint16(r) != 0 || le.Uint16(r[2:]) != 0 {
			t.Fatalf("reply %q to a request of %d bytes", r, len(req))
		}
		if !bytes.Contains(r, []byte(`"pgsizes":4096`)) || !bytes.Contains(r, []byte(`"write_multiple":true`)) {
			t.Fatalf("reply %q lacks pgsizes or write_multiple", r)
		}
	}
	_, _, err := c.Call(CmdVersion, 0, append([]byte{1, 0, 0, 0}, QEMUVersionJSON+"\x00"...), nil)
	wantErrno(t, "VERSION major 1", err, syscall.ENOTSUP)
	_, _, err = c.Call(CmdVersion, 0, append(make([]byte, 4), QEMUVersionJSON...), nil)
	wantErrno(t, "VERSION without NUL", err, syscall.EINVAL)
}

// A posted write gets no reply (the next reply read is the next request's), a non-posted
// one gets the 16 bytes back, a device error comes back as its errno.
func TestPostedAndNonPostedWrites(t *testing.T) {
	dev := newFakeDev(t)
	c, _ := serve(t, newServer(t, dev))
	if err := c.RegionWrite(0, 0x10, []byte{1, 2, 3, 4}, true); err != nil {
		t.Fatal(err)
	}
	if err := c.RegionWrite(0, 0x14, []byte{5, 6, 7, 8}, true); err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	if err := c.RegionRead(0, 0x10, b[:]); err != nil { // fails on id mismatch if a write was answered
		t.Fatal(err)
	}
	if b != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Fatalf("read back %x", b)
	}
	body := make([]byte, regionRWSize+2)
	le.PutUint64(body, 0x20)
	le.PutUint32(body[12:], 2)
	body[16], body[17] = 0xde, 0xad
	r, _, err := c.Call(CmdRegionWrite, 0, body, nil)
	if err != nil || !bytes.Equal(r, body[:regionRWSize]) {
		t.Fatalf("non-posted write reply %x, %v; want %x", r, err, body[:regionRWSize])
	}
	wantErrno(t, "write to a busy register", c.RegionWrite(0, 0xff0, []byte{1}, false), syscall.EBUSY)
	// A posted write the device refuses is logged, not answered: the next reply is the read's.
	if err := c.RegionWrite(0, 0xff0, []byte{1}, true); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMulti([]Write{{0, 0x30, []byte{9}}, {0, 0x31, []byte{10, 11, 12, 13, 14, 15, 16, 17}}, {PCIConfigRegion, 4, []byte{0x46}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.RegionRead(0, 0x30, b[:]); err != nil {
		t.Fatal(err)
	}
	dev.mu.Lock()
	cfg4 := dev.cfg[4]
	dev.mu.Unlock()
	if b != [8]byte{9, 10, 11, 12, 13, 14, 15, 16} || cfg4 != 0x46 {
		t.Fatalf("after WRITE_MULTI: %x, cfg[4] %x", b, cfg4)
	}
}

// The device sees the very bytes the client put in its memfd, and the client sees the device's
// writes; a read-only map is handed over read-only; memory that cannot be mapped safely is
// handed over as not accessible, and the map still succeeds; the client's file is sealed
// against shrinking, and one that cannot be sealed is not accessible.
func TestDMASharedMemory(t *testing.T) {
	dev := newFakeDev(t)
	c, _ := serve(t, newServer(t, dev))
	fd := memfd(t, 1<<20, func(b []byte) {
		for i := range b {
			b[i] = byte(i * 13)
		}
	})
	defer unix.Close(fd)
	if err := c.DMAMap(0x10000, 0x80000, fd, 0x40000, DMARead|DMAWrite); err != nil {
		t.Fatal(err)
	}
	dev.mu.Lock()
	mem := dev.dma[0x10000]
	dev.mu.Unlock()
	want := make([]byte, 0x80000)
	unix.Pread(fd, want, 0x40000)
	if !bytes.Equal(mem, want) {
		t.Fatal("device's view of the DMA region differs from the memfd")
	}
	copy(mem[100:], "written by the device")
	got := make([]byte, 21)
	unix.Pread(fd, got, 0x40000+100)
	if string(got) != "written by the device" {
		t.Fatalf("client sees %q", got)
	}
	// Read-only, a file too short for the range, a misaligned offset, no read permission.
	for _, m := range []struct {
		iova, size, off uint64
		prot            uint32
	}{{0x200000, 0x1000, 0, DMARead}, {0x300000, 0x200000, 0, DMARead | DMAWrite}, {0x600000, 0x1000, 0x10, DMARead}, {0x700000, 0x1000, 0, DMAWrite}} {
		if err := c.DMAMap(m.iova, m.size, fd, m.off, m.prot); err != nil {
			t.Fatalf("map %+v: %v", m, err)
		}
	}
	dev.wantCalls(t, "maps",
		"map 0x10000 0x80000 mem=true w=true",
		"map 0x200000 0x1000 mem=true w=false",
		"map 0x300000 0x200000 mem=false w=false",
		"map 0x600000 0x1000 mem=false w=false",
		"map 0x700000 0x1000 mem=false w=false")
	// The client's file can no longer shrink under the server's mappings.
	if err := unix.Ftruncate(fd, 0x1000); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("truncating the mapped memfd: %v, want EPERM (sealed)", err)
	}
	// A file that cannot be sealed (a memfd without MFD_ALLOW_SEALING, a regular file) is
	// handed over as not accessible.
	unsealable, err := unix.MemfdCreate("guest", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(unsealable)
	must(t, unix.Ftruncate(unsealable, 0x1000))
	must(t, c.DMAMap(0x800000, 0x1000, unsealable, 0, DMARead|DMAWrite))
	dev.wantCalls(t, "unsealable file", "map 0x800000 0x1000 mem=false w=false")
	wantErrno(t, "overlapping map", c.DMAMap(0x80000, 0x20000, fd, 0, DMARead), syscall.EEXIST)
	wantErrno(t, "empty map", c.DMAMap(0x900000, 0, fd, 0, DMARead), syscall.EINVAL)
	wantErrno(t, "wrapping map", c.DMAMap(^uint64(0)-0xfff, 0x2000, -1, 0, DMARead), syscall.EINVAL)
	wantErrno(t, "map flags", c.DMAMap(0x900000, 0x1000, -1, 0, 4), syscall.EINVAL)
}

// DMA_UNMAP tells the device while the memory is still mapped and unmaps it right after;
// the reply echoes the request's 24 bytes.
func TestUnmapTellsDeviceFirst(t *testing.T) {
	dev := newFakeDev(t)
	c, _ := serve(t, newServer(t, dev))
	fd := memfd(t, 1<<20, nil)
	defer unix.Close(fd)
	for _, iova := range []uint64{0, 0x100000} {
		if err := c.DMAMap(iova, 0x80000, fd, 0, DMARead|DMAWrite); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var seen [][]byte
	dev.mu.Lock()
	dev.onUnmap = func(iova, size uint64, mem []byte) {
		if !mapped(mem) {
			t.Errorf("unmap of 0x%x: memory already gone when the device is told", iova)
		}
		mem[0] = 1 // the device may still touch it until it returns
		mu.Lock()
		seen = append(seen, mem)
		mu.Unlock()
	}
	dev.mu.Unlock()
	seenNow := func() [][]byte { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
	body := make([]byte, dmaUnmapSize)
	le.PutUint32(body, dmaUnmapSize)
	le.PutUint64(body[8:], 0x100000)
	le.PutUint64(body[16:], 0x80000)
	r, _, err := c.Call(CmdDMAUnmap, 0, body, nil)
	if err != nil || !bytes.Equal(r, body) {
		t.Fatalf("unmap reply %x, %v; want the request echoed", r, err)
	}
	if seen := seenNow(); len(seen) != 1 || mapped(seen[0]) {
		t.Fatal("the region is still mapped after its unmap reply")
	}
	wantErrno(t, "unmap again", c.DMAUnmap(0x100000, 0x80000, false), syscall.ENOENT)
	wantErrno(t, "unmap of a part", c.DMAUnmap(0, 0x1000, false), syscall.ENOENT)
	wantErrno(t, "unmap all with a range", c.DMAUnmap(0, 0x1000, true), syscall.EINVAL)
	if err := c.DMAUnmap(0, 0, true); err != nil {
		t.Fatal(err)
	}
	if seen := seenNow(); len(seen) != 2 || mapped(seen[1]) {
		t.Fatal("unmap all left a region mapped or did not tell the device")
	}
}

// Trigger writes to the vector's eventfd from any goroutine; no eventfd, no signal; a masked
// vector holds the signal until unmask; a chunk without fds and a disable take eventfds away.
func TestTriggerReachesEventfd(t *testing.T) {
	dev := newFakeDev(t)
	srv := newServer(t, dev)
	c, _ := serve(t, srv)
	srv.Trigger(PCIMSIXIRQ, 1) // nothing assigned: nothing happens
	fds := []int{eventfd(t), eventfd(t), eventfd(t), eventfd(t)}
	defer sockguard.CloseFDs(fds)
	if err := c.SetIRQEventfds(PCIMSIXIRQ, 0, []int{-1, fds[1], fds[2], -1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		srv.Trigger(PCIMSIXIRQ, 1)
		srv.Trigger(PCIMSIXIRQ, 1)
		srv.Trigger(PCIMSIXIRQ, 0)
		close(done)
	}()
	<-done
	if n := readEventfd(t, fds[1]); n != 2 {
		t.Fatalf("vector 1 eventfd counted %d, want 2", n)
	}
	srv.Trigger(PCIMSIXIRQ, 9) // no such vector
	srv.Trigger(77, 0)         // no such index
	// Deassign vector 2 with a chunk that carries no fd.
	if err := c.SetIRQEventfds(PCIMSIXIRQ, 2, []int{-1}); err != nil {
		t.Fatal(err)
	}
	srv.Trigger(PCIMSIXIRQ, 2)
	if n := readEventfd(t, fds[2]); n != 0 {
		t.Fatalf("deassigned vector signalled %d", n)
	}
	// Loopback trigger through SET_IRQS (DATA_BOOL picks the vectors).
	if err := c.SetIRQs(IRQDataBool|IRQActionTrig, PCIMSIXIRQ, 0, 2, []byte{0, 1}, nil); err != nil {
		t.Fatal(err)
	}
	if n := readEventfd(t, fds[1]); n != 1 {
		t.Fatalf("DATA_BOOL trigger counted %d", n)
	}
	// INTx is maskable: a trigger while masked is delivered at unmask.
	if err := c.SetIRQEventfds(PCIINTxIRQ, 0, []int{fds[0]}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetIRQs(IRQDataNone|IRQActionMask, PCIINTxIRQ, 0, 1, nil, nil); err != nil {
		t.Fatal(err)
	}
	srv.Trigger(PCIINTxIRQ, 0)
	if n := readEventfd(t, fds[0]); n != 0 {
		t.Fatalf("masked vector signalled %d", n)
	}
	if err := c.SetIRQs(IRQDataNone|IRQActionUnmask, PCIINTxIRQ, 0, 1, nil, nil); err != nil {
		t.Fatal(err)
	}
	if n := readEventfd(t, fds[0]); n != 1 {
		t.Fatalf("pending signal at unmask counted %d", n)
	}
	wantErrno(t, "mask of MSI-X", c.SetIRQs(IRQDataNone|IRQActionMask, PCIMSIXIRQ, 0, 1, nil, nil), syscall.EINVAL)
	// Disable the MSI-X index: start 0 count 0.
	if err := c.SetIRQs(IRQDataNone|IRQActionTrig, PCIMSIXIRQ, 0, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	srv.Trigger(PCIMSIXIRQ, 1)
	if n := readEventfd(t, fds[1]); n != 0 {
		t.Fatalf("disabled index signalled %d", n)
	}
}

// The replies QEMU parses, byte for byte: device info, the region info argsz dance with the
// sparse-mmap capability, IRQ info.
func TestReplyBytes(t *testing.T) {
	c, _ := serve(t, newServer(t, newFakeDev(t)))
	r, _, err := c.Call(CmdDeviceGetInfo, 0, u32s(16, 0, 0, 0), nil)
	if want := u32s(16, DeviceFlagPCI|DeviceFlagReset, 9, 5); err != nil || !bytes.Equal(r, want) {
		t.Fatalf("DEVICE_GET_INFO reply %x, %v; want %x", r, err, want)
	}
	// Asked with argsz 32: the bare struct saying 64 bytes are needed, no fd.
	r, fds, err := c.Call(CmdRegionInfo, 0, append(u32s(32, 0, 2), make([]byte, 20)...), nil)
	want := append(u32s(64, RegionFlagRead|RegionFlagWrite|RegionFlagMmap|RegionFlagCaps, 2, 0, 8192, 0), 0, 0, 0, 0, 0, 0, 0, 0)
	if err != nil || !bytes.Equal(r, want) || len(fds) != 0 {
		t.Fatalf("region info at argsz 32: %x, %d fds, %v; want %x", r, len(fds), err, want)
	}
	// Asked again with 64: struct, capability at 32 {id 1, version 1, next 0, one area, pad,
	// offset 4096, size 4096}, and the fd.
	r, fds, err = c.Call(CmdRegionInfo, 0, append(u32s(64, 0, 2), make([]byte, 20)...), nil)
	defer sockguard.CloseFDs(fds)
	want = append(u32s(64, RegionFlagRead|RegionFlagWrite|RegionFlagMmap|RegionFlagCaps, 2, 32, 8192, 0, 0, 0),
		append(u32s(1|1<<16, 0, 1, 0), u32s(4096, 0, 4096, 0)...)...)
	if err != nil || !bytes.Equal(r, want) || len(fds) != 1 {
		t.Fatalf("region info at argsz 64: %x, %d fds, %v; want %x", r, len(fds), err, want)
	}
	r, _, err = c.Call(CmdIRQInfo, 0, u32s(16, 0, PCIMSIXIRQ, 0), nil)
	if want := u32s(16, IRQEventfd|IRQNoResize, PCIMSIXIRQ, 4); err != nil || !bytes.Equal(r, want) {
		t.Fatalf("IRQ info reply %x, %v; want %x", r, err, want)
	}
}

// Guest RAM mapped without a file descriptor (QEMU's RAM not shared) gets one warning per
// connection that says what to change, whatever the number of such maps; ROM without one (a
// read-only map) is normal and gets none.
func TestDMAWithoutFDWarnsOnce(t *testing.T) {
	var logs lockedbuf.Buffer // the server logs on its own goroutine
	srv, err := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, newFakeDev(t))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, srv)
	must(t, c.DMAMap(0xc0000, 0x20000, -1, 0, DMARead))
	if strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("a read-only map without fd warned:\n%s", logs.String())
	}
	must(t, c.DMAMap(0x100000, 0x100000, -1, 0, DMARead|DMAWrite))
	must(t, c.DMAMap(0x200000, 0x100000, -1, 0, DMARead|DMAWrite))
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "memory-backend-memfd") {
		t.Fatalf("%d warnings, want 1 naming memory-backend-memfd:\n%s", n, logs.String())
	}
}
