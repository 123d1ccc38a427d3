package hw

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"testing"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
)

// wellBehaved is a driver that follows the ABI, after whatever came before: a PD, a CQ, two
// QPs connected over the loopback and an MR, all in the fixture's part of RAM, and a WRITE
// whose bytes land. It fails the test if the function does not serve it.
func (b *bench) wellBehaved() {
	b.t.Helper()
	fx := &fixture{bench: b}
	fx.pdn = b.ok(abi.OpAllocPD, nil)
	cqn := b.ok(abi.OpCreateCQ, fx.createCQArgs())
	mk := func(sq, rq int) *guestQP {
		a := make([]byte, abi.CreateQPArgsSize)
		put(a, abi.CreateQPPD, 4, uint64(fx.pdn))
		a[abi.CreateQPType] = abi.QPTypeRC
		put(a, abi.CreateQPSendCQ, 4, uint64(cqn))
		put(a, abi.CreateQPRecvCQ, 4, uint64(cqn))
		put(a, abi.CreateQPSendSGE, 2, 4)
		put(a, abi.CreateQPRecvSGE, 2, 4)
		copy(a[abi.CreateQPSQ:], b.oneRing(sq, 2, sqLogElem))
		copy(a[abi.CreateQPRQ:], b.oneRing(rq, 2, rqLogElem))
		errno, res := b.cmd(abi.OpCreateQP, a)
		if errno != 0 {
			b.t.Fatalf("a well-behaved create_qp: %v", errno)
		}
		return &guestQP{qpn: res[abi.ResultNum], slot: res[abi.ResultSlot], sq: b.ringPage(sq), rq: b.ringPage(rq), sqLog: 2, rqLog: 2}
	}
	q1, q2 := mk(10, 11), mk(12, 13)
	b.connect(q1, q2.qpn)
	b.connect(q2, q1.qpn)
	mr := fx.regMRArgs() // lists fxData's two pages in table 4
	put(mr, abi.RegMRAccess, 4, uint64(emu.AccessLocalWrite|emu.AccessRemoteWrite))
	key := b.ok(abi.OpRegMR, mr)
	src := b.at(fxData)[:128]
	for i := range src {
		src[i] = byte(i ^ 0x5a)
	}
	clear(b.at(fxData + 4096)[:128])
	prodBefore := binary.LittleEndian.Uint32(b.at(b.ringPage(0) + abi.QHProducer))
	b.post(q1, sendWQE{id: 0xbeef, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: fxData + 4096, rkey: key,
		sges: [][3]uint64{{fxData, 128, uint64(key)}}})
	b.sim.RunUntilIdle(0)
	e := b.at(b.ringPage(0) + abi.QueueHeaderSize + uint64(prodBefore)*64)
	if binary.LittleEndian.Uint64(e[abi.CQEWRID:]) != 0xbeef || binary.LittleEndian.Uint32(e[abi.CQEStatus:]) != uint32(emu.WCSuccess) {
		b.t.Fatalf("a well-behaved WRITE: completion % x", e[:48])
	}
	if !bytes.Equal(b.at(fxData + 4096)[:128], src) {
		b.t.Fatal("a well-behaved WRITE did not land")
	}
}

// rawSend writes w at q's send queue's producer index, changes the WQE's fields as set says
// (offset, size, value), and rings the doorbell.
func (b *bench) rawSend(q *guestQP, w sendWQE, set ...[3]uint64) {
	b.t.Helper()
	e := b.putSend(q, w)
	for _, s := range set {
		put(e, int(s[0]), int(s[1]), s[2])
	}
	b.ringSQ(q)
}

