package vfiouser

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softirdma/softirdma/internal/fdtest"
)

// fakeDev is a device with a 4 KiB register BAR0, an 8 KiB BAR2 whose second page is
// mmappable shared memory, a 4 KiB config space, and the PCI IRQ indices (INTx maskable,
// MSI-X with 4 vectors).
type fakeDev struct {
	mu     sync.Mutex
	bar0   []byte
	cfg    []byte
	bar2   *os.File
	calls  []string
	dma    map[uint64][]byte
	resets int
	// onUnmap runs inside UnmapDMA with the memory the device was given, before the server
	// unmaps it.
	onUnmap func(iova, size uint64, mem []byte)
}

func newFakeDev(t testing.TB) *fakeDev {
	fd, err := unix.MemfdCreate("bar2", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "bar2")
	if err := f.Truncate(8192); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	d := &fakeDev{bar0: make([]byte, 4096), cfg: make([]byte, 4096), bar2: f, dma: map[uint64][]byte{}}
	for i := range d.cfg {
		d.cfg[i] = byte(i * 7)
	}
	copy(d.cfg, []byte{0x86, 0x80, 0x34, 0x12})
	return d
}

func (d *fakeDev) Describe() Description {
	regions := make([]Region, PCINumRegions)
	regions[0] = Region{Size: 4096, Flags: RegionFlagRead | RegionFlagWrite}
	regions[2] = Region{Size: 8192, Flags: RegionFlagRead | RegionFlagWrite,
		Mmap: &RegionMmap{File: d.bar2, Areas: []SparseArea{{Offset: 4096, Size: 4096}}}}
	regions[4] = Region{Size: 4096, Flags: RegionFlagRead} // read-only
	regions[PCIConfigRegion] = Region{Size: 4096, Flags: RegionFlagRead | RegionFlagWrite}
	irqs := make([]IRQ, PCINumIRQs)
	irqs[PCIINTxIRQ] = IRQ{Count: 1, Flags: IRQEventfd | IRQMaskable | IRQAutomask}
	irqs[PCIMSIXIRQ] = IRQ{Count: 4, Flags: IRQEventfd | IRQNoResize}
	irqs[PCIErrIRQ] = IRQ{Count: 1, Flags: IRQEventfd}
	return Description{Flags: DeviceFlagPCI | DeviceFlagReset, Regions: regions, IRQs: irqs}
}

func (d *fakeDev) region(index uint32) []byte {
	switch index {
	case 0:
		return d.bar0
	case 4:
		return d.bar0
	case PCIConfigRegion:
		return d.cfg
	}
	return nil
}

func (d *fakeDev) RegionRead(index uint32, off uint64, data []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, fmt.Sprintf("read %d 0x%x %d", index, off, len(data)))
	if index == 2 {
		_, err := d.bar2.ReadAt(data, int64(off))
		return err
	}
	copy(data, d.region(index)[off:])
	return nil
}

func (d *fakeDev) RegionWrite(index uint32, off uint64, data []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, fmt.Sprintf("write %d 0x%x %x", index, off, data))
	if index == 0 && off == 0xff0 {
		return syscall.EBUSY // a register that refuses writes, to see the errno come back
	}
	if index == 2 {
		_, err := d.bar2.WriteAt(data, int64(off))
		return err
	}
	copy(d.region(index)[off:], data)
	return nil
}

func (d *fakeDev) Reset() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, "reset")
	d.resets++
	clear(d.bar0)
	return nil
}

func (d *fakeDev) MapDMA(iova, size uint64, mem []byte, writable bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, fmt.Sprintf("map 0x%x 0x%x mem=%v w=%v", iova, size, mem != nil, writable))
	d.dma[iova] = mem
}

func (d *fakeDev) UnmapDMA(iova, size uint64) {
	d.mu.Lock()
	mem := d.dma[iova]
	delete(d.dma, iova)
	d.calls = append(d.calls, fmt.Sprintf("unmap 0x%x 0x%x", iova, size))
	f := d.onUnmap
	d.mu.Unlock()
	if f != nil {
		f(iova, size, mem)
	}
}

func (d *fakeDev) takeCalls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.calls
	d.calls = nil
	return c
}

// wantCalls takes the device's calls and fails the test unless they are want, in order.
func (d *fakeDev) wantCalls(t testing.TB, what string, want ...string) {
	t.Helper()
	if got := d.takeCalls(); !slices.Equal(got, want) {
		t.Fatalf("%s: device calls\n%q\nwant\n%q", what, got, want)
	}
}

// socketpair returns two connected stream sockets.
func socketpair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	a, b, err := Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// serve starts srv on one end of a socketpair and returns a client on the other end, past the
// VERSION exchange, and a function that waits for the server to finish with the connection.
func serve(t testing.TB, srv *Server) (*Client, func() error) {
	t.Helper()
	c, wait := serveFresh(t, srv)
	if _, err := c.Version(); err != nil {
		t.Fatal(err)
	}
	return c, wait
}

// serveFresh is serve without the VERSION exchange: the client's first message is the test's.
func serveFresh(t testing.TB, srv *Server) (*Client, func() error) {
	a, b := socketpair(t)
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(context.Background(), a) }()
	c := NewClient(b)
	var once sync.Once
	var err error
	wait := func() error {
		once.Do(func() { c.Close(); err = <-done })
		return err
	}
	t.Cleanup(func() { wait() })
	return c, wait
}

func newServer(t testing.TB, dev Device) *Server {
	srv, err := New(Config{}, dev)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

var (
	memfd       = fdtest.Memfd
	eventfd     = fdtest.Eventfd
	readEventfd = fdtest.ReadEventfd
)

// openFDs counts the process's open descriptors.
// fdSet is the process's open descriptors, each number with what it names (a socket's inode,
// a file's path).
func fdSet(t testing.TB) map[string]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			set[e.Name()] = l // the directory's own is closed by now: no link
		}
	}
	return set
}

// openedSince is how many descriptors are open now that were not in before (same number, same
// target): another test's descriptor that closes late changes nothing here.
func openedSince(t testing.TB, before map[string]string) int {
	n := 0
	for fd, l := range fdSet(t) {
		if before[fd] != l {
			n++
		}
	}
	return n
}

func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the directory's own
}

// mapped says whether the page at b's start is mapped in the process (mincore fails with
// ENOMEM for an unmapped page).
func mapped(b []byte) bool {
	var vec [1]byte
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b))) &^ (pageSize - 1)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, addr, pageSize, uintptr(unsafe.Pointer(&vec[0])))
	return errno == 0
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
