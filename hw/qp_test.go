package hw

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
)

// guestQP is a QP made through the control queue, its rings where the test put them.
type guestQP struct {
	qpn, slot    uint32
	sq, rq       uint64 // ring addresses
	sqLog, rqLog uint8
	sqProd       uint32
	rqProd       uint32
}

const (
	sqLogElem = 9 // 512-byte send WQEs: 208 + 16 SGEs, or 256 bytes inline
	rqLogElem = 7 // 128-byte receive WQEs: 40 + 4 SGEs
)

// makeQP creates an RC QP with 16-entry rings at sq and rq (page tables at sqT and rqT).
func (b *bench) makeQP(pdn, cqn uint32, sq, sqT, rq, rqT uint64) *guestQP {
	b.t.Helper()
	return b.makeQPOf(abi.QPTypeRC, pdn, cqn, sq, sqT, rq, rqT)
}

// makeQPOf is makeQP for a QP of type typ (abi.QPType*).
func (b *bench) makeQPOf(typ uint8, pdn, cqn uint32, sq, sqT, rq, rqT uint64) *guestQP {
	b.t.Helper()
	b.ringAt(sq, sqT, 3, 4, sqLogElem)
	b.ringAt(rq, rqT, 1, 4, rqLogElem)
	a := make([]byte, abi.CreateQPRQ+abi.QueueArgsSize)
	le := binary.LittleEndian
	le.PutUint32(a[abi.CreateQPPD:], pdn)
	a[abi.CreateQPType] = typ
	le.PutUint32(a[abi.CreateQPSendCQ:], cqn)
	le.PutUint32(a[abi.CreateQPRecvCQ:], cqn)
	le.PutUint32(a[abi.CreateQPMaxInline:], 256)
	le.PutUint16(a[abi.CreateQPSendSGE:], 4)
	le.PutUint16(a[abi.CreateQPRecvSGE:], 4)
	copy(a[abi.CreateQPSQ:], queueArgs(4, sqLogElem, sqT, 3))
	copy(a[abi.CreateQPRQ:], queueArgs(4, rqLogElem, rqT, 1))
	errno, res := b.cmd(abi.OpCreateQP, a)
	if errno != 0 {
		b.t.Fatalf("create_qp: %v", errno)
	}
	return &guestQP{qpn: res[0], slot: res[1], sq: sq, rq: rq, sqLog: 4, rqLog: 4}
}

// connect takes the QP through INIT, RTR and RTS to dest on the function's own address,
// granting every remote right.
func (b *bench) connect(q *guestQP, dest uint32) {
	b.t.Helper()
	b.connectTo(q, dest, "::ffff:192.0.2.1", emu.AccessRemoteWrite|emu.AccessRemoteRead|emu.AccessRemoteAtomic|emu.AccessFlushGlobal|emu.AccessFlushPersistent)
}

// loopbackPair makes a PD, a CQ on the ring at 0x140000 and two QPs on it connected to each
// other over the function's loopback.
func (b *bench) loopbackPair() (pdn uint32, q1, q2 *guestQP) {
	b.t.Helper()
	pdn = b.ok(abi.OpAllocPD, nil)
	b.ringAt(0x140000, 0x112000, 3, 7, 6)
	cqn := b.ok(abi.OpCreateCQ, append(queueArgs(7, 6, 0x112000, 3), u32s(0, 0, 0xffffffff)[8:]...))
	q1 = b.makeQP(pdn, cqn, 0x150000, 0x113000, 0x160000, 0x114000)
	q2 = b.makeQP(pdn, cqn, 0x170000, 0x115000, 0x180000, 0x116000)
	b.connect(q1, q2.qpn)
	b.connect(q2, q1.qpn)
	return pdn, q1, q2
}

// sendWQE is what a test puts in a send WQE.
type sendWQE struct {
	id             uint64
	op             emu.WROpcode
	flags          emu.SendFlags
	imm            uint32
	remote         uint64
	rkey           uint32
	sges           [][3]uint64 // addr, length, lkey
	inline         []byte
	numSGEOverride uint32
	mw             [6]uint64 // BIND_MW: addr, length, mr lkey, window rkey, new rkey, access
	flush          [2]uint32 // FLUSH: placement type, level
	flushLen       uint32
	ud             *udDest // a UD SEND's destination
}

// udDest is where a UD SEND goes: an AH number, or with 0 the rxe_av written into the WQE.
type udDest struct {
	ahNum, qpn, qkey uint32
	av               []byte
}

// post writes a WQE at the send queue's producer index, advances it and rings the doorbell.
func (b *bench) post(q *guestQP, w sendWQE) {
	b.t.Helper()
	b.putSend(q, w)
	b.ringSQ(q)
}

// ringSQ rings q's send-queue doorbell.
func (b *bench) ringSQ(q *guestQP) {
	b.t.Helper()
	var p [4]byte
	must(b.t, b.f.RegionWrite(abi.BARDoorbell, uint64(abi.SQDoorbell(q.slot)), p[:]))
}

