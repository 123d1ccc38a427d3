package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/hw/driver"
	"github.com/softirdma/softirdma/hw/vfiouser"
	"github.com/softirdma/softirdma/internal/vfiobus"
	"github.com/softirdma/softirdma/wire/decode"
	"github.com/softirdma/softirdma/wire/roce"
)

// -function's syntax: each mistake is refused with the key or the clash it is about.
func TestServeFunctionFlags(t *testing.T) {
	dir := t.TempDir()
	a, b := "name=a,socket="+filepath.Join(dir, "a.sock"), "name=b,socket="+filepath.Join(dir, "b.sock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-function", "name=a"}, "has no socket"},
		{[]string{"-function", "socket=/tmp/x.sock"}, "a name is 1 to 32"},
		{[]string{"-function", a + ",colour=red"}, `unknown key "colour"`},
		{[]string{"-function", "name=a,name=b,socket=" + filepath.Join(dir, "a.sock")}, "function a: name= given twice (name=a and name=b)"},
		{[]string{"-function", a + ",ip=10.0.0.1,ip=10.0.0.2"}, "function a: ip= given twice (ip=10.0.0.1 and ip=10.0.0.2)"},
		{[]string{"-function", a + ",socket=" + filepath.Join(dir, "c.sock")}, "function a: socket= given twice"},
		{[]string{"-function", a + ",ip"}, "is not KEY=VALUE"},
		{[]string{"-function", a + ",ip=300.1.1.1"}, "is not an IPv4 address"},
		{[]string{"-function", a + ",mac=01:00:00:00:00:01"}, "mac=01:00:00:00:00:01 is a multicast"},
		{[]string{"-function", a, "-function", a}, "two functions named a"},
		{[]string{"-function", a + ",ip=10.0.0.1", "-function", b + ",ip=10.0.0.1"}, "with one address 10.0.0.1"},
		{[]string{"-function", a, "-function", "name=b,socket=" + filepath.Join(dir, "a.sock")}, "on one socket"},
		{[]string{"-function", "name=a,socket=" + dir}, "is a directory"},
		{[]string{"-function", a, "-socket", filepath.Join(dir, "s.sock")}, "-socket and -function exclude each other"},
		{[]string{"-function", a, "-function", b, "-control", filepath.Join(dir, "b.sock")},
			"softirdma serve: -control " + filepath.Join(dir, "b.sock") + " is function b's socket: the control socket and a function's socket must differ, e.g. -control " + filepath.Join(dir, "ctl.sock") + "\n"},
		{[]string{"-function", a, "-control", dir + "/../" + filepath.Base(dir) + "/./a.sock"}, "is function a's socket: the control socket and a function's socket must differ"},
		{[]string{"-socket", filepath.Join(dir, "s.sock"), "-control", filepath.Join(dir, "s.sock")},
			"softirdma serve: -control " + filepath.Join(dir, "s.sock") + " is -socket's too: the control socket and a function's socket must differ, e.g. -control " + filepath.Join(dir, "ctl.sock") + "\n"},
		{[]string{"-function", a, "-ip", "10.0.0.1"}, "-ip and -mac are each function's"},
		{[]string{"-function", a, "-link", "afpacket:eth0"}, "the fabric's uplink is a dgram or stream link"},
		{[]string{"-function", a, "-link", "dgram:127.0.0.1:1"}, "dgram:LOCAL,REMOTE"},
	} {
		code, out, errs := runCLI(append([]string{"serve"}, c.args...)...)
		if code != 2 || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("serve %q: exit %d, stdout %q, stderr %q, want %q", c.args, code, out, errs, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("serve made %v before refusing", ents)
	}
}

// fabricGuest is a guest of one function of a fabric serve: a vfio-user client, its RAM, the Go
// driver, an MR, a CQ and an RC QP.
type fabricGuest struct {
	bus *vfiobus.Bus
	d   *driver.Driver
	mr  driver.MR
	cq  *driver.CQ
	qp  *driver.QP
	ip  netip.Addr
}

const fabricRAMBase, fabricRAMSize = 0x100000, 8 << 20

