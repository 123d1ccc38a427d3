package fabric_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/fabric"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/lockedbuf"
	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
	"github.com/softirdma/softirdma/wire/roce"
)

// textLog is a logger into buf, as serve's.
func textLog(buf io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

// mac is the MAC of port i in these tests.
func mac(i int) [6]byte { return [6]byte{2, 0, 0, 0, 0, byte(i)} }

// rocev2 is an RC WRITE_ONLY frame from port src to port dst with psn, 64 bytes of payload.
func rocev2(t testing.TB, src, dst int, psn uint32) []byte {
	t.Helper()
	p := roce.Path{SrcMAC: mac(src), DstMAC: mac(dst), SrcIP: netip.AddrFrom4([4]byte{192, 0, 2, byte(src)}),
		DstIP: netip.AddrFrom4([4]byte{192, 0, 2, byte(dst)}), SrcPort: 49152, TTL: 64}
	b := roce.NewBuilder(p)
	fr, err := b.Build(make([]byte, b.FrameLen(roce.RCWriteOnly, 64)), &roce.Header{Opcode: roce.RCWriteOnly, DestQP: 0x11, PSN: psn}, make([]byte, 64))
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

// readPcap is every frame of the pcap at path.
func readPcap(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := wire.NewPcapReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for {
		f, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, append([]byte(nil), f...))
	}
}

// newFabric is a fabric of cfg; the test ends if there can be none.
func newFabric(t *testing.T, cfg fabric.Config) *fabric.Fabric {
	t.Helper()
	fab, err := fabric.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fab
}

// addPorts adds ports 1..n, named p1..pn, each having sent a broadcast so that the switch
// knows its MAC.
func addPorts(t *testing.T, fab *fabric.Fabric, n int) []*ethswitch.Port {
	t.Helper()
	var ports []*ethswitch.Port
	for i := 1; i <= n; i++ {
		p, err := fab.AddPort(fmt.Sprintf("p%d", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		m := mac(i)
		hello := append(bytes.Repeat([]byte{0xff}, 6), m[:]...)
		if _, err := p.SendBatch([][]byte{append(hello, make([]byte, 48)...)}); err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	return ports
}

// Senders on several ports at once: the capture, written off the switch's lock, still numbers
// the frames as the fault plan does. Each fault fires on one frame, a PSN of one sender's, and
// the capture's frame of the number the plan gives is that frame; the capture holds every
// frame the plan was shown, and no more.
func TestCaptureNumbersFramesAsTheFaultPlan(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "fabric.pcap")
	fab := newFabric(t, fabric.Config{Pcap: pcap, Faults: true, Log: textLog(io.Discard)})
	ports := addPorts(t, fab, 3)
	const frames = 400
	var want []struct {
		src int
		psn uint32
	}
	for src := 1; src <= 3; src++ {
		for _, psn := range []uint32{7, 150, 399} {
			f, err := faultplan.Parse(fmt.Sprintf("corrupt from=p%d psn=%d nth=1", src, psn))
			if err != nil {
				t.Fatal(err)
			}
			fab.AddFault(f)
			want = append(want, struct {
				src int
				psn uint32
			}{src, psn})
		}
	}
	var wg sync.WaitGroup
	for i, p := range ports {
		src := i + 1
		wg.Go(func() {
			for psn := range uint32(frames) {
				if _, err := p.SendBatch([][]byte{rocev2(t, src, src%3+1, psn)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := fab.Close(); err != nil {
		t.Fatal(err)
	}
	captured := readPcap(t, pcap)
	if len(captured) != 3+3*frames {
		t.Fatalf("captured %d frames, %d were sent", len(captured), 3+3*frames)
	}
	for i, e := range fab.Faults() {
		if e.Fired != 1 || len(e.Frames) != 1 {
			t.Fatalf("%s: fired %d on %v", e.Spec, e.Fired, e.Frames)
		}
		var f roce.Frame
		data := captured[e.Frames[0]-1]
		if err := new(roce.Parser).Parse(&f, data); roce.KindOf(err) != roce.KindBadICRC || [6]byte(data[6:12]) != mac(want[i].src) || f.BTH.PSN() != want[i].psn {
			t.Errorf("%s fired on frame %d: from %x, PSN %d, %v", e.Spec, e.Frames[0], data[6:12], f.BTH.PSN(), err)
		}
	}
}

// The capture is written off the switch's lock: a pcap whose reader does not keep up (a FIFO
// nobody reads yet) holds up no frame between ports while it has room in its queue, and once
// read holds them all.
func TestSlowCaptureDoesNotHoldUpTheSwitch(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fabric.pcap")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	fab := newFabric(t, fabric.Config{Pcap: fifo, Log: textLog(io.Discard)})
	defer fab.Close()
	r, err := os.Open(fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ports := addPorts(t, fab, 2)
	// 512 frames of some 1100 bytes: far more than the pipe holds, fewer than the queue.
	frame := rocev2(t, 1, 2, 0)
	frame = append(frame[:len(frame):len(frame)], make([]byte, 1000)...)
	sent := make(chan error, 1)
	go func() {
		for range 512 {
			if _, err := ports[0].SendBatch([][]byte{frame}); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the switch waited for the capture's file")
	}
	if n := ports[1].Queued(); n != 512 {
		t.Fatalf("port 2 holds %d frames, want 512", n)
	}
	var all bytes.Buffer
	done := make(chan error, 1)
	go func() { _, err := io.Copy(&all, r); done <- err }()
	if err := fab.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	pr, err := wire.NewPcapReader(&all)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; ; n++ {
		if _, _, err := pr.Next(); err != nil {
			break
		}
	}
	if n != 2+512 || fab.CaptureErr() != nil {
		t.Fatalf("the capture holds %d frames (%v), want 514", n, fab.CaptureErr())
	}
}

// New's errors say what could not be done, about which file.
func TestNewPcapErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := fabric.New(fabric.Config{Pcap: filepath.Join(dir, "no", "x.pcap")})
	var fe *fabric.Error
	if !errors.As(err, &fe) || fe.Msg != "cannot create the pcap" || len(fe.Attrs) != 2 || fe.Attrs[1] != filepath.Join(dir, "no", "x.pcap") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a pcap in no directory: %#v", err)
	}
	if _, err := fabric.New(fabric.Config{Pcap: "/dev/full"}); !errors.As(err, &fe) || fe.Msg != "cannot write the pcap" || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a pcap on a full device: %v", err)
	}
}

// A Go program's fabric of two functions: each answers a vfio-user client on its socket as the
// softirdma function, the ports are counted by name, faults come and go, and Close removes the
// sockets.
func TestFabricOfFunctions(t *testing.T) {
	dir := t.TempDir()
	var log lockedbuf.Buffer
	fab := newFabric(t, fabric.Config{Log: textLog(&log), Faults: true})
	defer fab.Close()
	var socks []string
	var fns []*fabric.Function
	for i, name := range []string{"a", "b"} {
		sock := filepath.Join(dir, name+".sock")
		fn, err := fab.AddFunction(fabric.FunctionSpec{Name: name, Socket: sock, IP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), MAC: mac(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		socks, fns = append(socks, sock), append(fns, fn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- fabric.Serve(ctx, fns...) }()
	_, err := fab.AddFunction(fabric.FunctionSpec{Name: "c", Socket: filepath.Join(dir, "no", "c.sock"), IP: netip.MustParseAddr("192.0.2.3"), MAC: mac(3)})
	var fe *fabric.Error
	if !errors.As(err, &fe) || fe.Msg != "cannot listen" || fmt.Sprint(fe.Attrs) != "[function c socket "+filepath.Join(dir, "no", "c.sock")+"]" {
		t.Fatalf("a function in no directory: %v", err)
	}
	for _, sock := range socks {
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		c := vfiouser.NewClient(conn)
		id := make([]byte, 2)
		if _, err := c.Version(); err != nil {
			t.Fatal(err)
		}
		if err := c.RegionRead(vfiouser.PCIConfigRegion, 0, id); err != nil || id[0] != abi.PCIVendorID&0xff {
			t.Fatalf("%s: vendor % x %v", sock, id, err)
		}
		c.Close()
	}
	var names []string
	for _, p := range fab.Ports() {
		names = append(names, p.Name)
	}
	if fmt.Sprint(names) != "[a b]" {
		t.Fatalf("ports %v", names)
	}
	f, _ := faultplan.Parse("drop from=a nth=2")
	if id := fab.AddFault(f); id != 1 || len(fab.Faults()) != 1 || !fab.RemoveFault(1) || fab.RemoveFault(1) {
		t.Fatalf("add and remove: %d %v", id, fab.Faults())
	}
	for _, want := range []string{`msg="fault added" id=1 fault="drop from=a nth=2"`, `msg="fault removed" id=1`} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("no line %q:\n%s", want, log.String())
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := fab.Close(); err != nil {
		t.Fatal(err)
	}
	for _, sock := range socks {
		if _, err := os.Lstat(sock); !os.IsNotExist(err) {
			t.Errorf("%s left after Close: %v", sock, err)
		}
	}
}

// CheckFault refuses a sender the fabric has not, naming those it has.
func TestCheckFault(t *testing.T) {
	f, _ := faultplan.Parse("drop from=c")
	if err := fabric.CheckFault(f, []string{"a", "b", "uplink"}); err == nil || err.Error() != "from=c: the fabric has a, b, uplink" {
		t.Fatalf("from=c: %v", err)
	}
	if f, _ = faultplan.Parse("drop from=b"); fabric.CheckFault(f, []string{"a", "b"}) != nil {
		t.Fatal("from=b refused")
	}
}