// putSend writes a WQE at the send queue's producer index and advances it; it returns the
// WQE's slot.
func (b *bench) putSend(q *guestQP, w sendWQE) []byte {
	b.t.Helper()
	le := binary.LittleEndian
	e := b.at(q.sq + abi.QueueHeaderSize + uint64(q.sqProd)<<sqLogElem)[:1<<sqLogElem]
	clear(e)
	le.PutUint64(e[abi.SendWRID:], w.id)
	le.PutUint32(e[abi.SendOpcode:], uint32(w.op))
	le.PutUint32(e[abi.SendFlags:], uint32(w.flags))
	if w.op == emu.WRSendWithImm || w.op == emu.WRRDMAWriteWithImm {
		binary.BigEndian.PutUint32(e[abi.SendImm:], w.imm)
	} else {
		le.PutUint32(e[abi.SendImm:], w.imm)
	}
	le.PutUint64(e[abi.SendRemote:], w.remote)
	le.PutUint32(e[abi.SendRKey:], w.rkey)
	if w.op == emu.WRBindMW {
		le.PutUint64(e[abi.SendMWAddr:], w.mw[0])
		le.PutUint64(e[abi.SendMWLength:], w.mw[1])
		le.PutUint32(e[abi.SendMWMRLKey:], uint32(w.mw[2]))
		le.PutUint32(e[abi.SendMWRKey:], uint32(w.mw[3]))
		le.PutUint32(e[abi.SendMWNewRKey:], uint32(w.mw[4]))
		le.PutUint32(e[abi.SendMWAccess:], uint32(w.mw[5]))
	}
	if w.op == emu.WRFlush {
		// As rxe's provider writes a FLUSH: the rkey in wr.flush, the length in dma.length.
		le.PutUint32(e[abi.SendFlushLen:], 0)
		le.PutUint32(e[abi.SendFlushRKey:], w.rkey)
		e[abi.SendFlushType], e[abi.SendFlushLvl] = byte(w.flush[0]), byte(w.flush[1])
	}
	if d := w.ud; d != nil {
		le.PutUint32(e[abi.SendRemoteQPN:], d.qpn)
		le.PutUint32(e[abi.SendRemoteQKey:], d.qkey)
		le.PutUint32(e[abi.SendAHNum:], d.ahNum)
		copy(e[abi.SendAV:abi.SendAV+abi.RXEAVSize], d.av)
	}
	n := uint32(len(w.sges))
	if w.numSGEOverride != 0 {
		n = w.numSGEOverride
	}
	le.PutUint32(e[abi.SendDMANumSGE:], n)
	total := uint32(0)
	for i, s := range w.sges {
		o := abi.SendSGEs + i*abi.SGESize
		le.PutUint64(e[o+abi.SGEAddr:], s[0])
		le.PutUint32(e[o+abi.SGELength:], uint32(s[1]))
		le.PutUint32(e[o+abi.SGELKey:], uint32(s[2]))
		total += uint32(s[1])
	}
	if w.inline != nil {
		copy(e[abi.SendSGEs:], w.inline)
		total = uint32(len(w.inline))
	}
	if w.op == emu.WRFlush {
		total = w.flushLen
	}
	le.PutUint32(e[abi.SendDMALength:], total)
	q.sqProd = (q.sqProd + 1) & (1<<q.sqLog - 1)
	le.PutUint32(b.at(q.sq+abi.QHProducer), q.sqProd)
	return e
}

// postRecv writes a receive WQE and advances the producer index; there is no doorbell.
func (b *bench) postRecv(q *guestQP, id uint64, addr uint64, length, lkey uint32) {
	le := binary.LittleEndian
	e := b.at(q.rq + abi.QueueHeaderSize + uint64(q.rqProd)<<rqLogElem)[:1<<rqLogElem]
	clear(e)
	le.PutUint64(e[abi.RecvWRID:], id)
	le.PutUint32(e[abi.RecvDMANumSGE:], 1)
	le.PutUint64(e[abi.RecvSGEs+abi.SGEAddr:], addr)
	le.PutUint32(e[abi.RecvSGEs+abi.SGELength:], length)
	le.PutUint32(e[abi.RecvSGEs+abi.SGELKey:], lkey)
	q.rqProd = (q.rqProd + 1) & (1<<q.rqLog - 1)
	le.PutUint32(b.at(q.rq+abi.QHProducer), q.rqProd)
}

