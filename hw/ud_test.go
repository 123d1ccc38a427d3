package hw

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
)

// readyUD takes a UD QP of the function to RTS with qkey, as rdma-core's rxe provider and the
// kernel do: INIT with the P_Key index, port and Q_Key, RTR, RTS with a send PSN.
func (b *bench) readyUD(q *guestQP, qkey uint32) {
	b.t.Helper()
	set := func(mask emu.AttrMask, f func(a []byte)) { b.modifyQP(q, mask, f) }
	set(emu.AttrState|emu.AttrPKeyIndex|emu.AttrPort|emu.AttrQKey, func(a []byte) {
		a[abi.QPAttrState], a[abi.QPAttrPortNum] = byte(emu.QPSInit), 1
		binary.LittleEndian.PutUint32(a[abi.QPAttrQKey:], qkey)
	})
	set(emu.AttrState, func(a []byte) { a[abi.QPAttrState] = byte(emu.QPSRTR) })
	set(emu.AttrState|emu.AttrSQPSN, func(a []byte) { a[abi.QPAttrState] = byte(emu.QPSRTS) })
}

// TestUDQueuePairs (ABI 1.1): two UD QPs of the function over its loopback. A SEND addressed by
// an AH number (an entry of the AV table in guest memory) and one by the rxe_av in the WQE
// arrive with the GRH area first; their CQEs carry the source QP, IBV_WC_GRH, the immediate
// data and the network header type in the byte after port_num. The DMA MR's lkey reaches all
// of guest memory. An AH number past the table, not valid, or of another PD completes the WQE
// LOC_QP_OP_ERR.
func TestUDQueuePairs(t *testing.T) {
	b := newBench(t)
	b.enable()
	le := binary.LittleEndian
	pdn := b.ok(abi.OpAllocPD, nil)
	other := b.ok(abi.OpAllocPD, nil)
	b.ringAt(0x140000, 0x112000, 3, 7, 6)
	cqn := b.ok(abi.OpCreateCQ, append(queueArgs(7, 6, 0x112000, 3), u32s(0, 0, 0xffffffff)[8:]...))
	q1 := b.makeQPOf(abi.QPTypeUD, pdn, cqn, 0x150000, 0x113000, 0x160000, 0x114000)
	q2 := b.makeQPOf(abi.QPTypeUD, pdn, cqn, 0x170000, 0x115000, 0x180000, 0x116000)
	const qkey = 0x11111111
	b.readyUD(q1, qkey)
	b.readyUD(q2, qkey)
	if a := b.queryQP(q2.qpn); le.Uint32(a[abi.QPAttrQKey:]) != qkey || a[abi.QPAttrState] != byte(emu.QPSRTS) {
		t.Fatalf("queried Q_Key 0x%x, state %d", le.Uint32(a[abi.QPAttrQKey:]), a[abi.QPAttrState])
	}
	if errno, _ := b.cmd(abi.OpRegDMAMR, u32s(pdn, uint32(emu.AccessLocalWrite|emu.AccessRemoteWrite))); errno != syscall.EINVAL {
		t.Fatalf("a DMA MR with remote access: %v", errno)
	}
	lkey := b.ok(abi.OpRegDMAMR, u32s(pdn, uint32(emu.AccessLocalWrite)))

	// The AV table: one page; entry 3 the function's own address in this PD, entry 4 in another.
	av := func(i, pd uint32, valid bool) {
		e := b.at(0x190000 + uint64(i)*abi.AVEntrySize)[:abi.AVEntrySize]
		clear(e)
		if valid {
			le.PutUint32(e[abi.AVFlags:], abi.AVValid)
		}
		le.PutUint32(e[abi.AVPD:], pd)
		g := netip.MustParseAddr("::ffff:192.0.2.1").As16()
		copy(e[abi.AVDGID:], g[:])
		e[abi.AVHopLimit], e[abi.AVNetworkType] = 64, 1
	}
	av(3, pdn, true)
	av(4, other, true)
	av(5, pdn, false)
	b.ok(abi.OpSetAVTable, append(pageListBytes(0x190000, 1, 12, 0), u32s(64)...))
	inlineAV := make([]byte, abi.RXEAVSize)
	g := netip.MustParseAddr("::ffff:192.0.2.1").As16()
	copy(inlineAV[abi.RXEAVDGID:], g[:])
	inlineAV[abi.RXEAVHopLimit], inlineAV[abi.RXEAVNetworkType] = 64, 1

	copy(b.at(0x1a1000), "by number")
	copy(b.at(0x1a1100), "by rxe_av")
	for i := range 2 {
		b.postRecv(q2, uint64(10+i), 0x1a0000+uint64(i)*0x100, 0x100, lkey)
	}
	b.post(q1, sendWQE{id: 1, op: emu.WRSendWithImm, flags: emu.SendSignaled, imm: 0xfeed, sges: [][3]uint64{{0x1a1000, 9, uint64(lkey)}},
		ud: &udDest{ahNum: 3, qpn: q2.qpn, qkey: qkey}})
	b.post(q1, sendWQE{id: 2, op: emu.WRSend, flags: emu.SendSignaled, sges: [][3]uint64{{0x1a1100, 9, uint64(lkey)}},
		ud: &udDest{qpn: q2.qpn, qkey: qkey, av: inlineAV}})
	b.sim.RunUntilIdle(0)
	wcs := b.cqes(0x140000, 0)
	var recvs []emu.WC
	sends := 0
	for _, wc := range wcs {
		switch {
		case wc.Status != emu.WCSuccess:
			t.Fatalf("completion %+v", wc)
		case wc.Opcode == emu.WCRecv:
			recvs = append(recvs, wc)
		default:
			sends++
		}
	}
	if sends != 2 || len(recvs) != 2 {
		t.Fatalf("completions %+v", wcs)
	}
	for i, want := range []string{"by number", "by rxe_av"} {
		wc := recvs[i]
		cqe := b.cqeOf(0x140000, wcs, wc)
		buf := b.at(0x1a0000 + uint64(i)*0x100)
		if wc.ByteLen != emu.GRHLen+9 || le.Uint32(cqe[abi.CQESrcQP:]) != q1.qpn || wc.Flags&emu.WCWithGRH == 0 ||
			cqe[abi.CQENetHdr] != byte(emu.NetworkIPv4) || !bytes.Equal(buf[emu.GRHLen:emu.GRHLen+9], []byte(want)) {
			t.Fatalf("receive %d: %+v, src_qp %d, net %d, data %q", i, wc, le.Uint32(cqe[abi.CQESrcQP:]), cqe[abi.CQENetHdr], buf[emu.GRHLen:emu.GRHLen+9])
		}
		if i == 0 && (wc.Flags&emu.WCWithImm == 0 || wc.Imm != 0xfeed) {
			t.Fatalf("immediate data %+v", wc)
		}
	}

	// A missing, not valid, or other PD's address vector fails its WQE in place.
	for i, n := range []uint32{99, 5, 4} {
		q := b.makeQPOf(abi.QPTypeUD, pdn, cqn, 0x1b0000+uint64(i)*0x10000, 0x117000+uint64(i)*0x2000, 0x1b8000+uint64(i)*0x10000, 0x118000+uint64(i)*0x2000)
		b.readyUD(q, qkey)
		before := len(b.cqes(0x140000, 0))
		b.post(q, sendWQE{id: 7, op: emu.WRSend, flags: emu.SendSignaled, sges: [][3]uint64{{0x1a1000, 9, uint64(lkey)}},
			ud: &udDest{ahNum: n, qpn: q2.qpn, qkey: qkey}})
		b.sim.RunUntilIdle(0)
		got := b.cqes(0x140000, 0)[before:]
		if len(got) != 1 || got[0].WRID != 7 || got[0].Status != emu.WCLocQPOpErr {
			t.Fatalf("AH %d: completions %+v", n, got)
		}
	}
}

