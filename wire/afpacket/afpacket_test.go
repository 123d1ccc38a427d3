package afpacket

import (
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestAdaptersAndGIDs(t *testing.T) {
	ads, err := Adapters()
	if err != nil {
		t.Fatal(err)
	}
	var lo *Adapter
	for i := range ads {
		if ads[i].Name == "lo" {
			lo = &ads[i]
		}
	}
	if lo == nil || !lo.Up || lo.MTU < 1500 {
		t.Fatalf("lo: %+v", lo)
	}
	ad := Adapter{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("fd00::7"), netip.MustParseAddr("fe80::1")}}
	g := ad.GIDs()
	if len(g) != 3 || g[0].String() != "fe80::1" || g[1].String() != "fd00::7" || g[2].String() != "::ffff:192.0.2.7" {
		t.Fatalf("GIDs %v (want rxe's order: link-local, other IPv6, IPv4-mapped)", g)
	}
	if _, err := Lookup("no-such-adapter"); err == nil {
		t.Fatal("looked up a missing adapter")
	}
}

// vethPair makes a veth pair in this namespace for the benchmark (root only).
func vethPair(b *testing.B) (Adapter, Adapter) {
	if os.Geteuid() != 0 {
		b.Skip("a veth pair needs root; make interop runs as root")
	}
	va := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "sibench0", MTU: 9000}, PeerName: "sibench1"}
	_ = netlink.LinkDel(va)
	if err := netlink.LinkAdd(va); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { netlink.LinkDel(va) })
	for _, n := range []string{"sibench0", "sibench1"} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			b.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			b.Fatal(err)
		}
	}
	a, err := Lookup("sibench0")
	if err != nil {
		b.Fatal(err)
	}
	p, err := Lookup("sibench1")
	if err != nil {
		b.Fatal(err)
	}
	return a, p
}

const frameLen = 14 + 20 + 8 + 12 + 16 + 4096 + 4

// BenchmarkAFPacketSend is the link sending 4 KiB RoCEv2-sized frames on a veth in batches of
// 32, next to BenchmarkAFPacketSendBaseline, a plain write loop on a packet socket.
func BenchmarkAFPacketSend(b *testing.B) {
	a, _ := vethPair(b)
	l, err := Open(a, netip.Addr{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	frames := make([][]byte, 32)
	for i := range frames {
		frames[i] = make([]byte, frameLen)
		frames[i][12], frames[i][13] = 0x08, 0x00
	}
	b.SetBytes(frameLen * 32)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.SendBatch(frames); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "frames/s")
}

func BenchmarkAFPacketSendBaseline(b *testing.B) {
	a, _ := vethPair(b)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: a.Index}); err != nil {
		b.Fatal(err)
	}
	frame := make([]byte, frameLen)
	frame[12], frame[13] = 0x08, 0x00
	b.SetBytes(frameLen * 32)
	b.ReportAllocs()
	for b.Loop() {
		for range 32 {
			if _, err := unix.Write(fd, frame); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "frames/s")
}