// cqes reads the CQ ring's completions from index from to its producer.
func (b *bench) cqes(ring uint64, from uint32) []emu.WC {
	le := binary.LittleEndian
	prod := le.Uint32(b.at(ring + abi.QHProducer))
	var out []emu.WC
	for i := from; i != prod; i = (i + 1) & 127 {
		e := b.at(ring + abi.QueueHeaderSize + uint64(i)*64)
		wc := emu.WC{WRID: le.Uint64(e[abi.CQEWRID:]), Status: emu.WCStatus(le.Uint32(e[abi.CQEStatus:])),
			Opcode: emu.WCOpcode(le.Uint32(e[abi.CQEOpcode:])), ByteLen: le.Uint32(e[abi.CQEByteLen:]),
			QPNum: le.Uint32(e[abi.CQEQPNum:]), Flags: emu.WCFlags(le.Uint32(e[abi.CQEWCFlags:]))}
		wc.Imm = le.Uint32(e[abi.CQEImm:])
		if wc.Flags&emu.WCWithImm != 0 {
			wc.Imm = binary.BigEndian.Uint32(e[abi.CQEImm:])
		}
		out = append(out, wc)
	}
	return out
}

// The data path through guest rings in rxe's layout: two QPs of the function connected to each
// other over its loopback; WRITE, inline WRITE, SEND into a receive the driver posted without a
// doorbell, WRITE_WITH_IMM, a type 2 window bound by a BIND_MW WQE and written through, and a
// malformed WQE completing LOC_QP_OP_ERR in its place; the send queue's consumer index follows
// the retired WQEs.
func TestQueuePairDataPath(t *testing.T) {
	b := newBench(t)
	b.enable()
	pdn, q1, q2 := b.loopbackPair()
	// The data: one MR over 0x1a0000-0x1a3fff (source at 0x1a0000, target at 0x1a2000).
	for i := range 4 {
		binary.LittleEndian.PutUint64(b.at(0x117000+uint64(8*i)), 0x1a0000+uint64(i)*4096)
	}
	all := emu.AccessLocalWrite | emu.AccessRemoteWrite | emu.AccessRemoteRead | emu.AccessMWBind
	key := b.ok(abi.OpRegMR, regMRArgs(pdn, all, 0x1a0000, 4*4096, 0, pageListBytes(0x117000, 4, 12, 1)))
	for i := range 256 {
		b.at(0x1a0000)[i] = byte(i)
	}
	src := [3]uint64{0x1a0000, 256, uint64(key)}

	b.post(q1, sendWQE{id: 1, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: 0x1a2000, rkey: key, sges: [][3]uint64{src}})
	b.post(q1, sendWQE{id: 2, op: emu.WRRDMAWrite, flags: emu.SendSignaled | emu.SendInline, remote: 0x1a2800, rkey: key, inline: []byte("inline bytes")})
	b.postRecv(q2, 50, 0x1a3000, 512, key)
	b.post(q1, sendWQE{id: 3, op: emu.WRSend, flags: emu.SendSignaled, sges: [][3]uint64{src}})
	b.postRecv(q2, 51, 0x1a3200, 512, key)
	b.post(q1, sendWQE{id: 4, op: emu.WRRDMAWriteWithImm, flags: emu.SendSignaled, imm: 0xdeadbeef, remote: 0x1a2100, rkey: key, sges: [][3]uint64{src}})
	b.sim.RunUntilIdle(0)
	want := []emu.WC{
		{WRID: 1, Opcode: emu.WCRDMAWrite, ByteLen: 256, QPNum: q1.qpn},
		{WRID: 2, Opcode: emu.WCRDMAWrite, ByteLen: 12, QPNum: q1.qpn},
		{WRID: 50, Opcode: emu.WCRecv, ByteLen: 256, QPNum: q2.qpn},
		{WRID: 3, Opcode: emu.WCSend, ByteLen: 256, QPNum: q1.qpn},
		{WRID: 51, Opcode: emu.WCRecvRDMAWithImm, ByteLen: 256, QPNum: q2.qpn, Imm: 0xdeadbeef, Flags: emu.WCWithImm},
		{WRID: 4, Opcode: emu.WCRDMAWrite, ByteLen: 256, QPNum: q1.qpn},
	}
	got := b.cqes(0x140000, 0)
	if len(got) != len(want) {
		t.Fatalf("completions %v, want %v", got, want)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if g.WRID == w.WRID && g.Opcode == w.Opcode && g.ByteLen == w.ByteLen && g.QPNum == w.QPNum && g.Status == emu.WCSuccess && g.Imm == w.Imm && g.Flags == w.Flags {
				found = true
			}
		}
		if !found {
			t.Fatalf("no completion %+v in %v", w, got)
		}
	}
	if !bytes.Equal(b.at(0x1a2000)[:256], b.at(0x1a0000)[:256]) || string(b.at(0x1a2800)[:12]) != "inline bytes" ||
		!bytes.Equal(b.at(0x1a3000)[:256], b.at(0x1a0000)[:256]) {
		t.Fatal("data did not land")
	}
	if cons := binary.LittleEndian.Uint32(b.at(0x150000 + abi.QHConsumer)); cons != 4 {
		t.Fatalf("send queue consumer %d after 4 retired WQEs", cons)
	}
	if cons := binary.LittleEndian.Uint32(b.at(0x180000 + abi.QHConsumer)); cons != 2 {
		t.Fatalf("receive queue consumer %d after 2 receives", cons)
	}

	// Six WRITEs answered by one coalesced ACK retire together: the consumer index moves by six.
	for id := uint64(20); id < 26; id++ {
		b.post(q1, sendWQE{id: id, op: emu.WRRDMAWrite, remote: 0x1a2000, rkey: key, sges: [][3]uint64{{0x1a0000, 8, uint64(key)}}})
	}
	b.sim.RunUntilIdle(0)
	if cons := binary.LittleEndian.Uint32(b.at(0x150000 + abi.QHConsumer)); cons != 10 {
		t.Fatalf("send queue consumer %d after 10 retired WQEs", cons)
	}

	// A type 2 window bound by a BIND_MW WQE; a WRITE through its rkey lands.
	mw := b.ok(abi.OpAllocSTag, u32s(pdn, abi.STagMWType2B, 0))
	newKey := mw&^0xff | (mw+7)&0xff
	b.post(q2, sendWQE{id: 60, op: emu.WRBindMW, flags: emu.SendSignaled,
		mw: [6]uint64{0x1a2400, 256, uint64(key), uint64(mw), uint64(newKey), uint64(emu.AccessRemoteWrite)}})
	b.post(q1, sendWQE{id: 5, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: 0x1a2400, rkey: newKey, sges: [][3]uint64{{0x1a0000, 16, uint64(key)}}})
	b.sim.RunUntilIdle(0)
	got = b.cqes(0x140000, 6)
	if len(got) != 2 || got[0].WRID != 60 || got[0].Opcode != emu.WCBindMW || got[0].Status != emu.WCSuccess ||
		got[1].WRID != 5 || got[1].Status != emu.WCSuccess {
		t.Fatalf("bind and write through the window: %v", got)
	}
	if !bytes.Equal(b.at(0x1a2400)[:16], b.at(0x1a0000)[:16]) {
		t.Fatal("the WRITE through the window did not land")
	}

	// ATOMIC_WRITE with its 8 bytes in the WQE, and a FLUSH, through an MR with FLUSH rights.
	key2 := b.ok(abi.OpRegMR, regMRArgs(pdn, emu.AccessLocalWrite|emu.AccessRemoteWrite|emu.AccessFlushGlobal, 0x1a0000, 4*4096, 0, pageListBytes(0x117000, 4, 12, 1)))
	b.post(q1, sendWQE{id: 7, op: emu.WRAtomicWrite, flags: emu.SendSignaled, remote: 0x1a2f00, rkey: key2, inline: []byte{1, 2, 3, 4, 5, 6, 7, 8}})
	b.post(q1, sendWQE{id: 8, op: emu.WRFlush, flags: emu.SendSignaled, remote: 0x1a2f00, rkey: key2, flush: [2]uint32{uint32(emu.FlushGlobal), uint32(emu.FlushRange)}, flushLen: 8})
	b.sim.RunUntilIdle(0)
	got = b.cqes(0x140000, 8)
	if len(got) != 2 || got[0].WRID != 7 || got[0].Status != emu.WCSuccess || got[0].Opcode != emu.WCAtomicWrite ||
		got[1].WRID != 8 || got[1].Status != emu.WCSuccess || got[1].Opcode != emu.WCFlush {
		t.Fatalf("ATOMIC_WRITE and FLUSH: %v", got)
	}
	if !bytes.Equal(b.at(0x1a2f00)[:8], []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("ATOMIC_WRITE stored % x", b.at(0x1a2f00)[:8])
	}

	// A WQE naming 9 SGEs on a QP that takes 4 completes LOC_QP_OP_ERR in its place.
	b.post(q1, sendWQE{id: 6, op: emu.WRSend, flags: emu.SendSignaled, sges: [][3]uint64{src}, numSGEOverride: 9})
	b.sim.RunUntilIdle(0)
	got = b.cqes(0x140000, 10)
	if len(got) != 1 || got[0].WRID != 6 || got[0].Status != emu.WCLocQPOpErr {
		t.Fatalf("malformed WQE: %v", got)
	}
}