// Send WQEs whose opcode, SGE count or inline length is past its bound: each completes in
// error (LOC_QP_OP_ERR) in its place, moves nothing, allocates little, and the function then
// serves a well-behaved driver. An opcode is the guest's 32 bits: one whose low byte is an
// opcode is no opcode.
func TestHostileSendWQEs(t *testing.T) {
	const u32max = math.MaxUint32
	op, nsge, dlen := uint64(abi.SendOpcode), uint64(abi.SendDMANumSGE), uint64(abi.SendDMALength)
	var cases []struct {
		name string
		w    sendWQE
		set  [][3]uint64
	}
	add := func(name string, w sendWQE, set ...[3]uint64) {
		cases = append(cases, struct {
			name string
			w    sendWQE
			set  [][3]uint64
		}{name, w, set})
	}
	write := func() sendWQE {
		return sendWQE{id: 7, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: 0x1a0800, rkey: 0,
			sges: [][3]uint64{{0x1a0000, 64, 0}}}
	}
	for _, v := range []uint64{10, 11, 12, 13, 16, 0x1f, 0x21, 0xfe, 0xff, 0x100, 0x102, 0x10f, 0x120, 0x1_0000, u32max} {
		add(fmt.Sprintf("opcode_0x%x", v), write(), [3]uint64{op, 4, v})
	}
	add("num_sge_max_plus_1", write(), [3]uint64{nsge, 4, 5})
	add("num_sge_u32max", write(), [3]uint64{nsge, 4, u32max})
	inl := write()
	inl.flags |= emu.SendInline
	inl.sges, inl.inline = nil, []byte("x")
	add("inline_max_plus_1", inl, [3]uint64{dlen, 4, 257})
	add("inline_slot_plus_1", inl, [3]uint64{dlen, 4, 1<<sqLogElem - abi.SendSGEs + 1})
	add("inline_u32max", inl, [3]uint64{dlen, 4, u32max})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBench(t)
			b.enable()
			_, q1, key, _ := b.trafficPair()
			c.w.rkey = key
			for i := range c.w.sges {
				c.w.sges[i][2] = uint64(key)
			}
			clear(b.at(0x1a0800)[:64])
			a := allocated(func() {
				b.rawSend(q1, c.w, c.set...)
				// Bounded: a WQE run as the wrong opcode (a SEND with no receive) would retry
				// for ever.
				b.sim.RunUntilIdle(100_000)
			})
			if a > maxAlloc {
				t.Errorf("allocated %d bytes", a)
			}
			got := b.cqes(0x140000, 1)
			if len(got) != 1 || got[0].WRID != 7 || got[0].Status != emu.WCLocQPOpErr {
				t.Fatalf("completions %+v, want wr 7 LOC_QP_OP_ERR", got)
			}
			if !bytes.Equal(b.at(0x1a0800)[:64], make([]byte, 64)) {
				t.Fatal("a refused WQE moved data")
			}
			b.wellBehaved()
		})
	}
}

// A REG_MR work request whose page list names more pages than its MR was allocated for, or is
// past the ABI's bound: an error completion, little allocated.
func TestHostileRegMRWorkRequest(t *testing.T) {
	for _, pages := range []uint64{5, abi.PLEntriesPerPage, abi.MaxMRPages, abi.MaxMRPages + 1, math.MaxUint32} {
		t.Run(fmt.Sprint(pages), func(t *testing.T) {
			b := newBench(t)
			b.enable()
			pdn, q1, _, _ := b.trafficPair()
			a := make([]byte, abi.AllocSTagArgsSize)
			put(a, abi.AllocSTagPD, 4, uint64(pdn))
			put(a, abi.AllocSTagKind, 4, abi.STagFastRegMR)
			put(a, abi.AllocSTagMaxPages, 4, 4)
			stag := b.ok(abi.OpAllocSTag, a)
			// A two-level list whose every table is the same page of the same page address.
			for i := range abi.PLEntriesPerPage {
				binary.LittleEndian.PutUint64(b.at(0x1b0000+uint64(8*i)), 0x1b1000)
				binary.LittleEndian.PutUint64(b.at(0x1b1000+uint64(8*i)), 0x1a0000)
			}
			levels := uint8(2)
			if pages <= abi.PLEntriesPerPage {
				levels = 1
			}
			w := sendWQE{id: 9, op: emu.WRRegMR, flags: emu.SendSignaled}
			alloc := allocated(func() {
				b.rawSend(q1, w, [3]uint64{abi.RegWRKey, 4, uint64(stag&^0xff | 0x42)}, [3]uint64{abi.RegWRAccess, 4, uint64(emu.AccessLocalWrite)},
					[3]uint64{abi.RegWRIOVA, 8, 0}, [3]uint64{abi.RegWRLength, 8, pages * 4096},
					[3]uint64{abi.RegWRPages + abi.PLAddr, 8, 0x1b0000}, [3]uint64{abi.RegWRPages + abi.PLPages, 4, pages},
					[3]uint64{abi.RegWRPages + abi.PLShift, 1, 12}, [3]uint64{abi.RegWRPages + abi.PLLevels, 1, uint64(levels)})
				b.sim.RunUntilIdle(0)
			})
			if alloc > maxAlloc {
				t.Errorf("allocated %d bytes", alloc)
			}
			if got := b.cqes(0x140000, 1); len(got) != 1 || got[0].WRID != 9 || got[0].Status != emu.WCLocQPOpErr {
				t.Fatalf("completions %+v, want wr 9 LOC_QP_OP_ERR", got)
			}
			b.wellBehaved()
		})
	}
}

