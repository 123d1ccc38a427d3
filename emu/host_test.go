package emu

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	mrand "math/rand/v2"

	"github.com/softirdma/softirdma/wire/neigh"
	"github.com/softirdma/softirdma/wire/qemu"
)

// TestHostsOverDgram runs two softirdma devices outside the simulator, joined by real UDP
// sockets the way QEMU's -netdev dgram joins a guest: they find each other by ARP (IPv4) and
// neighbour discovery (IPv6 link-local), lose 2% of what they receive, and still move data.
func TestHostsOverDgram(t *testing.T) {
	la, err := qemu.ListenDgram("127.0.0.1:0", "127.0.0.1:9")
	must(t, err)
	lb, err := qemu.ListenDgram("127.0.0.1:0", la.LocalAddr().String())
	must(t, err)
	must(t, la.SetRemote(lb.LocalAddr().String()))

	macA, macB := [6]byte{2, 0, 0, 0, 0, 0xa}, [6]byte{2, 0, 0, 0, 0, 0xb}
	mk := func(name string, l *qemu.Dgram, mac [6]byte, ip string, seed uint64) *Host {
		h, err := NewHost(HostConfig{Name: name, Link: l, MAC: mac, IP: netip.MustParseAddr(ip), IPs: []netip.Addr{neigh.LinkLocal(mac)},
			Answer: true, RxLoss: 0.02, Rand: mrand.NewPCG(seed, seed)})
		must(t, err)
		go h.Run()
		return h
	}
	ha := mk("A", la, macA, "192.0.2.10", 1)
	hb := mk("B", lb, macB, "192.0.2.11", 2)
	defer ha.Close()
	defer hb.Close()

	for _, peerB := range []netip.Addr{netip.MustParseAddr("192.0.2.11"), neigh.LinkLocal(macB)} {
		peerA := netip.MustParseAddr("192.0.2.10")
		if peerB.Is6() {
			peerA = neigh.LinkLocal(macA)
		}
		a, b := ha.Device(), hb.Device()
		pdA, _ := a.AllocPD()
		pdB, _ := b.AllocPD()
		cqA, _ := a.CreateCQ(64)
		cqB, _ := b.CreateCQ(64)
		caps := QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
		qa, err := pdA.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cqA, RecvCQ: cqA, Cap: caps})
		must(t, err)
		qb, err := pdB.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cqB, RecvCQ: cqB, Cap: caps})
		must(t, err)
		// ConnectRC points each QP at its peer's first address; here the AVs name the family
		// under test, as ibv_rc_pingpong's -g does.
		connect(t, qa, qb, peerB, peerA)
		bufA, bufB := make([]byte, 1<<16), make([]byte, 1<<16)
		fill(bufA, 5)
		mrA, _ := pdA.RegMR(bufA, AccessLocalWrite)
		mrB, _ := pdB.RegMR(bufB, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
		must(t, qb.PostRecv(RecvWR{ID: 9, SGL: sge(mrB, 32768, 8192)}))
		must(t, qa.PostSend(
			SendWR{ID: 1, Opcode: WRRDMAWrite, SGL: sge(mrA, 0, 20000), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()},
			SendWR{ID: 2, Opcode: WRRDMARead, SGL: sge(mrA, 40000, 20000), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()},
			SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: sge(mrA, 0, 4096)}))
		deadline := time.Now().Add(20 * time.Second)
		for cqA.Len() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		wantWC(t, poll(cqA), WC{WRID: 3, Opcode: WCSend})
		for cqB.Len() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		wantWC(t, poll(cqB), WC{WRID: 9, Opcode: WCRecv, ByteLen: 4096})
		if !bytes.Equal(bufB[:20000], bufA[:20000]) || !bytes.Equal(bufA[40000:60000], bufA[:20000]) || !bytes.Equal(bufB[32768:32768+4096], bufA[:4096]) {
			t.Fatalf("%s: data differs", peerB)
		}
	}
	// Each side asked for the other or learned it from the other's request.
	if ha.Stats().NeighborReplies+hb.Stats().NeighborReplies < 2 {
		t.Fatalf("neighbour replies %d %d", ha.Stats().NeighborReplies, hb.Stats().NeighborReplies)
	}
	for _, c := range []struct {
		h   *Host
		ip  netip.Addr
		mac [6]byte
	}{{ha, neigh.LinkLocal(macB), macB}, {ha, netip.MustParseAddr("192.0.2.11"), macB}, {hb, neigh.LinkLocal(macA), macA}, {hb, netip.MustParseAddr("192.0.2.10"), macA}} {
		if mac, ok := c.h.Neighbors().Lookup(c.ip); !ok || mac != c.mac {
			t.Fatalf("%s not learned", c.ip)
		}
	}
}

func connect(t *testing.T, qa, qb *QP, addrB, addrA netip.Addr) {
	t.Helper()
	for _, e := range []struct {
		qp, peer *QP
		dgid     netip.Addr
	}{{qa, qb, addrB}, {qb, qa, addrA}} {
		must(t, e.qp.Modify(QPAttr{State: QPSInit, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
		must(t, e.qp.Modify(QPAttr{State: QPSRTR, AH: AHAttr{DGID: e.dgid, HopLimit: 64}, PathMTU: MTU1024, DestQPN: e.peer.Num(), MaxDestRdAtomic: 4, MinRNRTimer: 12},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
		must(t, e.qp.Modify(QPAttr{State: QPSRTS, Timeout: 10, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}, AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic))
	}
}