// A QP on an SRQ: SENDs take the SRQ's receives in order, the limit fires SRQ_LIMIT_REACHED on
// the async EQ once when fewer than it remain posted, and QUERY_SRQ reports it disarmed; a
// resize moves the receives still posted to the new ring, and the driver posts on from there.
func TestSharedReceiveQueue(t *testing.T) {
	b := newBench(t)
	b.enable()
	pdn := b.ok(abi.OpAllocPD, nil)
	b.ringAt(0x130000, 0x111000, 1, 3, 4)
	b.ok(abi.OpCreateEQ, append(pageListBytes(0x111000, 1, 12, 1), 3, abi.EQAsync, 1, 0))
	b.ringAt(0x140000, 0x112000, 3, 7, 6)
	cqn := b.ok(abi.OpCreateCQ, append(queueArgs(7, 6, 0x112000, 3), u32s(0, 0, 0xffffffff)[8:]...))
	b.ringAt(0x190000, 0x118000, 1, 4, rqLogElem)
	srqn := b.ok(abi.OpCreateSRQ, append(u32s(pdn, 4, 3, 0), queueArgs(4, rqLogElem, 0x118000, 1)...))

	q1 := b.makeQP(pdn, cqn, 0x150000, 0x113000, 0x160000, 0x114000)
	// q2 on the SRQ.
	b.ringAt(0x170000, 0x115000, 3, 4, sqLogElem)
	a := make([]byte, abi.CreateQPRQ+abi.QueueArgsSize)
	le := binary.LittleEndian
	le.PutUint32(a[abi.CreateQPPD:], pdn)
	a[abi.CreateQPType] = 2
	le.PutUint32(a[abi.CreateQPSendCQ:], cqn)
	le.PutUint32(a[abi.CreateQPRecvCQ:], cqn)
	le.PutUint32(a[abi.CreateQPSRQ:], srqn)
	le.PutUint16(a[abi.CreateQPSendSGE:], 4)
	le.PutUint16(a[abi.CreateQPRecvSGE:], 4)
	copy(a[abi.CreateQPSQ:], queueArgs(4, sqLogElem, 0x115000, 3))
	errno, res := b.cmd(abi.OpCreateQP, a)
	if errno != 0 {
		t.Fatal(errno)
	}
	q2 := &guestQP{qpn: res[0], slot: res[1], sq: 0x170000, sqLog: 4}
	b.connect(q1, q2.qpn)
	b.connect(q2, q1.qpn)
	for i := range 4 {
		binary.LittleEndian.PutUint64(b.at(0x117000+uint64(8*i)), 0x1a0000+uint64(i)*4096)
	}
	key := b.ok(abi.OpRegMR, regMRArgs(pdn, emu.AccessLocalWrite, 0x1a0000, 4*4096, 0, pageListBytes(0x117000, 4, 12, 1)))
	srq := &guestQP{rq: 0x190000, rqLog: 4}
	for i := range 5 {
		b.postRecv(srq, uint64(70+i), 0x1a1000+uint64(i)*256, 256, key)
	}
	for i := range 3 {
		b.post(q1, sendWQE{id: uint64(i + 1), op: emu.WRSend, flags: emu.SendSignaled, sges: [][3]uint64{{0x1a0000, 32, uint64(key)}}})
	}
	b.sim.RunUntilIdle(0)
	var recvs []uint64
	for _, wc := range b.cqes(0x140000, 0) {
		if wc.Opcode == emu.WCRecv {
			if wc.Status != emu.WCSuccess || wc.QPNum != q2.qpn {
				t.Fatalf("receive completion %+v", wc)
			}
			recvs = append(recvs, wc.WRID)
		}
	}
	if fmt.Sprint(recvs) != "[70 71 72]" {
		t.Fatalf("receives %v", recvs)
	}
	// 5 posted, 3 taken: fewer than 3 remain after the third, so the limit fired once.
	if prod := binary.LittleEndian.Uint32(b.at(0x130000 + abi.QHProducer)); prod != 1 {
		t.Fatalf("%d async events", prod)
	}
	if e := b.at(0x130000 + abi.QueueHeaderSize); emu.AsyncEventType(e[abi.EQType]) != emu.AsyncSRQLimitReached || binary.LittleEndian.Uint32(e[abi.EQNum:]) != srqn {
		t.Fatalf("async event % x", e[:8])
	}
	if _, res := b.cmd(abi.OpQuerySRQ, u32s(srqn)); res[0] != 15 || res[1] != 4 || res[2] != 0 {
		t.Fatalf("query_srq %v", res)
	}

	// Resizing (max_wr): 73 and 74 are posted and not taken. A ring of one receive is too
	// small and changes nothing; one of seven gets them at its start, in order.
	b.ringAt(0x1b0000, 0x119000, 1, 1, rqLogElem)
	if errno, _ := b.cmd(abi.OpModifySRQ, append(u32s(srqn, 1, 0, 0), queueArgs(1, rqLogElem, 0x119000, 1)...)); errno != syscall.EINVAL {
		t.Fatalf("resizing to fewer receives than are posted: %v", errno)
	}
	b.ringAt(0x1c0000, 0x11a000, 1, 3, rqLogElem)
	b.ok(abi.OpModifySRQ, append(u32s(srqn, 1|2, 2, 0), queueArgs(3, rqLogElem, 0x11a000, 1)...))
	if prod, cons := binary.LittleEndian.Uint32(b.at(0x1c0000+abi.QHProducer)), binary.LittleEndian.Uint32(b.at(0x1c0000+abi.QHConsumer)); prod != 2 || cons != 0 {
		t.Fatalf("the new ring's indices: producer %d consumer %d", prod, cons)
	}
	if _, res := b.cmd(abi.OpQuerySRQ, u32s(srqn)); res != [4]uint32{7, 4, 2, 0} {
		t.Fatalf("query_srq after the resize %v", res)
	}
	// The driver goes on from the new ring's producer index.
	srq = &guestQP{rq: 0x1c0000, rqLog: 3, rqProd: 2}
	b.postRecv(srq, 75, 0x1a1500, 256, key)
	b.postRecv(srq, 76, 0x1a1600, 256, key)
	for i := range 4 {
		b.post(q1, sendWQE{id: uint64(i + 10), op: emu.WRSend, flags: emu.SendSignaled, sges: [][3]uint64{{0x1a0000, 32, uint64(key)}}})
	}
	b.sim.RunUntilIdle(0)
	recvs = recvs[:0]
	for _, wc := range b.cqes(0x140000, 6) {
		if wc.Opcode == emu.WCRecv && wc.Status == emu.WCSuccess {
			recvs = append(recvs, wc.WRID)
		}
	}
	if fmt.Sprint(recvs) != "[73 74 75 76]" {
		t.Fatalf("receives after the resize %v", recvs)
	}
	for _, c := range []struct {
		name  string
		args  []byte
		errno syscall.Errno
	}{
		{"unknown_srq", u32s(99, 2, 1), syscall.ENOENT},
		{"no_mask", u32s(srqn, 0, 1), syscall.EINVAL},
		{"unknown_mask", u32s(srqn, 4, 1), syscall.EINVAL},
		{"limit_past_ring", u32s(srqn, 2, 8), syscall.EINVAL},
	} {
		if errno, _ := b.cmd(abi.OpModifySRQ, c.args); errno != c.errno {
			t.Errorf("%s: %v, want %v", c.name, errno, c.errno)
		}
	}
}

