package vfiouser

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/internal/sockguard"
	"golang.org/x/sys/unix"
)

func dial(t *testing.T, path string) *Client {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	return NewClient(conn)
}

// A client that goes mid-way (with DMA maps, eventfds and half a message sent) leaves no
// descriptor behind, the device hears of every unmap, and the next client is served: twenty
// times over.
func TestDisconnectReleasesAndNextClientIsServed(t *testing.T) {
	// What the test itself opens is counted: descriptors earlier tests leave, which may close
	// at any moment on a busy machine, are not.
	pre := fdSet(t)
	dev := newFakeDev(t)
	srv := newServer(t, dev)
	path := filepath.Join(t.TempDir(), "vfio-user.sock")
	srv.path = path
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()

	c := dial(t, path)
	if _, err := c.Version(); err != nil {
		t.Fatal(err)
	}
	base := openedSince(t, pre) // one client connected and served
	for round := range 20 {
		ram := memfd(t, 2<<20, nil)
		if err := c.DMAMap(0, 1<<20, ram, 0, DMARead|DMAWrite); err != nil {
			t.Fatal(err)
		}
		if err := c.DMAMap(1<<20, 1<<20, ram, 1<<20, DMARead|DMAWrite); err != nil {
			t.Fatal(err)
		}
		efds := []int{eventfd(t), eventfd(t), eventfd(t), eventfd(t)}
		if err := c.SetIRQEventfds(PCIMSIXIRQ, 0, efds); err != nil {
			t.Fatal(err)
		}
		if err := c.SetIRQEventfds(PCIINTxIRQ, 0, efds[:1]); err != nil {
			t.Fatal(err)
		}
		// Half a REGION_WRITE, with an eventfd riding on it, then gone.
		half := rawMsg(9, CmdRegionWrite, 0, rw(0, 0, 84, make([]byte, 84)))[:40]
		if _, _, _, err := c.CallRaw(half, efds[1:2], false); err != nil {
			t.Fatal(err)
		}
		c.Close()
		unix.Close(ram)
		sockguard.CloseFDs(efds)

		c = dial(t, path) // served only once the previous client is released
		if _, err := c.Version(); err != nil {
			t.Fatalf("round %d: the next client: %v", round, err)
		}
		if n := openedSince(t, pre); n != base {
			t.Fatalf("round %d: %d descriptors open, %d with one idle client", round, n, base)
		}
		dev.mu.Lock()
		left := len(dev.dma)
		dev.mu.Unlock()
		if left != 0 {
			t.Fatalf("round %d: %d DMA regions still with the device", round, left)
		}
	}
	// Close releases the connected client and removes the socket.
	ram := memfd(t, 1<<20, nil)
	defer unix.Close(ram)
	if err := c.DMAMap(0, 1<<20, ram, 0, DMARead); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
	if len(dev.dma) != 0 {
		t.Fatal("Close left a DMA region with the device")
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
	if _, err := c.GetDeviceInfo(); err == nil {
		t.Fatal("the client is still served after Close")
	}
	c.Close()
}

// Listen replaces a socket file nobody listens on and refuses one a live server holds.
func TestListenStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(Config{SocketPath: path}, newFakeDev(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Listen(); err == nil {
		t.Fatal("Listen took the socket of a live server")
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // a stale file stays
	srv, err := New(Config{SocketPath: path}, newFakeDev(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	c := dial(t, path)
	if _, err := c.Version(); err != nil {
		t.Fatal(err)
	}
	cancel() // a context ends Serve as Close does
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// New refuses descriptions QEMU would refuse and sparse areas outside their region.
func TestNewRefusesBadDescriptions(t *testing.T) {
	dev := newFakeDev(t)
	for _, d := range []Description{
		{Regions: make([]Region, 101)},
		{IRQs: make([]IRQ, 51)},
		{Regions: []Region{{Size: 4096, Mmap: &RegionMmap{File: dev.bar2, Areas: []SparseArea{{0, 8192}}}}}},
		{Regions: []Region{{Size: 8192, Mmap: &RegionMmap{File: dev.bar2, Areas: []SparseArea{{100, 4096}}}}}},
		{Regions: []Region{{Size: 8192, Mmap: &RegionMmap{Areas: []SparseArea{{0, 4096}}}}}},
	} {
		if _, err := New(Config{}, descDev{dev, d}); err == nil {
			t.Errorf("New accepted %+v", d)
		}
	}
}

type descDev struct {
	*fakeDev
	d Description
}

func (d descDev) Describe() Description { return d.d }

// serveCancelable serves srv on one end of a socketpair until cancel; it returns a client on
// the other end (past VERSION), that end itself, and where ServeConn's result arrives.
func serveCancelable(t *testing.T, srv *Server) (*Client, *net.UnixConn, context.CancelFunc, <-chan error) {
	a, b := socketpair(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(ctx, a) }()
	c := NewClient(b)
	t.Cleanup(func() { c.Close() })
	if _, err := c.Version(); err != nil {
		t.Fatal(err)
	}
	return c, b, cancel, done
}

// Ending ServeConn's context releases the client as a hang-up does.
func TestServeConnContextEnds(t *testing.T) {
	dev := newFakeDev(t)
	c, _, cancel, done := serveCancelable(t, newServer(t, dev))
	ram := memfd(t, 1<<20, nil)
	defer unix.Close(ram)
	if err := c.DMAMap(0, 1<<20, ram, 0, DMARead|DMAWrite); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeConn after its context ended: %v", err)
	}
	if calls := dev.takeCalls(); len(calls) != 3 || calls[1] != "unmap 0x0 0x100000" || calls[2] != "reset" {
		t.Fatalf("device calls %q", calls)
	}
	if _, err := c.GetDeviceInfo(); err == nil {
		t.Fatal("still served after the context ended")
	}
}

// mapRAM has c negotiate its version and map 1 MiB of fresh shared memory at address 0 for
// reading and writing; the memory's descriptor is closed when the test ends.
func mapRAM(t *testing.T, c *Client) {
	t.Helper()
	if _, err := c.Version(); err != nil {
		t.Fatal(err)
	}
	ram := memfd(t, 1<<20, nil)
	t.Cleanup(func() { unix.Close(ram) })
	if err := c.DMAMap(0, 1<<20, ram, 0, DMARead|DMAWrite); err != nil {
		t.Fatal(err)
	}
}

// ClientGone hears of each client that went once what it gave is back: its DMA regions unmapped
// and the device reset by then, and the hang-up reported as no error.
func TestClientGoneAfterRelease(t *testing.T) {
	dev := newFakeDev(t)
	gone := make(chan []string, 1)
	srv, err := New(Config{ClientGone: func(err error) {
		if err != nil {
			t.Errorf("a hang-up reported as %v", err)
		}
		gone <- dev.takeCalls()
	}}, dev)
	if err != nil {
		t.Fatal(err)
	}
	a, b := socketpair(t)
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(context.Background(), a) }()
	c := NewClient(b)
	mapRAM(t, c)
	c.Close()
	if calls := <-gone; len(calls) != 3 || calls[1] != "unmap 0x0 0x100000" || calls[2] != "reset" {
		t.Fatalf("device calls by the time ClientGone ran: %q", calls)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// blockingDev is a fakeDev whose BAR0 write at offset 0 waits until unblock is closed: a
// device busy with one request while its client keeps sending.
type blockingDev struct {
	*fakeDev
	entered, unblock chan struct{}
}

func (d *blockingDev) RegionWrite(index uint32, off uint64, data []byte) error {
	if index == 0 && off == 0 {
		close(d.entered)
		<-d.unblock
	}
	return d.fakeDev.RegionWrite(index, off, data)
}

// A server stopped while its client's requests wait unread ends the connection with a
// shutdown and a drain: the client reads end of file, not a reset (which QEMU 11.1's vfio-user
// client does not survive).
func TestServeConnEndsWithoutResettingClient(t *testing.T) {
	dev := &blockingDev{newFakeDev(t), make(chan struct{}), make(chan struct{})}
	c, b, cancel, done := serveCancelable(t, newServer(t, dev))
	if err := c.RegionWrite(0, 0, []byte{1, 2, 3, 4}, true); err != nil {
		t.Fatal(err)
	}
	<-dev.entered
	for i := range 8 { // posted doorbells the server has not read when it stops
		if err := c.RegionWrite(0, 8, []byte{byte(i), 0, 0, 0}, true); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	close(dev.unblock)
	if err := <-done; err != nil {
		t.Fatalf("ServeConn after its context ended: %v", err)
	}
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf [64]byte
	if n, err := b.Read(buf[:]); n != 0 || err != io.EOF {
		t.Fatalf("client read %d bytes, %v; want end of file", n, err)
	}
}

// guardRecorder is a Config.Guard that notes what it is lent and given back.
type guardRecorder struct {
	mu     sync.Mutex
	events []string
}

func (g *guardRecorder) note(e string) { g.mu.Lock(); g.events = append(g.events, e); g.mu.Unlock() }

func (g *guardRecorder) Hold(conn syscall.Conn) (func(), error) {
	g.note("hold")
	return func() { g.note("release") }, nil
}

// The guard is lent the connection before the first request is served and given it back once
// the connection is closed, before the client is reported gone.
func TestServeConnLendsConnectionToGuard(t *testing.T) {
	g := &guardRecorder{}
	srv, err := New(Config{Guard: g, ClientGone: func(error) { g.note("gone") }}, newFakeDev(t))
	if err != nil {
		t.Fatal(err)
	}
	c, wait := serve(t, srv)
	if _, err := c.GetDeviceInfo(); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	during := slices.Clone(g.events)
	g.mu.Unlock()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(during, []string{"hold"}) || !slices.Equal(g.events, []string{"hold", "release", "gone"}) {
		t.Fatalf("guard saw %q while serving, %q in all", during, g.events)
	}
}