// Receive WQEs naming more SGEs than the queue takes, in a QP's receive queue and in an SRQ: the
// message that takes one, even of no bytes, fails on both sides (LOC_QP_OP_ERR for the
// receiver, REM_OP_ERR for the requester), and nothing lands.
func TestHostileRecvWQEs(t *testing.T) {
	for _, c := range []struct {
		n      uint32
		shared bool
		msg    uint64
	}{{5, false, 64}, {math.MaxUint32, false, 64}, {5, true, 64}, {math.MaxUint32, true, 64}, {5, false, 0}, {math.MaxUint32, true, 0}} {
		n, shared := c.n, c.shared
		{
			t.Run(fmt.Sprintf("num_sge_%d_srq_%v_len_%d", n, shared, c.msg), func(t *testing.T) {
				b := newBench(t)
				b.enable()
				pdn, q1, key, _ := b.trafficPair()
				dst := &guestQP{}
				if shared {
					fx := &fixture{bench: b, pdn: pdn}
					srqn := b.ok(abi.OpCreateSRQ, fx.createSRQArgs())
					qa := fx.createQPArgs()
					put(qa, abi.CreateQPSendCQ, 4, 1)
					put(qa, abi.CreateQPRecvCQ, 4, 1)
					put(qa, abi.CreateQPSRQ, 4, uint64(srqn))
					_, res := b.cmd(abi.OpCreateQP, qa)
					q3 := &guestQP{qpn: res[0], slot: res[1]}
					q1b := b.makeQP(pdn, 1, 0x1d0000, 0x1ba000, 0x1d4000, 0x1bb000)
					b.connect(q1b, q3.qpn)
					b.connect(q3, q1b.qpn)
					q1 = q1b
					dst = &guestQP{rq: b.ringPage(1), rqLog: 4}
				} else {
					dst = &guestQP{rq: 0x180000, rqLog: 4}
				}
				b.postRecv(dst, 77, 0x1a0400, 256, key)
				// The receive WQE says n SGEs.
				prev := (dst.rqProd - 1) & (1<<dst.rqLog - 1)
				binary.LittleEndian.PutUint32(b.at(dst.rq+abi.QueueHeaderSize+uint64(prev)<<rqLogElem+abi.RecvDMANumSGE), n)
				clear(b.at(0x1a0400)[:256])
				before := len(b.cqes(0x140000, 0))
				a := allocated(func() {
					b.post(q1, sendWQE{id: 8, op: emu.WRSend, flags: emu.SendSignaled, sges: [][3]uint64{{0x1a0000, c.msg, uint64(key)}}})
					b.sim.RunUntilIdle(0)
				})
				if a > maxAlloc {
					t.Errorf("allocated %d bytes", a)
				}
				got := b.cqes(0x140000, uint32(before))
				var recv, send *emu.WC
				for i := range got {
					switch got[i].WRID {
					case 77:
						recv = &got[i]
					case 8:
						send = &got[i]
					}
				}
				if recv == nil || recv.Status != emu.WCLocQPOpErr || send == nil || send.Status != emu.WCRemOpErr {
					t.Fatalf("completions %+v: want the receive LOC_QP_OP_ERR and the SEND REM_OP_ERR", got)
				}
				if !bytes.Equal(b.at(0x1a0400)[:256], make([]byte, 256)) {
					t.Fatal("a bad receive WQE took data")
				}
				b.wellBehaved()
			})
		}
	}
}

