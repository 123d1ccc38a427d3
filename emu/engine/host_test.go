package engine_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	mrand "math/rand/v2"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/wire/neigh"
	"github.com/softirdma/softirdma/wire/qemu"
)

// dgramHosts are hosts A (192.0.2.10) and B (192.0.2.11), each also at its IPv6 link-local
// address, joined by UDP sockets on loopback as QEMU's -netdev dgram joins a guest, each
// losing the fraction loss of what it receives.
func dgramHosts(t *testing.T, loss float64) (ha, hb *realtime.Host) {
	la, err := qemu.ListenDgram("127.0.0.1:0", "127.0.0.1:9")
	must(t, err)
	lb, err := qemu.ListenDgram("127.0.0.1:0", la.LocalAddr().String())
	must(t, err)
	must(t, la.SetRemote(lb.LocalAddr().String()))
	mk := func(name string, l *qemu.Dgram, mac [6]byte, ip string, seed uint64) *realtime.Host {
		h, err := realtime.NewHost(realtime.HostConfig{Name: name, Link: l, MAC: mac, IP: netip.MustParseAddr(ip), IPs: []netip.Addr{neigh.LinkLocal(mac)},
			Answer: true, RxLoss: loss, Rand: mrand.NewPCG(seed, seed)})
		must(t, err)
		go h.Run()
		t.Cleanup(func() { h.Close() })
		return h
	}
	return mk("A", la, [6]byte{2, 0, 0, 0, 0, 0xa}, "192.0.2.10", 1), mk("B", lb, [6]byte{2, 0, 0, 0, 0, 0xb}, "192.0.2.11", 2)
}

// A host given new addresses while it runs answers ARP for the new one with its new MAC, and a
// peer reaches its device there.
func TestHostSetAddresses(t *testing.T) {
	ha, hb := dgramHosts(t, 0)
	newIP, newMAC := netip.MustParseAddr("192.0.2.77"), [6]byte{2, 0, 0, 0, 0, 0x77}
	hb.SetAddresses(newMAC, newIP, []netip.Addr{neigh.LinkLocal(newMAC)})
	if hb.Device().IP() != newIP || hb.Device().MAC() != newMAC {
		t.Fatalf("device at %s %x", hb.Device().IP(), hb.Device().MAC())
	}
	pdA, pdB, cqA, _, qa, qb := qpPair(t, ha.Device(), hb.Device(), 4)
	connect(t, qa, qb, newIP, netip.MustParseAddr("192.0.2.10"))
	if mac, ok := ha.Neighbors().Lookup(newIP); !ok || mac != newMAC {
		t.Fatalf("A learned %x for %s (%v), want %x", mac, newIP, ok, newMAC)
	}
	bufA, bufB := []byte("to the new address"), make([]byte, 64)
	mrA, _ := pdA.RegMR(bufA, engine.AccessLocalWrite)
	mrB, _ := pdB.RegMR(bufB, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(t, qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(mrA, 0, uint32(len(bufA))), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}))
	waitCQ(cqA, time.Now().Add(20*time.Second))
	wantWC(t, poll(cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, ByteLen: uint32(len(bufA))})
}

// TestHostsOverDgram runs two softirdma devices outside the simulator, joined by real UDP
// sockets the way QEMU's -netdev dgram joins a guest: they find each other by ARP (IPv4) and
// neighbour discovery (IPv6 link-local), lose 2% of what they receive, and still move data.
func TestHostsOverDgram(t *testing.T) {
	ha, hb := dgramHosts(t, 0.02)
	macA, macB := ha.Device().MAC(), hb.Device().MAC()
	for _, peerB := range []netip.Addr{netip.MustParseAddr("192.0.2.11"), neigh.LinkLocal(macB)} {
		peerA := netip.MustParseAddr("192.0.2.10")
		if peerB.Is6() {
			peerA = neigh.LinkLocal(macA)
		}
		pdA, pdB, cqA, cqB, qa, qb := qpPair(t, ha.Device(), hb.Device(), 16)
		// ConnectRC points each QP at its peer's first address; here the AVs name the family
		// under test, as ibv_rc_pingpong's -g does.
		connect(t, qa, qb, peerB, peerA)
		checkWriteReadSend(t, wallTraffic{pdA: pdA, pdB: pdB, cqA: cqA, cqB: cqB, qa: qa, qb: qb,
			recvLen: 8192, sendLen: 4096, seed: 5, deadline: 20 * time.Second}, peerB.String())
	}
	// Each side asked for the other or learned it from the other's request.
	if ha.Stats().NeighborReplies+hb.Stats().NeighborReplies < 2 {
		t.Fatalf("neighbour replies %d %d", ha.Stats().NeighborReplies, hb.Stats().NeighborReplies)
	}
	for _, c := range []struct {
		h   *realtime.Host
		ip  netip.Addr
		mac [6]byte
	}{{ha, neigh.LinkLocal(macB), macB}, {ha, netip.MustParseAddr("192.0.2.11"), macB}, {hb, neigh.LinkLocal(macA), macA}, {hb, netip.MustParseAddr("192.0.2.10"), macA}} {
		if mac, ok := c.h.Neighbors().Lookup(c.ip); !ok || mac != c.mac {
			t.Fatalf("%s not learned", c.ip)
		}
	}
}