// FuzzSendQueue: whatever a guest writes into its send queue, rings the doorbell for, and
// leaves in its receive queue, the function turns into work requests or error completions:
// nothing panics, nothing outside guest memory is touched, and the function keeps serving.
func FuzzSendQueue(f *testing.F) {
	wqe := make([]byte, 1<<sqLogElem)
	binary.LittleEndian.PutUint32(wqe[abi.SendOpcode:], uint32(emu.WRSend))
	binary.LittleEndian.PutUint32(wqe[abi.SendDMANumSGE:], 1)
	f.Add(wqe, []byte{}, uint8(1))
	binary.LittleEndian.PutUint32(wqe[abi.SendOpcode:], uint32(emu.WRBindMW))
	f.Add(wqe, []byte{1, 0, 0, 0, 0, 0, 0, 0, 1}, uint8(3))
	binary.LittleEndian.PutUint32(wqe[abi.SendOpcode:], uint32(emu.WRRDMAWrite))
	binary.LittleEndian.PutUint32(wqe[abi.SendFlags:], uint32(emu.SendInline))
	binary.LittleEndian.PutUint32(wqe[abi.SendDMALength:], 0xffffffff)
	f.Add(wqe, []byte{}, uint8(16))
	f.Fuzz(func(t *testing.T, sqe, rqe []byte, n uint8) {
		b := newBench(t)
		b.enable()
		_, q1, q2 := b.loopbackPair()
		// n WQEs of the fuzzer's bytes in q1's send queue, its receive WQE bytes in q2's.
		for i := range int(n % 16) {
			copy(b.at(q1.sq + abi.QueueHeaderSize + uint64(i)<<sqLogElem)[:1<<sqLogElem], sqe)
			copy(b.at(q2.rq + abi.QueueHeaderSize + uint64(i)<<rqLogElem)[:1<<rqLogElem], rqe)
		}
		binary.LittleEndian.PutUint32(b.at(q1.sq+abi.QHProducer), uint32(n%16))
		binary.LittleEndian.PutUint32(b.at(q2.rq+abi.QHProducer), uint32(n%16))
		var p [4]byte
		must(t, b.f.RegionWrite(abi.BARDoorbell, uint64(abi.SQDoorbell(q1.slot)), p[:]))
		b.sim.RunUntilIdle(1_000_000)
		b.ok(abi.OpNop, nil)
	})
}