func attachFabricGuest(t *testing.T, sock string, ip netip.Addr) *fabricGuest {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := vfiouser.NewClient(conn)
	t.Cleanup(func() { c.Close() })
	g := &fabricGuest{bus: vfiobus.Attach(t, c, fabricRAMBase, fabricRAMSize), ip: ip}
	if g.d, err = driver.Open(g.bus, driver.Arena{Base: fabricRAMBase, Size: fabricRAMSize}); err != nil {
		t.Fatal(err)
	}
	pd, err := g.d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if g.mr, err = g.d.RegMR(pd, 1<<16, 1|2|4); err != nil {
		t.Fatal(err)
	}
	if g.cq, err = g.d.CreateCQ(5, nil); err != nil {
		t.Fatal(err)
	}
	if g.qp, err = g.d.CreateQP(pd, g.cq, g.cq, driver.QPCaps{SendLog: 3, RecvLog: 3, MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
		t.Fatal(err)
	}
	return g
}

// connectTo takes g's QP to RTS towards peer's.
func (g *fabricGuest) connectTo(t *testing.T, peer *fabricGuest) {
	t.Helper()
	for _, m := range []struct {
		a    driver.QPAttr
		mask uint32
	}{
		{driver.QPAttr{State: 1, PortNum: 1, AccessFlags: 2 | 4}, 1 | 8 | 16 | 32},
		{driver.QPAttr{State: 2, PathMTU: 3, DestQPN: peer.qp.Num, MaxDestRdAtomic: 4, MinRNRTimer: 12, HopLimit: 64,
			DGID: netip.AddrFrom16(peer.ip.As16()).As16()}, 1 | 128 | 256 | 1<<20 | 1<<12 | 1<<17 | 1<<15},
		{driver.QPAttr{State: 3, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}, 1 | 1<<16 | 1<<9 | 1<<10 | 1<<11 | 1<<13},
	} {
		if err := g.qp.Modify(m.a, m.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// write has g WRITE data into peer's MR at off and waits for the completion.
func (g *fabricGuest) write(t *testing.T, peer *fabricGuest, data []byte, off uint64) {
	t.Helper()
	if err := g.bus.WriteMem(g.mr.Addr, data); err != nil {
		t.Fatal(err)
	}
	if err := g.qp.PostSend(driver.SendWR{ID: 1, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled,
		SGL: []driver.SGE{{Addr: g.mr.Addr, Length: uint32(len(data)), Key: g.mr.Key}}, RemoteAddr: peer.mr.Addr + off, RKey: peer.mr.Key}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		wcs, err := g.cq.Poll(1)
		if err != nil {
			t.Fatal(err)
		}
		if len(wcs) == 1 {
			if wcs[0].Status != 0 {
				t.Fatalf("WRITE completion %+v", wcs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion for the WRITE in 20 s")
		}
		time.Sleep(time.Millisecond)
	}
	got := make([]byte, len(data))
	if err := peer.bus.ReadMem(peer.mr.Addr+off, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the WRITE did not land in the peer's memory (%v)", err)
	}
}

// Two functions of one serve on its fabric: each guest's driver (the Go one) WRITEs into the
// other's memory through the in-process switch; the first guest goes and a new one on its
// socket finds its function reset, and WRITEs again, the other guest's function untouched;
// the fabric's pcap decodes clean with every frame between the two.
func TestServeFabric(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "fabric.pcap")
	ipA, ipB := netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")
	sockA, sockB, out, errs, stop := startFabric(t, fabricOptions{pcap: pcap})
	for _, want := range []string{"function a (192.0.2.11) listening on " + sockA, "function b (192.0.2.12) listening on " + sockB} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("serve printed %q, want a line %q", out.String(), want)
		}
	}
	a, b := attachFabricGuest(t, sockA, ipA), attachFabricGuest(t, sockB, ipB)
	a.connectTo(t, b)
	b.connectTo(t, a)
	a.write(t, b, bytes.Repeat([]byte("a->b "), 800), 0)
	b.write(t, a, bytes.Repeat([]byte("b->a "), 800), 8192)

	// The first guest goes; its function is reset for the next, b's QP goes on.
	a.bus.C.Close()
	waitFor(t, "a's client gone", func() bool { return strings.Contains(errs.String(), `msg="client gone" function=a`) }, nil, errs)
	a2 := attachFabricGuest(t, sockA, ipA)
	if a2.qp.Num == 0 {
		t.Fatal("no QP on the reset function")
	}
	a2.connectTo(t, b)
	// b's QP was connected to the old a's QP: take it through RESET to the new one.
	if err := b.qp.Modify(driver.QPAttr{State: 0}, 1); err != nil {
		t.Fatal(err)
	}
	b.connectTo(t, a2)
	a2.write(t, b, bytes.Repeat([]byte("again "), 500), 16384)
	b.write(t, a2, bytes.Repeat([]byte("back "), 500), 0)

	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d: %s", code, errs.String())
	}
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dec strings.Builder
	sum, err := decode.Run(f, &dec, decode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Malformed != 0 || sum.ICRCBad != 0 || sum.RoCEv2 < 8 {
		t.Fatalf("the fabric's pcap: %+v", sum)
	}
	for _, want := range []string{"192.0.2.11 -> 192.0.2.12", "192.0.2.12 -> 192.0.2.11"} {
		if !strings.Contains(dec.String(), want) {
			t.Fatalf("the pcap has no frame %s", want)
		}
	}
}

// startFabric runs serveFabric with functions a (192.0.2.11) and b (192.0.2.12) and o's other
// options, and waits until both listen. It returns the two sockets' paths, serve's output and
// log, and stop, which ends serve and gives its exit status (the test's end stops it too).
func startFabric(t *testing.T, o fabricOptions) (sockA, sockB string, out, errs *lockedBuffer, stop func() int) {
	t.Helper()
	dir := t.TempDir()
	sockA, sockB = filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	for _, v := range []string{"name=a,socket=" + sockA + ",ip=192.0.2.11", "name=b,socket=" + sockB + ",ip=192.0.2.12"} {
		if err := o.functions.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, errs = &lockedBuffer{}, &lockedBuffer{}
	code, ended := 0, make(chan struct{})
	go func() {
		code = serveFabric(ctx, o, out, errs)
		close(ended)
	}()
	stop = func() int {
		cancel()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop")
		}
		return code
	}
	t.Cleanup(func() { stop() })
	waitFor(t, "both functions listening", func() bool { return strings.Count(out.String(), "listening on") == 2 }, ended, errs)
	return sockA, sockB, out, errs, stop
}

// fault runs `softirdma fault -socket ctl ARGS...`.
func fault(ctl string, args ...string) (int, string, string) {
	return runCLI(append([]string{"fault", "-socket", ctl}, args...)...)
}

// A fault given at the start drops a's first WRITE, which a sends again after its ACK timeout:
// the WRITE completes and lands, and the control socket lists the fault as fired once, having
// seen both, on the capture's frame that holds the first WRITE; the capture holds the WRITE sent
// again after it. Faults added, listed and removed at run time; a corruption added through the
// socket is dropped by the receiver's ICRC check and the WRITE completes all the same.
func TestServeFabricFaults(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	var o fabricOptions
	o.control = ctl
	o.pcap = filepath.Join(t.TempDir(), "fabric.pcap")
	if err := o.faults.Set("drop from=a opcode=RDMA_WRITE_ONLY nth=1 name=first-write"); err != nil {
		t.Fatal(err)
	}
	sockA, sockB, out, _, _ := startFabric(t, o)
	if !strings.Contains(out.String(), "control socket "+ctl) {
		t.Fatalf("no control socket line: %s", out.String())
	}
	if fi, err := os.Stat(ctl); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket mode: %v %v", fi, err)
	}
	a, b := attachFabricGuest(t, sockA, netip.MustParseAddr("192.0.2.11")), attachFabricGuest(t, sockB, netip.MustParseAddr("192.0.2.12"))
	a.connectTo(t, b)
	b.connectTo(t, a)
	a.write(t, b, bytes.Repeat([]byte{0xa5}, 512), 0)
	code, list, errs := fault(ctl, "list")
	var n int
	if _, err := fmt.Sscanf(list, "1 fired=1 seen=2 frames=%d drop from=a opcode=RC_RDMA_WRITE_ONLY nth=1 name=first-write\n", &n); code != 0 || err != nil {
		t.Fatalf("list: %d %q %q (%v)", code, list, errs, err)
	}
	// The capture's frame n is a's first WRITE; the next WRITE from a carries the same PSN.
	frames := readPackets(t, o.pcap)
	var dropped, again *roce.Frame
	for i := n - 1; i < len(frames); i++ {
		var f roce.Frame
		if err := new(roce.Parser).Parse(&f, frames[i].data); err != nil || f.Opcode != roce.RCWriteOnly || f.SrcIP() != netip.MustParseAddr("192.0.2.11") {
			if i == n-1 {
				t.Fatalf("frame %d of the capture is not a's WRITE (%v): %x", n, err, frames[i].data)
			}
			continue
		}
		if dropped == nil {
			dropped = &f
		} else {
			again = &f
			break
		}
	}
	if again == nil || again.BTH.PSN() != dropped.BTH.PSN() || again.BTH.DestQP() != dropped.BTH.DestQP() {
		t.Fatalf("the dropped WRITE (frame %d) was not sent again: %v", n, again)
	}
	code, added, errs := fault(ctl, "add", "corrupt", "from=b", "opcode=RDMA_WRITE_ONLY", "count=1")
	if code != 0 || added != "fault 2 added\n" {
		t.Fatalf("add: %d %q %q", code, added, errs)
	}
	b.write(t, a, bytes.Repeat([]byte{0x5a}, 512), 4096)
	if _, list, _ = fault(ctl, "list"); !strings.Contains(list, "2 fired=1 seen=") {
		t.Fatalf("the corruption did not fire: %q", list)
	}
	if code, _, errs := fault(ctl, "remove", "1"); code != 0 {
		t.Fatalf("remove: %d %q", code, errs)
	}
	if code, _, errs := fault(ctl, "remove", "1"); code != 1 || !strings.Contains(errs, "no fault 1") {
		t.Fatalf("remove again: %d %q", code, errs)
	}
	if _, list, _ = fault(ctl, "list"); strings.HasPrefix(list, "1 ") || !strings.HasPrefix(list, "2 ") {
		t.Fatalf("after remove: %q", list)
	}
	// What the ports carried: each function sent and took frames (the dropped WRITE and the
	// corrupted one among them, the faults' and not the switch's), the switch dropped none.
	code, ports, errs := fault(ctl, "ports")
	t.Logf("softirdma fault ports:\n%s", ports)
	lines := strings.Split(strings.TrimSpace(ports), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("ports: %d %q %q", code, ports, errs)
	}
	for i, name := range []string{"a", "b"} {
		var in, inBytes, out, outBytes, dropped, queued uint64
		if _, err := fmt.Sscanf(lines[i], "port "+name+" in_frames=%d in_bytes=%d out_frames=%d out_bytes=%d dropped=%d queued=%d",
			&in, &inBytes, &out, &outBytes, &dropped, &queued); err != nil {
			t.Fatalf("ports line %q: %v", lines[i], err)
		}
		if in < 3 || out < 2 || inBytes < 512+in*54 || dropped != 0 {
			t.Errorf("port %s: %q", name, lines[i])
		}
	}
	// A function's vfio-user socket given for the control socket: named for what it is, at once.
	start := time.Now()
	if code, _, errs := fault(sockA, "list"); code != 1 || errs != "softirdma fault: "+sockA+" is not a softirdma control socket (it answered nothing within 2s: a function's vfio-user socket?)\n" {
		t.Errorf("fault -socket %s list: exit %d, %q", sockA, code, errs)
	} else if d := time.Since(start); d > 8*time.Second {
		t.Errorf("fault -socket %s took %v", sockA, d)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "drop", "from=c"}, "from=c: the fabric has a, b"},
		{[]string{"add", "explode"}, "is not an action"},
		{[]string{"remove", "x"}, "remove takes a fault's number"},
		{[]string{"frobnicate"}, "give add FAULT, list, remove N or ports"},
	} {
		if code, _, errs := fault(ctl, c.args...); code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("fault %q: %d %q, want %q", c.args, code, errs, c.want)
		}
	}
}