// cqeOf is the raw CQE of wc, one of wcs read from the ring at ring.
func (b *bench) cqeOf(ring uint64, wcs []emu.WC, wc emu.WC) []byte {
	for i, w := range wcs {
		if w == wc {
			return b.at(ring + abi.QueueHeaderSize + uint64(i)*64)[:abi.CQESize]
		}
	}
	b.t.Fatalf("no CQE %+v", wc)
	return nil
}

// queryQP reads a QP's attributes through QUERY_QP.
func (b *bench) queryQP(qpn uint32) []byte {
	b.t.Helper()
	a := make([]byte, abi.QueryQPArgsSize)
	binary.LittleEndian.PutUint32(a, qpn)
	b.ok(abi.OpQueryQP, a)
	return b.lastArgs()[abi.QueryQPAttr : abi.QueryQPAttr+abi.QPAttrSize]
}

// TestGSIAndMulticast (ABI 1.1): the GSI QP is QPN 1, one per function; a UD QP joins and
// leaves a multicast group, and a unicast GID is no group.
func TestGSIAndMulticast(t *testing.T) {
	b := newBench(t)
	b.enable()
	pdn := b.ok(abi.OpAllocPD, nil)
	b.ringAt(0x140000, 0x112000, 3, 7, 6)
	cqn := b.ok(abi.OpCreateCQ, append(queueArgs(7, 6, 0x112000, 3), u32s(0, 0, 0xffffffff)[8:]...))
	gsi := b.makeQPOf(abi.QPTypeGSI, pdn, cqn, 0x150000, 0x113000, 0x160000, 0x114000)
	if gsi.qpn != 1 {
		t.Fatalf("GSI QP %d", gsi.qpn)
	}
	b.ringAt(0x170000, 0x115000, 3, 4, sqLogElem)
	b.ringAt(0x180000, 0x116000, 1, 4, rqLogElem)
	a := make([]byte, abi.CreateQPArgsSize)
	le := binary.LittleEndian
	le.PutUint32(a[abi.CreateQPPD:], pdn)
	a[abi.CreateQPType] = abi.QPTypeGSI
	le.PutUint32(a[abi.CreateQPSendCQ:], cqn)
	le.PutUint32(a[abi.CreateQPRecvCQ:], cqn)
	le.PutUint16(a[abi.CreateQPSendSGE:], 4)
	le.PutUint16(a[abi.CreateQPRecvSGE:], 4)
	copy(a[abi.CreateQPSQ:], queueArgs(4, sqLogElem, 0x115000, 3))
	copy(a[abi.CreateQPRQ:], queueArgs(4, rqLogElem, 0x116000, 1))
	if errno, _ := b.cmd(abi.OpCreateQP, a); errno != syscall.EBUSY {
		t.Fatalf("a second GSI QP: %v", errno)
	}
	ud := b.makeQPOf(abi.QPTypeUD, pdn, cqn, 0x170000, 0x115000, 0x180000, 0x116000)
	mcast := func(op uint16, qpn uint32, gid string) syscall.Errno {
		args := make([]byte, abi.McastArgsSize)
		le.PutUint32(args[abi.McastQPN:], qpn)
		g := netip.MustParseAddr(gid).As16()
		copy(args[abi.McastGID:], g[:])
		errno, _ := b.cmd(op, args)
		return errno
	}
	for _, c := range []struct {
		op    uint16
		qpn   uint32
		gid   string
		errno syscall.Errno
	}{
		{abi.OpAttachMcast, ud.qpn, "ff0e::db8:1", 0},
		{abi.OpAttachMcast, ud.qpn, "::ffff:224.0.0.9", 0},
		{abi.OpAttachMcast, ud.qpn, "::ffff:192.0.2.7", syscall.EINVAL},
		{abi.OpAttachMcast, 999, "ff0e::db8:1", syscall.ENOENT},
		{abi.OpDetachMcast, ud.qpn, "ff0e::db8:1", 0},
		{abi.OpDetachMcast, ud.qpn, "::ffff:224.0.0.9", 0},
	} {
		if got := mcast(c.op, c.qpn, c.gid); got != c.errno {
			t.Errorf("op 0x%x QP %d %s: %v, want %v", c.op, c.qpn, c.gid, got, c.errno)
		}
	}
}