// The kernel-only REG_MR WQE: a fast-register MR from ALLOC_STAG takes the pages the WQE's page
// list names, a WRITE through its new key lands in them, and a LOCAL_INV of that key stops the
// next one.
func TestRegMRWorkRequest(t *testing.T) {
	b := newBench(t)
	b.enable()
	pdn, q1, q2 := b.loopbackPair()
	binary.LittleEndian.PutUint64(b.at(0x117000), 0x1a0000)
	src := b.ok(abi.OpRegMR, regMRArgs(pdn, emu.AccessLocalWrite, 0x1a0000, 4096, 0, pageListBytes(0x117000, 1, 12, 1)))
	fr := b.ok(abi.OpAllocSTag, u32s(pdn, abi.STagFastRegMR, 4))
	key := fr&^0xff | (fr+9)&0xff
	// The REG_MR WQE on q2: pages 0x1c1000 then 0x1c0000, 5000 bytes from offset 16.
	binary.LittleEndian.PutUint64(b.at(0x118000), 0x1c1000)
	binary.LittleEndian.PutUint64(b.at(0x118008), 0x1c0000)
	e := b.at(q2.sq + abi.QueueHeaderSize + uint64(q2.sqProd)<<sqLogElem)[:1<<sqLogElem]
	clear(e)
	le := binary.LittleEndian
	le.PutUint64(e[abi.SendWRID:], 5)
	le.PutUint32(e[abi.SendOpcode:], abi.WROpRegMR)
	le.PutUint32(e[abi.SendFlags:], uint32(emu.SendSignaled))
	le.PutUint32(e[abi.RegWRKey:], key)
	le.PutUint32(e[abi.RegWRAccess:], uint32(emu.AccessLocalWrite|emu.AccessRemoteWrite))
	le.PutUint64(e[abi.RegWRIOVA:], 0x8000_0010)
	le.PutUint64(e[abi.RegWRLength:], 5000)
	le.PutUint64(e[abi.RegWROffset:], 16)
	copy(e[abi.RegWRPages:], pageListBytes(0x118000, 2, 12, 1))
	q2.sqProd++
	le.PutUint32(b.at(q2.sq+abi.QHProducer), q2.sqProd)
	var p [4]byte
	must(t, b.f.RegionWrite(abi.BARDoorbell, uint64(abi.SQDoorbell(q2.slot)), p[:]))
	b.sim.RunUntilIdle(0)
	if got := b.cqes(0x140000, 0); len(got) != 1 || got[0].WRID != 5 || got[0].Status != emu.WCSuccess || got[0].Opcode != emu.WCRegMR {
		t.Fatalf("REG_MR completion %v", got)
	}
	for i := range 4096 {
		b.at(0x1a0000)[i] = byte(i*3 + 1)
	}
	b.post(q1, sendWQE{id: 6, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: 0x8000_0010, rkey: key, sges: [][3]uint64{{0x1a0000, 4096, uint64(src)}}})
	b.sim.RunUntilIdle(0)
	if got := b.cqes(0x140000, 1); len(got) != 1 || got[0].WRID != 6 || got[0].Status != emu.WCSuccess {
		t.Fatalf("WRITE through the fast-registered MR: %v", got)
	}
	if !bytes.Equal(b.at(0x1c1010)[:4096-16], b.at(0x1a0000)[:4096-16]) || !bytes.Equal(b.at(0x1c0000)[:16], b.at(0x1a0000 + 4096 - 16)[:16]) {
		t.Fatal("the WRITE did not land in the pages the REG_MR named")
	}
}