// newBenchWithPeer is a bench whose function is on a simulated link with one other device,
// 02:00:00:00:00:02 at 192.0.2.2.
func newBenchWithPeer(t testing.TB) (*bench, *emu.Device) {
	var peer *emu.Device
	b := newBenchWith(t, func(c *Config) {
		fab := emu.NewFabric(c.Clock.(*emu.Sim), 3)
		peer = fab.AddDeviceAt("peer", [6]byte{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("192.0.2.2"), emu.LinkConfig{})
		c.Engine = func(mac [6]byte, ip netip.Addr, ips []netip.Addr) *emu.Device {
			return fab.AddDeviceAt("fn", mac, ip, emu.LinkConfig{})
		}
	})
	return b, peer
}

// Ethernet descriptors past their bounds: a TX length below a header or above a jumbo frame
// (up to 4 GiB), a buffer outside guest memory or wrapping the address space: dropped and
// counted, little allocated, the next good frame sent; an RX buffer too small or outside guest
// memory: the frame dropped and counted, the buffer handed back empty.
func TestHostileEthernetDescriptors(t *testing.T) {
	b, peer := newBenchWithPeer(t)
	var heard [][]byte
	peer.OnOtherFrame(func(f []byte) { heard = append(heard, append([]byte(nil), f...)) })
	b.enable()
	fx := &fixture{bench: b}
	tx := fx.validArgs(abi.OpCreateEthRing)
	b.ok(abi.OpCreateEthRing, tx)
	rx := fx.validArgs(abi.OpCreateEthRing)
	copy(rx[abi.EthRingQueue:], b.oneRing(14, 4, 4))
	rx[abi.EthRingKind] = abi.EthRX
	b.ok(abi.OpCreateEthRing, rx)
	txRing, rxRing := b.ringPage(9), b.ringPage(14)

	good := make([]byte, 60)
	copy(good, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5})
	copy(b.at(fxData), good)
	bad := []struct {
		addr uint64
		n    uint32
	}{
		{fxData, 0}, {fxData, abi.EthMinFrame - 1}, {fxData, abi.EthMaxFrame + 1}, {fxData, math.MaxUint32},
		{0, 60}, {0x900000, 60}, {math.MaxUint64 - 10, 60}, {ramBase + 1<<20 - 30, 60},
	}
	for i, d := range bad {
		b.ethDesc(txRing, uint32(i), d.addr, d.n)
	}
	b.ethDesc(txRing, uint32(len(bad)), fxData, 60)
	binary.LittleEndian.PutUint32(b.at(txRing+abi.QHProducer), uint32(len(bad)+1))
	a := allocated(func() {
		b.setReg(abi.RegEthTXProd, uint32(len(bad)+1))
		b.sim.RunUntilIdle(0)
	})
	if a > maxAlloc {
		t.Errorf("TX of bad descriptors allocated %d bytes", a)
	}
	if len(heard) != 1 || !bytes.Equal(heard[0], good) {
		t.Fatalf("the peer heard %d frames, want the one good one", len(heard))
	}

	// RX: a buffer of no room, one of a few bytes, one outside guest memory, then a good one.
	rxBufs := []struct {
		addr uint64
		n    uint32
	}{{fxData + 4096, 0}, {fxData + 4096, 13}, {0x900000, 2048}, {math.MaxUint64 - 10, 2048}, {fxData + 4096, 2048}}
	for i, d := range rxBufs {
		b.ethDesc(rxRing, uint32(i), d.addr, d.n)
	}
	binary.LittleEndian.PutUint32(b.at(rxRing+abi.QHProducer), uint32(len(rxBufs)))
	in := append([]byte(nil), good...)
	copy(in[0:6], []byte{2, 0, 0, 0, 0, 1})
	copy(in[6:12], []byte{2, 0, 0, 0, 0, 2})
	for range rxBufs {
		peer.SendFrame(in)
	}
	b.sim.RunUntilIdle(0)
	for i := range rxBufs {
		d := b.at(rxRing + abi.QueueHeaderSize + uint64(i)*abi.EthDescSize)
		want := uint32(0)
		if i == len(rxBufs)-1 {
			want = uint32(len(in))
		}
		if got := binary.LittleEndian.Uint32(d[abi.EthDescLen:]); got != want || binary.LittleEndian.Uint32(d[abi.EthDescFlags:]) != abi.EthDescDone {
			t.Fatalf("RX descriptor %d: length %d flags 0x%x, want %d DONE", i, got, binary.LittleEndian.Uint32(d[abi.EthDescFlags:]), want)
		}
	}
	if !bytes.Equal(b.at(fxData + 4096)[:len(in)], in) {
		t.Fatal("the good RX buffer did not get the frame")
	}
	if _, res := b.cmd(abi.OpDestroyEthRing, []byte{abi.EthTX}); res[abi.ResultEthDropped] != uint32(len(bad)) {
		t.Fatalf("TX dropped %d, want %d", res[abi.ResultEthDropped], len(bad))
	}
	if _, res := b.cmd(abi.OpDestroyEthRing, []byte{abi.EthRX}); res[abi.ResultEthDropped] != uint32(len(rxBufs)-1) {
		t.Fatalf("RX dropped %d, want %d", res[abi.ResultEthDropped], len(rxBufs)-1)
	}
}