// qpPair makes an RC QP on a and one on b, each in a PD of its own with one CQ for both
// directions, depth work requests deep.
func qpPair(t testing.TB, a, b *engine.Device, depth int) (pdA, pdB *engine.PD, cqA, cqB *engine.CQ, qa, qb *engine.QP) {
	t.Helper()
	pdA, _ = a.AllocPD()
	pdB, _ = b.AllocPD()
	cqA, _ = a.CreateCQ(4 * depth)
	cqB, _ = b.CreateCQ(4 * depth)
	caps := engine.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}
	var err error
	qa, err = pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cqA, RecvCQ: cqA, Cap: caps})
	must(t, err)
	qb, err = pdB.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cqB, RecvCQ: cqB, Cap: caps})
	must(t, err)
	return
}

func connect(t testing.TB, qa, qb *engine.QP, addrB, addrA netip.Addr) {
	t.Helper()
	for _, e := range []struct {
		qp, peer *engine.QP
		dgid     netip.Addr
	}{{qa, qb, addrB}, {qb, qa, addrA}} {
		must(t, e.qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, AccessFlags: engine.AccessRemoteWrite | engine.AccessRemoteRead}, engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags))
		must(t, e.qp.Modify(engine.QPAttr{State: engine.QPSRTR, AH: engine.AHAttr{DGID: e.dgid, HopLimit: 64}, PathMTU: engine.MTU1024, DestQPN: e.peer.Num(), MaxDestRdAtomic: 4, MinRNRTimer: 12},
			engine.AttrState|engine.AttrAV|engine.AttrPathMTU|engine.AttrDestQPN|engine.AttrRQPSN|engine.AttrMaxDestRdAtomic|engine.AttrMinRNRTimer))
		must(t, e.qp.Modify(engine.QPAttr{State: engine.QPSRTS, Timeout: 10, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}, engine.AttrState|engine.AttrSQPSN|engine.AttrTimeout|engine.AttrRetryCnt|engine.AttrRNRRetry|engine.AttrMaxQPRdAtomic))
	}
}

// A host whose device has an Ethernet side (a guest's netdev behind the PCI function) leaves
// ARP for its addresses to it: it learns who asked, answers nothing, and hands the request on.
func TestHostLeavesARPToEthernet(t *testing.T) {
	ha, hb := dgramHosts(t, 0)
	got := make(chan []byte, 4)
	hb.Device().OnOtherFrame(func(f []byte) { got <- f })
	req := (&neigh.Responder{MAC: ha.Device().MAC(), IPs: []netip.Addr{ha.Device().IP()}}).Request(nil, netip.MustParseAddr("192.0.2.11"))
	ha.Device().SendFrame(req)
	select {
	case f := <-got:
		if !bytes.Equal(f, req) {
			t.Fatalf("B's netdev got % x, want the ARP request", f)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the ARP request did not reach B's Ethernet side")
	}
	if n := hb.Stats().NeighborReplies; n != 0 {
		t.Fatalf("B's host answered %d times for its netdev", n)
	}
	if mac, ok := hb.Neighbors().Lookup(netip.MustParseAddr("192.0.2.10")); !ok || mac != ha.Device().MAC() {
		t.Fatalf("B's host did not learn A from the request: %x %v", mac, ok)
	}
}