// Bus mastering turned off under a running function stops it: FATAL with code 3, and from then
// on nothing reaches guest memory: a peer's WRITE through a guest MR is refused, a doorbell
// fetches no WQE and no completion lands in a CQ ring.
func TestBusMasterOffStopsDMA(t *testing.T) {
	b := newBench(t)
	b.enable()
	pdn, q1, key, mr := b.trafficPair()
	must(t, b.f.ConfigWrite(pciCommand, []byte{cmdMemory}))
	if st, code := b.reg(abi.RegDevStatus), b.reg(abi.RegFatalCode); st != abi.DevStatusFatal || code != abi.FatalBusMaster {
		t.Fatalf("status 0x%x code %d", st, code)
	}
	before := bytes.Clone(b.ram)
	b.writeThrough(t, pdn, mr, key, 64, emu.WCRemAccessErr)
	b.postWrite(q1, 2, key)
	b.sim.RunUntilIdle(0)
	b.unchangedBut(before, [2]uint64{q1.sq + abi.QHProducer, 4}, [2]uint64{q1.sq + abi.QueueHeaderSize + 1<<sqLogElem, 1 << sqLogElem})
}

// trafficPair is a loopback pair with an MR over the page at 0x1a0000 through which q1 has
// written once, successfully.
func (b *bench) trafficPair() (pdn uint32, q1 *guestQP, key uint32, mr *emu.MR) {
	b.t.Helper()
	pdn, q1, _ = b.loopbackPair()
	binary.LittleEndian.PutUint64(b.at(0x117000), 0x1a0000)
	key = b.ok(abi.OpRegMR, regMRArgs(pdn, emu.AccessLocalWrite|emu.AccessRemoteWrite, 0x1a0000, 4096, 0, pageListBytes(0x117000, 1, 12, 1)))
	mr, _ = b.f.Device().MR(key)
	b.postWrite(q1, 1, key)
	b.sim.RunUntilIdle(0)
	if got := b.cqes(0x140000, 0); len(got) != 1 || got[0].Status != emu.WCSuccess {
		b.t.Fatalf("the first WRITE: %+v", got)
	}
	return pdn, q1, key, mr
}

// postWrite posts a signaled 64-byte WRITE from 0x1a0000 to 0x1a0800 through key.
func (b *bench) postWrite(q *guestQP, id uint64, key uint32) {
	b.post(q, sendWQE{id: id, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: 0x1a0800, rkey: key, sges: [][3]uint64{{0x1a0000, 64, uint64(key)}}})
}