// BAR accesses past each BAR, doorbells and arm registers with nothing behind them or with any
// value, ring indices a guest sets to anything: an error to the bus where the access is outside
// a BAR, nothing otherwise, and the function serves a well-behaved driver after.
func TestHostileBARsAndDoorbells(t *testing.T) {
	b := newBench(t)
	b.enable()
	p := make([]byte, 8)
	for _, bar := range []int{-1, 1, 3, 5, 6, 7, math.MaxInt} {
		if b.f.RegionRead(bar, 0, p[:4]) == nil || b.f.RegionWrite(bar, 0, p[:4]) == nil {
			t.Errorf("BAR %d: an access succeeded", bar)
		}
	}
	for bar, size := range barSizes {
		for _, off := range []uint64{size, size - 2, size + 4, math.MaxUint64 - 3, math.MaxUint64} {
			if b.f.RegionRead(bar, off, p[:4]) == nil || b.f.RegionWrite(bar, off, p[:4]) == nil {
				t.Errorf("BAR %d offset 0x%x: an access past the BAR succeeded", bar, off)
			}
		}
	}
	// Every doorbell and arm register, aligned or not, with no QP or CQ behind it; sizes other
	// than 4 bytes.
	for off := uint64(0); off < abi.BARDoorbells; off += 4 {
		binary.LittleEndian.PutUint32(p, math.MaxUint32)
		must(t, b.f.RegionWrite(abi.BARDoorbell, off, p[:4]))
	}
	must(t, b.f.RegionWrite(abi.BARDoorbell, 0, p[:8]))
	must(t, b.f.RegionWrite(abi.BARDoorbell, 1, p[:2]))
	// Registers: GID validity past the table, writes to read-only registers and to undecoded
	// offsets.
	for off := uint32(0); off < abi.BARRegsSize; off += 4 {
		switch off {
		case abi.RegDevCtrl, abi.RegCtrlQBaseL, abi.RegCtrlQBaseH, abi.RegCtrlQLog, abi.RegCtrlQProd:
			continue // the control queue's, below
		}
		b.setReg(off, math.MaxUint32)
	}
	if v := b.reg(abi.RegGIDValid); v != 1<<abi.GIDTableLen-1 {
		t.Fatalf("GID_VALID 0x%x after writing all ones", v)
	}
	for i := range abi.GIDTableLen {
		for w := range 4 {
			b.setReg(abi.RegGIDTable+uint32(16*i+4*w), 0)
		}
	}
	b.setReg(abi.RegGIDValid, 0)
	b.setReg(abi.RegMACLo, 0x00000002)
	b.setReg(abi.RegMACHi, 0x0100)
	if b.reg(abi.RegMagic) != abi.MagicValue || b.reg(abi.RegCaps) != caps {
		t.Fatal("a write changed a read-only register")
	}

	// Live rings with indices at their largest: the device masks them. A CQ whose consumer
	// index and a send queue whose producer index say 2^32-1.
	_, q1, _, _ := b.trafficPair()
	binary.LittleEndian.PutUint32(b.at(0x140000+abi.QHConsumer), math.MaxUint32)
	binary.LittleEndian.PutUint32(b.at(q1.sq+abi.QHProducer), math.MaxUint32)
	for _, v := range []uint32{0, 4, abi.ArmNext | abi.ArmSolicited, math.MaxUint32} {
		b.setArm(1, v)
	}
	a := allocated(func() {
		binary.LittleEndian.PutUint32(p, math.MaxUint32)
		must(t, b.f.RegionWrite(abi.BARDoorbell, uint64(abi.SQDoorbell(q1.slot)), p[:4]))
		b.sim.RunUntilIdle(0)
	})
	if a > maxAlloc {
		t.Errorf("a doorbell at the largest producer index allocated %d bytes", a)
	}
	b.ok(abi.OpNop, nil)

	// The control queue's registers at their largest: FATAL, and a reset brings it back.
	for _, c := range []struct {
		name string
		off  uint32
		v    uint32
		code uint32
	}{
		{"log_max_plus_1", abi.RegCtrlQLog, abi.CtrlQMaxLog + 1, abi.FatalCtrlQSetup},
		{"log_u32max", abi.RegCtrlQLog, math.MaxUint32, abi.FatalCtrlQSetup},
		{"log_0", abi.RegCtrlQLog, 0, abi.FatalCtrlQSetup},
		{"base_misaligned", abi.RegCtrlQBaseL, ctrlQAt + 8, abi.FatalCtrlQSetup},
		{"base_high", abi.RegCtrlQBaseH, math.MaxUint32, abi.FatalCtrlQDMA},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBench(t)
			b.enable()
			b.setReg(c.off, c.v)
			b.setReg(abi.RegCtrlQProd, math.MaxUint32)
			if s, code := b.reg(abi.RegDevStatus), b.reg(abi.RegFatalCode); s != abi.DevStatusFatal || code != c.code {
				t.Fatalf("status 0x%x code %d, want fatal %d", s, code, c.code)
			}
			b.setReg(abi.RegDevCtrl, abi.DevCtrlReset)
			b.prod = 0
			b.enable()
			b.wellBehaved()
		})
	}
	// The producer index at its largest on a good control queue: masked, every entry run.
	b2 := newBench(t)
	b2.enable()
	for i := range 1 << ctrlLog {
		e := b2.at(ctrlQAt + uint64(i)*abi.CtrlEntrySize)[:abi.CtrlEntrySize]
		clear(e)
		binary.LittleEndian.PutUint16(e[abi.CtrlOpcode:], abi.OpNop)
	}
	b2.setReg(abi.RegCtrlQProd, math.MaxUint32)
	if cons := b2.reg(abi.RegCtrlQCons); cons != 1<<ctrlLog-1 {
		t.Fatalf("consumer %d after a producer of 2^32-1", cons)
	}
	b2.prod = 1<<ctrlLog - 1
	b2.wellBehaved()
}