// TestResizeCQCountsPostedSends: RESIZE_CQ counts the completions of the datagram sends posted
// before it, as a NIC that wrote them long before its firmware took the command would, though
// the device's clock has not run: six unpolled UD sends refuse a CQ of one entry with EINVAL
// (rdma-core's test_resize_cq), fit in one of eight, and are all there to poll.
func TestResizeCQCountsPostedSends(t *testing.T) {
	b, q, cqn := postedUDSends(t)
	b.ringAt(0x170000, 0x115000, 1, 1, 6)
	if errno, _ := b.cmd(abi.OpResizeCQ, append(u32s(cqn, 0), queueArgs(1, 6, 0x115000, 1)...)); errno != syscall.EINVAL {
		t.Fatalf("shrinking to one entry under six unpolled sends: %v, want EINVAL", errno)
	}
	b.ringAt(0x180000, 0x116000, 1, 3, 6)
	b.ok(abi.OpResizeCQ, append(u32s(cqn, 0), queueArgs(3, 6, 0x116000, 1)...))
	b.sim.RunUntilIdle(0)
	wantPostedSends(t, "after the resize", b.cqes(0x180000, 0), q.qpn)
}

// TestDestroyQPSendsPostedDatagrams: DESTROY_QP lets the UD sends whose doorbell came before it
// go, though the device's clock had not come to them, as a NIC has sent them long before its
// firmware sees the command: their six completions are in the CQ when the command completes,
// and their frames leave once the clock runs. libfabric's rxd destroys its QP right after
// posting the ACK of its peer's last message; a peer that never sees it resends for minutes.
func TestDestroyQPSendsPostedDatagrams(t *testing.T) {
	b, q, _ := postedUDSends(t)
	b.ok(abi.OpDestroyQP, u32s(q.qpn))
	wantPostedSends(t, "after DESTROY_QP", b.cqes(0x140000, 0), q.qpn)
	b.sim.RunUntilIdle(0)
	if st := b.f.Device().Stats(); st.TxFrames != 6 {
		t.Fatalf("%d frames sent, want the 6 datagrams", st.TxFrames)
	}
}