// unchangedBut fails the test if guest memory differs from before anywhere but in the ranges
// (address, length) the test itself wrote.
func (b *bench) unchangedBut(before []byte, wrote ...[2]uint64) {
	b.t.Helper()
	for _, r := range wrote {
		copy(before[r[0]-ramBase:][:r[1]], b.at(r[0])[:r[1]])
	}
	if i := firstDiff(before, b.ram); i >= 0 {
		b.t.Fatalf("guest memory changed at 0x%x", ramBase+uint64(i))
	}
}

// firstDiff is the first index where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// FuzzGuestMemory: a function with every kind of object (EQs, a CQ armed for events, two
// connected QPs, an SRQ, an MR) whose guest memory the fuzzer then overwrites, all of it but the
// control queue (page tables, ring headers and indices, WQEs, CQEs), before it runs a control
// command of the fuzzer's, rings every doorbell and lets the engine run: nothing panics, no
// access leaves guest memory, and the control queue still answers.
func FuzzGuestMemory(f *testing.F) {
	f.Add([]byte{}, uint32(0), []byte{})
	seed := make([]byte, 0x400)
	for i := range seed {
		seed[i] = byte(i * 7)
	}
	f.Add(seed, uint32(0x113000-ramBase), binary.LittleEndian.AppendUint16(nil, abi.OpResizeCQ))
	f.Add(bytes.Repeat([]byte{0xff}, 64), uint32(0x150000+abi.QHProducer-ramBase), binary.LittleEndian.AppendUint16(nil, abi.OpModifySRQ))
	f.Add(bytes.Repeat([]byte{0x01}, 512), uint32(0x190000+abi.QueueHeaderSize-ramBase), []byte{})
	f.Fuzz(func(t *testing.T, mem []byte, at uint32, entry []byte) {
		b := newBench(t)
		b.enable()
		pdn, q1, key, _ := b.trafficPair()
		b.ringAt(0x130000, 0x111000, 1, 3, 4)
		b.ok(abi.OpCreateEQ, append(pageListBytes(0x111000, 1, 12, 1), 3, abi.EQAsync, 1, 0))
		b.ringAt(0x190000, 0x118000, 1, 4, rqLogElem)
		srqn := b.ok(abi.OpCreateSRQ, append(u32s(pdn, 4, 3, 0), queueArgs(4, rqLogElem, 0x118000, 1)...))
		b.setArm(0, abi.ArmNext)
		b.postWrite(q1, 2, key)

		// The fuzzer's bytes anywhere past the control queue's page.
		off := uint64(at)%(uint64(len(b.ram))-4096) + 4096
		copy(b.ram[off:], mem)
		var args []byte
		if len(entry) >= 2 {
			if len(entry) > abi.CtrlArgs {
				args = entry[abi.CtrlArgs:min(len(entry), abi.CtrlEntrySize)]
			}
			b.cmd(binary.LittleEndian.Uint16(entry), args)
		}
		var p [4]byte
		for slot := range uint64(4) {
			must(t, b.f.RegionWrite(abi.BARDoorbell, uint64(abi.SQDoorbell(uint32(slot))), p[:]))
		}
		b.setArm(0, abi.ArmSolicited)
		b.sim.RunUntilIdle(1_000_000)
		b.cmd(abi.OpQuerySRQ, u32s(srqn))
		if st := b.reg(abi.RegDevStatus); st != abi.DevStatusReady {
			t.Fatalf("the function stopped (status 0x%x, code %d)", st, b.reg(abi.RegFatalCode))
		}
		b.ok(abi.OpNop, nil)
	})
}

// A receive posted to a QP in ERR completes WR_FLUSH_ERR once the send queue's doorbell rings
// (the receive queue has none): the kernel's ib_drain_rq posts one and waits for it.
func TestReceivePostedInErrorFlushed(t *testing.T) {
	b := newBench(t)
	b.enable()
	_, _, q2 := b.loopbackPair()
	a := make([]byte, 8+abi.QPAttrSize)
	binary.LittleEndian.PutUint32(a, q2.qpn)
	binary.LittleEndian.PutUint32(a[4:], uint32(emu.AttrState))
	a[8+abi.QPAttrState] = byte(emu.QPSErr)
	b.ok(abi.OpModifyQP, a)
	b.sim.RunUntilIdle(0)
	before := len(b.cqes(0x140000, 0))
	b.postRecv(q2, 77, 0x1a0000, 64, 0)
	b.sim.RunUntilIdle(0)
	if got := b.cqes(0x140000, 0)[before:]; len(got) != 0 {
		t.Fatalf("completions before the doorbell %v", got)
	}
	b.ringSQ(q2)
	b.sim.RunUntilIdle(0)
	got := b.cqes(0x140000, 0)[before:]
	if len(got) != 1 || got[0].WRID != 77 || got[0].Status != emu.WCWRFlushErr || got[0].Opcode != emu.WCRecv {
		t.Fatalf("completions %v", got)
	}
}