// EQ rings whose consumer index the guest sets anywhere, and an async EQ too small for what
// happens: entries land or are dropped, never outside the ring.
func TestHostileEventQueues(t *testing.T) {
	b := newBench(t)
	b.enable()
	fx := &fixture{bench: b}
	args := fx.validArgs(abi.OpCreateEQ)
	args[abi.CreateEQLogCount] = 1 // one usable entry
	args[abi.CreateEQKind] = abi.EQAsync
	b.ok(abi.OpCreateEQ, args)
	eqRing := b.ringPage(5)
	binary.LittleEndian.PutUint32(b.at(eqRing+abi.QHConsumer), math.MaxUint32)
	before := append([]byte(nil), b.ram...)
	for range 5 {
		b.f.Device().SetPortActive(false)
		b.f.Device().SetPortActive(true)
		b.sim.RunUntilIdle(0)
	}
	// Only the EQ's ring page may have changed.
	b.unchangedBut(before, [2]uint64{eqRing, 4096})
	if prod := binary.LittleEndian.Uint32(b.at(eqRing + abi.QHProducer)); prod > 1 {
		t.Fatalf("EQ producer %d in a ring of 2", prod)
	}
	b.wellBehaved()
}

// FuzzLiveRings: whatever a guest writes into the WQE slots of a connected QP's send and receive
// queues, an SRQ, and the Ethernet function's TX and RX descriptors, with any producer indices,
// then rings every doorbell: nothing panics or hangs, every access stays in guest memory, and the
// control queue answers after.
func FuzzLiveRings(f *testing.F) {
	f.Add([]byte{}, []byte{}, []byte{}, uint32(1), uint32(1))
	f.Add(bytes.Repeat([]byte{0xff}, 64), bytes.Repeat([]byte{0xff}, 64), bytes.Repeat([]byte{0xff}, 16), uint32(math.MaxUint32), uint32(3))
	f.Fuzz(func(t *testing.T, sqe, rqe, desc []byte, sqProd, rxProd uint32) {
		b, peer := newBenchWithPeer(t)
		b.enable()
		fx := &fixture{bench: b}
		b.ok(abi.OpCreateEthRing, fx.validArgs(abi.OpCreateEthRing))
		rx := fx.validArgs(abi.OpCreateEthRing)
		copy(rx[abi.EthRingQueue:], b.oneRing(14, 4, 4))
		rx[abi.EthRingKind] = abi.EthRX
		b.ok(abi.OpCreateEthRing, rx)
		pdn, q1, q2 := b.loopbackPair()
		fx.pdn = pdn
		b.ok(abi.OpCreateSRQ, fx.createSRQArgs())
		for i := range 16 {
			copy(b.at(q1.sq + abi.QueueHeaderSize + uint64(i)<<sqLogElem)[:1<<sqLogElem], sqe)
			copy(b.at(q2.rq + abi.QueueHeaderSize + uint64(i)<<rqLogElem)[:1<<rqLogElem], rqe)
			copy(b.at(b.ringPage(1) + abi.QueueHeaderSize + uint64(i)<<rqLogElem)[:1<<rqLogElem], rqe)
			copy(b.at(b.ringPage(9) + abi.QueueHeaderSize + uint64(i)*abi.EthDescSize)[:abi.EthDescSize], desc)
			copy(b.at(b.ringPage(14) + abi.QueueHeaderSize + uint64(i)*abi.EthDescSize)[:abi.EthDescSize], desc)
		}
		le := binary.LittleEndian
		le.PutUint32(b.at(q1.sq+abi.QHProducer), sqProd)
		le.PutUint32(b.at(q2.rq+abi.QHProducer), sqProd)
		le.PutUint32(b.at(b.ringPage(1)+abi.QHProducer), rxProd)
		le.PutUint32(b.at(b.ringPage(14)+abi.QHProducer), rxProd)
		var p [4]byte
		le.PutUint32(p[:], sqProd)
		must(t, b.f.RegionWrite(abi.BARDoorbell, uint64(abi.SQDoorbell(q1.slot)), p[:]))
		b.setReg(abi.RegEthTXProd, rxProd)
		frame := make([]byte, 60)
		copy(frame, []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0xb5})
		for range 3 {
			peer.SendFrame(frame)
		}
		b.sim.RunUntilIdle(1_000_000)
		b.ok(abi.OpNop, nil)
		b.ok(abi.OpDestroyEthRing, []byte{abi.EthRX})
	})
}

