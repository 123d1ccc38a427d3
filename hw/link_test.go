package hw

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/internal/devscenario"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// The function on a real link (UDP sockets on loopback, as QEMU's -netdev dgram): its engine is
// made by the host when the driver enables it, with the addresses the driver programmed, and a
// softirdma peer on the other end RDMA-WRITEs through an MR registered from the guest's pages;
// the guest's QP READs back from the peer.
func TestFunctionOnALink(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 1)
	b := newBenchWith(t, func(c *Config) {
		c.Clock = emu.NewWallClock()
		c.Engine = func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *emu.Device { return hs.Rebind(mac, ip, ips) }
	})
	// The driver programs the address the link expects (GID 1, IPv4-mapped) and the MAC.
	g := netip.MustParseAddr("::ffff:192.0.2.1").As16()
	for i := 0; i < 16; i += 4 {
		b.setReg(abi.RegGIDTable+16+uint32(i), binary.LittleEndian.Uint32(g[i:]))
	}
	b.setReg(abi.RegGIDValid, 1<<1)
	b.setReg(abi.RegMACLo, 0x00000002)
	b.setReg(abi.RegMACHi, 0x0100)
	b.enable()
	if hs.Device() != b.f.Device() {
		t.Fatal("the host does not carry the function's engine")
	}
	pdn := b.ok(abi.OpAllocPD, nil)
	cqn, cqSlot := b.cqOnEQ()
	q := b.makeQP(pdn, cqn, 0x150000, 0x113000, 0x160000, 0x114000)
	for i := range 2 {
		binary.LittleEndian.PutUint64(b.at(0x117000+uint64(8*i)), 0x1a0000+uint64(i)*4096)
	}
	key := b.ok(abi.OpRegMR, regMRArgs(pdn, emu.AccessLocalWrite|emu.AccessRemoteWrite|emu.AccessRemoteRead, 0x1a0000, 8192, 0,
		pageListBytes(0x117000, 2, 12, 1)))

	// The peer: a QP on the other host, connected to the guest's.
	peer := hc.Device()
	ppd, _ := peer.AllocPD()
	pcq, _ := peer.CreateCQ(16)
	pqp, err := ppd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: pcq, RecvCQ: pcq,
		Cap: emu.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	src := bytes.Repeat([]byte{0xc3}, 6000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	pmr, err := ppd.RegMR(src, emu.AccessLocalWrite|emu.AccessRemoteRead)
	must(t, err)
	// The guest's QP to the peer at 192.0.2.2; the peer's to the function at 192.0.2.1.
	b.connectTo(q, pqp.Num(), "::ffff:192.0.2.2", emu.AccessRemoteWrite|emu.AccessRemoteRead)
	must(t, pqp.Modify(emu.QPAttr{State: emu.QPSInit, Port: 1, AccessFlags: emu.AccessRemoteRead | emu.AccessRemoteWrite},
		emu.AttrState|emu.AttrPKeyIndex|emu.AttrPort|emu.AttrAccessFlags))
	must(t, pqp.Modify(emu.QPAttr{State: emu.QPSRTR, AH: emu.AHAttr{DGID: netip.MustParseAddr("192.0.2.1"), HopLimit: 64},
		PathMTU: emu.MTU1024, DestQPN: q.qpn, MaxDestRdAtomic: 4, MinRNRTimer: 12},
		emu.AttrState|emu.AttrAV|emu.AttrPathMTU|emu.AttrDestQPN|emu.AttrRQPSN|emu.AttrMaxDestRdAtomic|emu.AttrMinRNRTimer))
	must(t, pqp.Modify(emu.QPAttr{State: emu.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
		emu.AttrState|emu.AttrSQPSN|emu.AttrTimeout|emu.AttrRetryCnt|emu.AttrRNRRetry|emu.AttrMaxQPRdAtomic))

	// The peer WRITEs 6000 bytes through the guest MR's rkey.
	must(t, pqp.PostSend(emu.SendWR{ID: 1, Opcode: emu.WRRDMAWrite, Flags: emu.SendSignaled,
		SGL: []emu.SGE{{Addr: pmr.Addr(), Length: 6000, LKey: pmr.LKey()}}, RemoteAddr: 0x1a0000, RKey: key}))
	if wc := devscenario.WaitPeer(t, pcq); wc.Status != emu.WCSuccess {
		t.Fatalf("peer WRITE %+v", wc)
	}
	deadline := time.Now().Add(20 * time.Second)
	// The function's engine wrote the bytes under its lock; taking it orders this goroutine's
	// reads after them (the race detector does not see the order the UDP ACK gave).
	sync := func() { _ = b.f.Device().Stats() }
	sync()
	if !bytes.Equal(b.at(0x1a0000)[:4096], src[:4096]) || !bytes.Equal(b.at(0x1a1000)[:6000-4096], src[4096:]) {
		t.Fatal("the WRITE did not land in the guest's pages")
	}
	// The guest READs the peer's buffer back into its MR, from its send queue.
	clear(b.at(0x1a0000)[:6000])
	// Armed, the CQ signals vector 3 once the completion is in its ring: the driver's wait,
	// and what orders the test's reads after the device's writes.
	b.setArm(cqSlot, abi.ArmNext)
	b.post(q, sendWQE{id: 9, op: emu.WRRDMARead, flags: emu.SendSignaled, remote: pmr.Addr(), rkey: pmr.RKey(), sges: [][3]uint64{{0x1a0000, 6000, uint64(key)}}})
	for !b.sawVector(3) {
		if time.Now().After(deadline) {
			t.Fatal("the guest's READ did not complete")
		}
		time.Sleep(time.Millisecond)
	}
	if got := b.cqes(0x140000, 0); got[0].WRID != 9 || got[0].Status != emu.WCSuccess || got[0].ByteLen != 6000 {
		t.Fatalf("READ completion %+v", got[0])
	}
	if !bytes.Equal(b.at(0x1a0000)[:4096], src[:4096]) {
		t.Fatal("the READ did not land")
	}
}

// connectTo takes a guest QP through INIT, RTR and RTS to a peer QP at dgid, granting access.
func (b *bench) connectTo(q *guestQP, dest uint32, dgid string, access emu.Access) {
	b.t.Helper()
	set := func(mask emu.AttrMask, f func(a []byte)) { b.modifyQP(q, mask, f) }
	set(emu.AttrState|emu.AttrPKeyIndex|emu.AttrPort|emu.AttrAccessFlags, func(a []byte) {
		a[abi.QPAttrState], a[abi.QPAttrPortNum] = byte(emu.QPSInit), 1
		binary.LittleEndian.PutUint32(a[abi.QPAttrAccessFlags:], uint32(access))
	})
	set(emu.AttrState|emu.AttrAV|emu.AttrPathMTU|emu.AttrDestQPN|emu.AttrRQPSN|emu.AttrMaxDestRdAtomic|emu.AttrMinRNRTimer, func(a []byte) {
		a[abi.QPAttrState], a[abi.QPAttrPathMTU], a[abi.QPAttrMaxDestRdAtom], a[abi.QPAttrMinRNRTimer], a[abi.QPAttrHopLimit] = byte(emu.QPSRTR), byte(emu.MTU1024), 4, 12, 64
		binary.LittleEndian.PutUint32(a[abi.QPAttrDestQPN:], dest)
		g := netip.MustParseAddr(dgid).As16()
		copy(a[abi.QPAttrDGID:], g[:])
	})
	set(emu.AttrState|emu.AttrSQPSN|emu.AttrTimeout|emu.AttrRetryCnt|emu.AttrRNRRetry|emu.AttrMaxQPRdAtomic, func(a []byte) {
		a[abi.QPAttrState], a[abi.QPAttrTimeout], a[abi.QPAttrRetryCnt], a[abi.QPAttrRNRRetry], a[abi.QPAttrMaxRdAtomic] = byte(emu.QPSRTS), 14, 7, 7, 4
	})
}

// GIDs and a MAC the driver programs while the function runs become the engine's at once (a
// netdev's addresses reach an RDMA driver after it registered): the main address is the IPv4
// GID, QPs connect to it over the loopback, and a Readdress hook gets them in place of the
// engine when the config has one.
func TestAddressesProgrammedWhileEnabled(t *testing.T) {
	var handed []string
	for _, hook := range []bool{false, true} {
		b := newBenchWith(t, func(c *Config) {
			if hook {
				c.Readdress = func(mac [6]byte, ip netip.Addr, ips []netip.Addr) {
					handed = append(handed, fmt.Sprint(mac, ip, ips))
				}
			}
		})
		b.enable()
		dev := b.f.Device()
		if dev.IP() != netip.MustParseAddr("192.0.2.1") {
			t.Fatalf("before any GID: %s", dev.IP())
		}
		setGID := func(i int, addr string) {
			g := netip.MustParseAddr(addr).As16()
			for k := 0; k < 16; k += 4 {
				b.setReg(abi.RegGIDTable+16*uint32(i)+uint32(k), binary.LittleEndian.Uint32(g[k:]))
			}
		}
		setGID(0, "fe80::ff:fe00:7")
		setGID(1, "::ffff:198.51.100.7")
		b.setReg(abi.RegGIDValid, 0b11)
		b.setReg(abi.RegMACLo, 0x07000002)
		b.setReg(abi.RegMACHi, 0x0900)
		if hook {
			want := []string{
				fmt.Sprint([6]byte{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("198.51.100.7"), []netip.Addr{netip.MustParseAddr("fe80::ff:fe00:7"), netip.MustParseAddr("198.51.100.7")}),
				fmt.Sprint([6]byte{2, 0, 0, 7, 0, 9}, netip.MustParseAddr("198.51.100.7"), []netip.Addr{netip.MustParseAddr("fe80::ff:fe00:7"), netip.MustParseAddr("198.51.100.7")}),
			}
			if !slices.Equal(handed, want) {
				t.Fatalf("Readdress got %q\nwant %q", handed, want)
			}
			if dev.IP() != netip.MustParseAddr("192.0.2.1") {
				t.Fatal("with a Readdress hook the function changed the engine itself")
			}
			continue
		}
		if dev.IP() != netip.MustParseAddr("198.51.100.7") || dev.MAC() != [6]byte{2, 0, 0, 7, 0, 9} {
			t.Fatalf("after programming: %s %x", dev.IP(), dev.MAC())
		}
		// Two QPs of the function connected over the new IPv4 GID.
		pdn := b.ok(abi.OpAllocPD, nil)
		b.ringAt(0x140000, 0x112000, 3, 7, 6)
		cqn := b.ok(abi.OpCreateCQ, append(queueArgs(7, 6, 0x112000, 3), u32s(0, 0, 0xffffffff)[8:]...))
		q1 := b.makeQP(pdn, cqn, 0x150000, 0x113000, 0x160000, 0x114000)
		q2 := b.makeQP(pdn, cqn, 0x170000, 0x115000, 0x180000, 0x116000)
		b.connectTo(q1, q2.qpn, "::ffff:198.51.100.7", emu.AccessRemoteWrite)
		b.connectTo(q2, q1.qpn, "::ffff:198.51.100.7", emu.AccessRemoteWrite)
		binary.LittleEndian.PutUint64(b.at(0x117000), 0x1a0000)
		key := b.ok(abi.OpRegMR, regMRArgs(pdn, emu.AccessLocalWrite|emu.AccessRemoteWrite, 0x1a0000, 4096, 0, pageListBytes(0x117000, 1, 12, 1)))
		copy(b.at(0x1a0000), "over the new address")
		b.post(q1, sendWQE{id: 1, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: 0x1a0800, rkey: key, sges: [][3]uint64{{0x1a0000, 20, uint64(key)}}})
		b.post(q2, sendWQE{id: 2, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: 0x1a0c00, rkey: key, sges: [][3]uint64{{0x1a0000, 20, uint64(key)}}})
		b.sim.RunUntilIdle(0)
		got := b.cqes(0x140000, 0)
		if len(got) != 2 || got[0].Status != emu.WCSuccess || got[1].Status != emu.WCSuccess {
			t.Fatalf("WRITEs over the programmed addresses: %+v", got)
		}
		if string(b.at(0x1a0800)[:20]) != "over the new address" || string(b.at(0x1a0c00)[:20]) != "over the new address" {
			t.Fatal("the WRITEs did not land")
		}
	}
}