// TestDoorbellRunsItsPosts: with Config.DoorbellRuns (serve's functions) a send-queue doorbell
// runs the requester over what it posted, on the goroutine that took the doorbell, rather than
// leaving it to the device's clock, whose goroutine a serve would have to wake for it: the six UD
// sends have completed and their frames are queued before the clock has run at all.
func TestDoorbellRunsItsPosts(t *testing.T) {
	b, q, _ := postedUDSendsWith(t, func(c *Config) { c.DoorbellRuns = true })
	wantPostedSends(t, "after the doorbell", b.cqes(0x140000, 0), q.qpn)
	if st := b.f.Device().Stats(); st.TxFrames != 6 {
		t.Fatalf("%d frames queued after the doorbell, want the 6 datagrams", st.TxFrames)
	}
	// Without DoorbellRuns the device's clock runs them (a simulator's goroutine alone may).
	b, q, _ = postedUDSends(t)
	if got := b.cqes(0x140000, 0); len(got) != 0 {
		t.Fatalf("completions before the clock ran: %v", got)
	}
	b.sim.RunUntilIdle(0)
	wantPostedSends(t, "once the clock ran", b.cqes(0x140000, 0), q.qpn)
}

// postedUDSends is a bench whose UD QP q, on CQ cqn (its ring at 0x140000, 16 entries), has six
// signalled 8-byte SENDs to itself posted and their doorbell rung; the device's clock has not run,
// so what went out is what the doorbell itself sent.
func postedUDSends(t *testing.T) (b *bench, q *guestQP, cqn uint32) {
	t.Helper()
	return postedUDSendsWith(t, nil)
}

// postedUDSendsWith is postedUDSends with the function's config changed by set first.
func postedUDSendsWith(t *testing.T, set func(*Config)) (b *bench, q *guestQP, cqn uint32) {
	t.Helper()
	b = newBenchWith(t, set)
	b.enable()
	pdn := b.ok(abi.OpAllocPD, nil)
	b.ringAt(0x140000, 0x112000, 1, 4, 6)
	cqn = b.ok(abi.OpCreateCQ, append(queueArgs(4, 6, 0x112000, 1), u32s(0, 0, 0xffffffff)[8:]...))
	q = b.makeQPOf(abi.QPTypeUD, pdn, cqn, 0x150000, 0x113000, 0x160000, 0x114000)
	const qkey = 0x11111111
	b.readyUD(q, qkey)
	lkey := b.ok(abi.OpRegDMAMR, u32s(pdn, uint32(emu.AccessLocalWrite)))
	av := make([]byte, abi.RXEAVSize)
	g := netip.MustParseAddr("::ffff:192.0.2.1").As16()
	copy(av[abi.RXEAVDGID:], g[:])
	av[abi.RXEAVHopLimit], av[abi.RXEAVNetworkType] = 64, 1
	for id := uint64(1); id <= 6; id++ {
		b.post(q, sendWQE{id: id, op: emu.WRSend, flags: emu.SendSignaled, sges: [][3]uint64{{0x1a1000, 8, uint64(lkey)}},
			ud: &udDest{qpn: q.qpn, qkey: qkey, av: av}})
	}
	return b, q, cqn
}

// wantPostedSends asserts that wcs are the successful completions of postedUDSends' six SENDs
// by QP qpn, in order; when names the moment.
func wantPostedSends(t *testing.T, when string, wcs []emu.WC, qpn uint32) {
	t.Helper()
	if len(wcs) != 6 {
		t.Fatalf("completions %s: %+v, want the 6 sends'", when, wcs)
	}
	for i, wc := range wcs {
		if wc.WRID != uint64(i+1) || wc.Status != emu.WCSuccess || wc.Opcode != emu.WCSend || wc.QPNum != qpn {
			t.Fatalf("completion %d %s: %+v", i, when, wc)
		}
	}
}