// A process that arms its CQ again and again over CQEs it does not poll: each arm is announced
// at once, but while its event is unread it adds none, so another CQ's event on the same small
// EQ still lands.
func TestHostileArmsShareAnEQ(t *testing.T) {
	b := newBench(t)
	b.enable()
	fx := &fixture{bench: b}
	fx.pdn = b.ok(abi.OpAllocPD, nil)
	eqArgs := fx.validArgs(abi.OpCreateEQ)
	eqArgs[abi.CreateEQLogCount] = 2 // three usable entries
	eqn := b.ok(abi.OpCreateEQ, eqArgs)
	eqRing := b.ringPage(5)
	b.ringAt(0x140000, 0x112000, 3, 7, 6)
	cqA := make([]byte, abi.CreateCQArgsSize)
	copy(cqA[abi.CreateCQQueue:], queueArgs(7, 6, 0x112000, 3))
	put(cqA, abi.CreateCQEQ, 4, uint64(eqn))
	errno, res := b.cmd(abi.OpCreateCQ, cqA)
	if errno != 0 {
		t.Fatal(errno)
	}
	cqnA, slotA := res[abi.ResultNum], res[abi.ResultSlot]
	cqB := fx.createCQArgs()
	put(cqB, abi.CreateCQEQ, 4, uint64(eqn))
	errno, res = b.cmd(abi.OpCreateCQ, cqB)
	if errno != 0 {
		t.Fatal(errno)
	}
	cqnB, slotB := res[abi.ResultNum], res[abi.ResultSlot]
	q1 := b.makeQP(fx.pdn, cqnA, 0x150000, 0x113000, 0x160000, 0x114000)
	q2 := b.makeQP(fx.pdn, cqnA, 0x170000, 0x115000, 0x180000, 0x116000)
	q3 := b.makeQP(fx.pdn, cqnB, 0x1d0000, 0x1ba000, 0x1d4000, 0x1bb000)
	q4 := b.makeQP(fx.pdn, cqnB, 0x1d8000, 0x1bc000, 0x1dc000, 0x1bd000)
	b.connect(q1, q2.qpn)
	b.connect(q2, q1.qpn)
	b.connect(q3, q4.qpn)
	b.connect(q4, q3.qpn)
	binary.LittleEndian.PutUint64(b.at(0x117000), 0x1a0000)
	key := b.ok(abi.OpRegMR, regMRArgs(fx.pdn, emu.AccessLocalWrite|emu.AccessRemoteWrite, 0x1a0000, 4096, 0, pageListBytes(0x117000, 1, 12, 1)))
	b.postWrite(q1, 1, key) // a CQE in A, never polled
	b.sim.RunUntilIdle(0)
	for range 50 {
		b.setArm(slotA, abi.ArmNext)
	}
	b.setArm(slotB, abi.ArmNext)
	b.postWrite(q3, 2, key)
	b.sim.RunUntilIdle(0)
	prod := binary.LittleEndian.Uint32(b.at(eqRing + abi.QHProducer))
	var got []uint32
	for i := range prod {
		got = append(got, binary.LittleEndian.Uint32(b.at(eqRing+abi.QueueHeaderSize+uint64(i)*abi.EQEntrySize+abi.EQNum)))
	}
	if len(got) != 2 || got[0] != cqnA || got[1] != cqnB {
		t.Fatalf("EQ entries for CQs %v, want one for A (%d) and one for B (%d)", got, cqnA, cqnB)
	}
}

// A send queue full of REG_MR work requests that cannot run yet (the QP drained to SQD), each
// naming the most pages its MR takes: what is queued is their descriptors, not their lists.
func TestHostileQueuedRegMRs(t *testing.T) {
	b := newBench(t)
	b.enable()
	pdn, q1, _, _ := b.trafficPair()
	const pages = abi.PLEntriesPerPage * abi.PLEntriesPerPage // the most two levels hold
	a := make([]byte, abi.AllocSTagArgsSize)
	put(a, abi.AllocSTagPD, 4, uint64(pdn))
	put(a, abi.AllocSTagKind, 4, abi.STagFastRegMR)
	put(a, abi.AllocSTagMaxPages, 4, pages)
	stag := b.ok(abi.OpAllocSTag, a)
	for i := range abi.PLEntriesPerPage {
		binary.LittleEndian.PutUint64(b.at(0x1b0000+uint64(8*i)), 0x1b1000)
		binary.LittleEndian.PutUint64(b.at(0x1b1000+uint64(8*i)), 0x1a0000)
	}
	m := make([]byte, abi.ModifyQPArgsSize)
	put(m, abi.ModifyQPNum, 4, uint64(q1.qpn))
	put(m, abi.ModifyQPMask, 4, uint64(emu.AttrState))
	m[abi.ModifyQPAttr+abi.QPAttrState] = byte(emu.QPSSQD)
	b.ok(abi.OpModifyQP, m)
	alloc := allocated(func() {
		for i := range 1<<q1.sqLog - 2 {
			b.rawSend(q1, sendWQE{id: uint64(100 + i), op: emu.WRRegMR, flags: emu.SendSignaled},
				[3]uint64{abi.RegWRKey, 4, uint64(stag&^0xff | uint32(i))}, [3]uint64{abi.RegWRAccess, 4, uint64(emu.AccessLocalWrite)},
				[3]uint64{abi.RegWRLength, 8, pages * 4096},
				[3]uint64{abi.RegWRPages + abi.PLAddr, 8, 0x1b0000}, [3]uint64{abi.RegWRPages + abi.PLPages, 4, pages},
				[3]uint64{abi.RegWRPages + abi.PLShift, 1, 12}, [3]uint64{abi.RegWRPages + abi.PLLevels, 1, 2})
		}
		b.sim.RunUntilIdle(0)
	})
	if alloc > maxAlloc {
		t.Fatalf("%d queued REG_MRs of %d pages allocated %d bytes", 1<<q1.sqLog-2, pages, alloc)
	}
	if got := b.cqes(0x140000, 1); len(got) != 0 {
		t.Fatalf("completions %+v from a QP in SQD", got)
	}
	b.wellBehaved()
}
