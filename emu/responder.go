package emu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire"
)

// responder is the receive side of an RC QP: it checks requests in the order of rxe's
// responder (PSN, opcode sequence, QP rights, resources, length, rkey), executes them, and
// answers with ACKs, NAKs, READ responses and atomic acknowledgements.
type responder struct {
	psn     uint32 // the next PSN expected
	msn     uint32
	nakSent bool // a sequence NAK went out for the current gap

	// The message in progress.
	inSend, inWrite bool
	recv            *recvWQE // the receive WQE a SEND or WRITE_WITH_IMM consumes (points at held)
	held            recvWQE  // that WQE, taken off its queue when the message started
	placed          uint64   // bytes of the current SEND placed
	va              uint64   // the current WRITE's next address
	rkey            uint32
	left            uint64 // bytes the current WRITE still expects
	writeLen        uint64

	res    []rdResource // READ and atomic results, for duplicates
	resIdx int

	waitingRecv bool
}

// rdResource remembers a READ, atomic, FLUSH or ATOMIC_WRITE so a duplicate request can be
// answered again without running it again.
type rdResource struct {
	used        bool
	atomic      bool
	flush       bool // a FLUSH: answered again with its empty READ response
	atomicWrite bool // an ATOMIC_WRITE: acknowledged again, not stored again
	first, last uint32
	va          uint64
	rkey        uint32
	length      uint64
	orig        uint64
}

func (r *responder) reset(qp *QP) {
	*r = responder{psn: qp.attr.RQPSN, res: make([]rdResource, max(1, int(qp.attr.MaxDestRdAtomic)))}
}

func microseconds(us uint32) time.Duration { return time.Duration(us) * time.Microsecond }

// respError is a failed request: the NAK to send and what the receiving side records.
type respError struct {
	syn    wire.Syndrome
	status WCStatus // for the receive completion, when a receive WQE is involved
	err    error
}

func nak(syn wire.Syndrome, format string, args ...any) *respError {
	return &respError{syn: syn, err: fmt.Errorf(format, args...)}
}

// onRequest handles a request packet.
func (qp *QP) onRequest(f *wire.Frame) {
	d := qp.dev
	r := &qp.resp
	switch qp.state {
	case QPSRTR, QPSRTS, QPSSQD, QPSSQE:
	default:
		d.stats.RxDropped++
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s while %s", f.Opcode, qp.state)})
		return
	}
	psn := f.BTH.PSN()
	switch c := psnCmp(psn, r.psn); {
	case c > 0:
		d.stats.RxDropped++
		if !r.nakSent {
			r.nakSent = true
			d.stats.SeqNAKsSent++
			d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Msg: fmt.Sprintf("psn %d ahead of %d: NAK sequence error", psn, r.psn)})
			qp.sendAck(wire.NAKPSNSeqError, r.psn)
		}
		return
	case c < 0:
		d.stats.DuplicatesSeen++
		qp.onDuplicate(f, psn)
		return
	}
	r.nakSent = false
	if e := qp.execute(f, psn); e != nil {
		qp.respFail(f, psn, e)
	}
}

// execute checks and carries out an in-sequence request.
func (qp *QP) execute(f *wire.Frame, psn uint32) *respError {
	d := qp.dev
	r := &qp.resp
	info := f.Info
	op := f.Opcode
	mtu := qp.attr.PathMTU.Bytes()
	isSend := info.Is(wire.FlagSend)
	isWrite := info.Is(wire.FlagWrite)
	continues := !info.Is(wire.FlagStart) // a MIDDLE or LAST

	// Opcode sequence: a message in progress must go on; none may start in the middle.
	switch {
	case r.inSend && !(isSend && continues):
		return nak(wire.NAKInvalidRequest, "%s in the middle of a SEND", op)
	case r.inWrite && !(isWrite && continues):
		return nak(wire.NAKInvalidRequest, "%s in the middle of an RDMA WRITE", op)
	case !r.inSend && !r.inWrite && continues && (isSend || isWrite):
		return nak(wire.NAKInvalidRequest, "%s without a FIRST", op)
	}
	// The QP's own rights (0x61, not 0x62: K10).
	var need Access
	switch {
	case isWrite:
		need = AccessRemoteWrite
	case info.Is(wire.FlagRead):
		need = AccessRemoteRead
	case info.Is(wire.FlagAtomic):
		need = AccessRemoteAtomic
	case info.Is(wire.FlagAtomicWrite):
		need = AccessRemoteWrite // rxe's check_qp_attr_access treats it as a WRITE
	case info.Is(wire.FlagFlush):
		// rxe also asks the QP for the FLUSH_* flags of the placement type; the QP's access
		// flags do not take them yet, so only the MR's rights are checked (execFlush).
	case isSend:
	default:
		return nak(wire.NAKInvalidRequest, "opcode %s is not supported on an RC QP", op)
	}
	if need != 0 && qp.attr.AccessFlags&need == 0 {
		return nak(wire.NAKInvalidRequest, "%s needs %s in the QP's access flags (%s)", op, need, qp.attr.AccessFlags)
	}
	if info.Is(wire.FlagRead|wire.FlagAtomic|wire.FlagAtomicWrite|wire.FlagFlush) && qp.attr.MaxDestRdAtomic == 0 {
		return nak(wire.NAKInvalidRequest, "%s with max_dest_rd_atomic 0", op)
	}
	// Payload length by place in the message.
	n := len(f.Payload)
	switch info.Class {
	case wire.First, wire.Middle:
		if (isSend || isWrite) && n != mtu {
			return nak(wire.NAKInvalidRequest, "%s with %d bytes, the path MTU is %d", op, n, mtu)
		}
	case wire.Last:
		if n == 0 || n > mtu {
			return nak(wire.NAKInvalidRequest, "%s with %d bytes", op, n)
		}
	case wire.Only:
		if n > mtu {
			return nak(wire.NAKInvalidRequest, "%s with %d bytes, the path MTU is %d", op, n, mtu)
		}
	}
	// A receive WQE for SEND and WRITE_WITH_IMM: without one, RNR NAK and nothing else.
	if info.Is(wire.FlagNeedsRecv) && r.recv == nil {
		w := qp.recvQueue().peek()
		if w == nil {
			d.stats.RNRNAKsSent++
			r.waitingRecv = true
			// The packets behind this one are already on their way; they are dropped without
			// a sequence NAK, which would cost the requester a retry for nothing (rxe sends
			// one, and a long RNR wait can then exhaust retry_cnt).
			r.nakSent = true
			syn := wire.Syndrome(0x20 | qp.attr.MinRNRTimer&0x1f)
			d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Msg: fmt.Sprintf("%s and no receive posted: RNR NAK (timer %d)", op, qp.attr.MinRNRTimer)})
			qp.sendAck(syn, psn)
			return nil
		}
		// Taken off the queue now, not when the message ends: another QP on the same SRQ
		// must not get the same receive (rxe's get_srq_wqe does the same).
		r.held.id, r.held.length = w.id, w.length
		r.held.sgl = append(r.held.sgl[:0], w.sgl...)
		qp.recvQueue().pop()
		if qp.srq != nil {
			qp.srq.tookReceive()
		}
		r.recv = &r.held
		r.placed = 0
	}

	switch {
	case isSend:
		return qp.execSend(f, psn, op, info)
	case isWrite:
		return qp.execWrite(f, psn, op, info)
	case info.Is(wire.FlagRead):
		return qp.execRead(f, psn)
	case info.Is(wire.FlagAtomicWrite):
		return qp.execAtomicWrite(f, psn)
	case info.Is(wire.FlagFlush):
		return qp.execFlush(f, psn)
	default:
		return qp.execAtomic(f, psn)
	}
}

// takeResource gives the request at psn the next responder resource, for its duplicates.
func (qp *QP) takeResource(res rdResource) {
	r := &qp.resp
	r.res[r.resIdx] = res
	r.resIdx = (r.resIdx + 1) % len(r.res)
}

// execAtomicWrite stores an ATOMIC_WRITE's 8 bytes as one aligned write and acknowledges it
// (rxe: check_rkey with REMOTE_WRITE, NAK 0x62 on failure; a misaligned address is
// RESPST_ERR_MISALIGNED_ATOMIC, NAK 0x61; the reply is an ACK). Memory receives the payload's
// bytes as they are.
func (qp *QP) execAtomicWrite(f *wire.Frame, psn uint32) *respError {
	r := &qp.resp
	va, rkey, n := f.RETH.VA(), f.RETH.RKey(), f.RETH.DMALen()
	if n != 8 {
		return nak(wire.NAKInvalidRequest, "ATOMIC_WRITE with RETH length %d", n)
	}
	sp, err := qp.remoteAccess(rkey, va, 8, AccessRemoteWrite)
	if err != nil {
		return accessNAK(err)
	}
	if va%8 != 0 {
		return nak(wire.NAKInvalidRequest, "ATOMIC_WRITE at 0x%x is not 8-byte aligned", va)
	}
	sp.CopyFrom(f.Payload)
	qp.takeResource(rdResource{used: true, atomicWrite: true, first: psn, last: psn, va: va, rkey: rkey, length: 8})
	r.msn = psnAdd(r.msn, 1)
	qp.advance(psn, 1)
	qp.sendAck(wire.ACKUnlimited, psn)
	return nil
}

// flushRights is the MR access a FLUSH of placement type t needs (rxe's check_rkey).
func flushRights(t uint8) Access {
	var a Access
	if t&uint8(FlushGlobal) != 0 {
		a |= AccessFlushGlobal
	}
	if t&uint8(FlushPersistent) != 0 {
		a |= AccessFlushPersistent
	}
	return a
}

// regionStart is the first wire address of the MR or window rkey names, or va when it names
// none (the access check then says why).
func (qp *QP) regionStart(rkey uint32, va uint64) uint64 {
	k := keys.Key(rkey)
	if k.IsMW() {
		if w, err := qp.dev.keys.QueryMW(k); err == nil {
			if w.Access&AccessZeroBased != 0 {
				return 0
			}
			return w.Addr
		}
		return va
	}
	if m, err := qp.dev.keys.QueryMR(k); err == nil {
		return m.IOVA
	}
	return va
}

// execFlush checks a FLUSH and answers it with an empty RDMA READ RESPONSE ONLY (IBTA 1.5;
// rxe's process_flush ends in its READ reply). Requests are executed in PSN order and memory
// is always visible here, so every placement before the FLUSH is already where it asks for:
// executing it is checking it. The range must be in the rkey's region with FLUSH rights for the
// placement type (NAK 0x62 otherwise); at the MR level only the key and rights are checked.
func (qp *QP) execFlush(f *wire.Frame, psn uint32) *respError {
	r := &qp.resp
	level, typ := f.FETH.SelectivityLevel(), f.FETH.PlacementType()
	if typ == 0 || typ&^uint8(FlushGlobal|FlushPersistent) != 0 || level > uint8(FlushMR) {
		return nak(wire.NAKInvalidRequest, "FLUSH with placement type %d, selectivity level %d", typ, level)
	}
	va, rkey, n := f.RETH.VA(), f.RETH.RKey(), uint64(f.RETH.DMALen())
	need := flushRights(typ)
	if FlushLevel(level) == FlushMR {
		// The whole region: the key, PD, state and rights are checked, the range is not (rxe
		// skips it at this level).
		if _, err := qp.remoteAccess(rkey, qp.regionStart(rkey, va), 1, need); err != nil {
			return accessNAK(err)
		}
	} else if n > 0 {
		if _, err := qp.remoteAccess(rkey, va, n, need); err != nil {
			return accessNAK(err)
		}
	}
	res := &r.res[r.resIdx]
	qp.takeResource(rdResource{used: true, flush: true, first: psn, last: psn, va: va, rkey: rkey})
	r.msn = psnAdd(r.msn, 1)
	qp.advance(psn, 1)
	return qp.sendReadResponses(res, psn)
}

func (qp *QP) execSend(f *wire.Frame, psn uint32, op wire.Opcode, info *wire.OpcodeInfo) *respError {
	r := &qp.resp
	w := r.recv
	n := uint64(len(f.Payload))
	if r.placed+n > w.length {
		// The message is longer than the receive buffer: LOC_LEN_ERR for the receiver (IBTA;
		// rxe says REM_INV_REQ_ERR), NAK 0x61 for the requester.
		return &respError{syn: wire.NAKInvalidRequest, status: WCLocLenErr,
			err: fmt.Errorf("SEND of at least %d bytes into a receive of %d", r.placed+n, w.length)}
	}
	src := f.Payload
	if err := qp.walkSGL(w.sgl, r.placed, n, AccessLocalWrite, func(sp keys.Span) {
		c := sp.CopyFrom(src)
		src = src[c:]
	}); err != nil {
		// The receive WQE names memory it may not write: NAK 0x63, REM_OP_ERR for the
		// requester; the receiver's completion says LOC_PROT_ERR.
		return &respError{syn: wire.NAKRemoteOp, status: WCLocProtErr, err: fmt.Errorf("receive buffer: %w", err)}
	}
	r.placed += n
	r.inSend = !info.Is(wire.FlagEnd)
	qp.advance(psn, 1)
	if r.inSend {
		qp.ackIfAsked(f, psn)
		return nil
	}
	wc := WC{WRID: w.id, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(r.placed), SrcQP: qp.attr.DestQPN}
	switch {
	case info.Is(wire.FlagImm):
		wc.Flags, wc.Imm = WCWithImm, f.ImmDt.Imm()
	case info.Is(wire.FlagInv):
		rkey := f.IETH.RKey()
		err := qp.dev.keys.Invalidate(keys.Invalidate{Key: keys.Key(rkey), QP: keys.QPN(qp.qpn), Remote: true, At: qp.dev.clock.Now()})
		if err != nil {
			// rxe ACKs and fails only the receive; softirdma also NAKs (W18).
			return &respError{syn: wire.NAKInvalidRequest, status: WCRemInvReqErr, err: err}
		}
		if qp.dev.tracing() {
			qp.dev.event(Event{QP: qp.qpn, Kind: EvKey, Key: rkey, PSN: psn,
				Msg: fmt.Sprintf("SEND_WITH_INV psn %d invalidated %s", psn, keys.Key(rkey))})
		}
		wc.Flags, wc.Imm = WCWithInv, rkey
	}
	qp.finishRecv(wc, f.BTH.SE())
	r.msn = psnAdd(r.msn, 1)
	qp.ackIfAsked(f, psn)
	return nil
}

// finishRecv completes the receive WQE in use; solicited is the Solicited Event bit of the
// message's last packet, which fires a CQ armed for solicited completions.
func (qp *QP) finishRecv(wc WC, solicited bool) {
	r := &qp.resp
	r.recv = nil
	r.placed = 0
	cq := qp.recvCQ
	cq.solicited = solicited
	qp.complete(cq, wc)
	cq.solicited = false
}

func (qp *QP) execWrite(f *wire.Frame, psn uint32, op wire.Opcode, info *wire.OpcodeInfo) *respError {
	r := &qp.resp
	n := uint64(len(f.Payload))
	if info.Is(wire.FlagStart) {
		r.va, r.rkey, r.left, r.writeLen = f.RETH.VA(), f.RETH.RKey(), uint64(f.RETH.DMALen()), uint64(f.RETH.DMALen())
		if r.left > 1<<31 {
			return nak(wire.NAKInvalidRequest, "RDMA WRITE of %d bytes", r.left)
		}
		// The whole range is checked before any byte lands; a zero-length WRITE checks nothing (K7).
		if r.left > 0 {
			if _, err := qp.remoteAccess(r.rkey, r.va, r.left, AccessRemoteWrite); err != nil {
				return accessNAK(err)
			}
		}
	}
	last := info.Is(wire.FlagEnd)
	if n > r.left || (last && n != r.left) {
		return nak(wire.NAKInvalidRequest, "%s carries %d bytes, %d remain of the RETH length %d", op, n, r.left, r.writeLen)
	}
	if n > 0 {
		// Looked up again per packet: an rkey invalidated mid-message stops the rest.
		sp, err := qp.remoteAccess(r.rkey, r.va, n, AccessRemoteWrite)
		if err != nil {
			return accessNAK(err)
		}
		sp.CopyFrom(f.Payload)
	}
	r.va += n
	r.left -= n
	r.inWrite = !last
	qp.advance(psn, 1)
	if last {
		r.msn = psnAdd(r.msn, 1)
		if info.Is(wire.FlagCompletes) {
			qp.finishRecv(WC{WRID: r.recv.id, Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(r.writeLen),
				Imm: f.ImmDt.Imm(), Flags: WCWithImm, SrcQP: qp.attr.DestQPN}, f.BTH.SE())
		}
	}
	qp.ackIfAsked(f, psn)
	return nil
}

func accessNAK(err error) *respError {
	return &respError{syn: wire.NAKRemoteAccess, status: WCRemAccessErr, err: err}
}

func (qp *QP) execRead(f *wire.Frame, psn uint32) *respError {
	r := &qp.resp
	va, rkey, n := f.RETH.VA(), f.RETH.RKey(), uint64(f.RETH.DMALen())
	if n > 1<<31 {
		return nak(wire.NAKInvalidRequest, "RDMA READ of %d bytes", n)
	}
	if n > 0 {
		if _, err := qp.remoteAccess(rkey, va, n, AccessRemoteRead); err != nil {
			return accessNAK(err)
		}
	}
	mtu := uint64(qp.attr.PathMTU.Bytes())
	npkts := uint32(1)
	if n > mtu {
		npkts = uint32((n + mtu - 1) / mtu)
	}
	if npkts >= 1<<23-maxUnackedPSNs {
		return nak(wire.NAKInvalidRequest, "RDMA READ of %d bytes needs %d responses at MTU %d", n, npkts, mtu)
	}
	res := &r.res[r.resIdx]
	r.resIdx = (r.resIdx + 1) % len(r.res)
	*res = rdResource{used: true, first: psn, last: psnAdd(psn, npkts-1), va: va, rkey: rkey, length: n}
	r.msn = psnAdd(r.msn, 1) // a READ counts as done when accepted (C9-148)
	qp.advance(psn, npkts)
	return qp.sendReadResponses(res, psn)
}

// sendReadResponses sends the responses of a READ from the one with PSN from on. Each packet's
// bytes are looked up again: an rkey invalidated or deallocated meanwhile ends the READ with NAK
// 0x62 (rxe_recheck_mr).
func (qp *QP) sendReadResponses(res *rdResource, from uint32) *respError {
	mtu := uint64(qp.attr.PathMTU.Bytes())
	r := &qp.resp
	start := uint64(psnCmp(from, res.first)) * mtu
	total := res.length - start
	npkts := uint32(1)
	if total > mtu {
		npkts = uint32((total + mtu - 1) / mtu)
	}
	for i := uint32(0); i < npkts; i++ {
		off := start + uint64(i)*mtu
		n := min(mtu, res.length-off)
		h := wire.Header{DestQP: qp.attr.DestQPN, PSN: psnAdd(from, i), Syndrome: wire.ACKUnlimited, MSN: r.msn,
			Opcode: readResponseOpcodes[classOf(i == 0, i == npkts-1)]}
		var sp keys.Span
		if n > 0 {
			var err error
			if sp, err = qp.remoteAccess(res.rkey, res.va+off, n, AccessRemoteRead); err != nil {
				e := accessNAK(err)
				e.err = fmt.Errorf("READ response psn %d: %w", h.PSN, err)
				qp.respFail(nil, h.PSN, e)
				return nil
			}
		}
		frame, slot, err := qp.builder.Begin(qp.dev.txBuffer(), &h, int(n))
		if err != nil {
			return nak(wire.NAKRemoteOp, "building a READ response: %v", err)
		}
		sp.CopyTo(slot)
		qp.builder.Seal(frame)
		qp.transmit(frame, h.Opcode, h.PSN)
	}
	return nil
}

func (qp *QP) execAtomic(f *wire.Frame, psn uint32) *respError {
	r := &qp.resp
	a := f.AtomicETH
	va := a.VA()
	if va%8 != 0 {
		return nak(wire.NAKInvalidRequest, "atomic at 0x%x is not 8-byte aligned", va)
	}
	sp, err := qp.remoteAccess(a.RKey(), va, 8, AccessRemoteAtomic)
	if err != nil {
		return accessNAK(err)
	}
	var b [8]byte
	sp.CopyTo(b[:])
	orig := binary.LittleEndian.Uint64(b[:])
	val := orig
	if f.Opcode == wire.RCFetchAdd {
		val = orig + a.SwapAdd()
	} else if orig == a.Compare() {
		val = a.SwapAdd()
	}
	binary.LittleEndian.PutUint64(b[:], val)
	sp.CopyFrom(b[:])
	res := &r.res[r.resIdx]
	r.resIdx = (r.resIdx + 1) % len(r.res)
	*res = rdResource{used: true, atomic: true, first: psn, last: psn, va: va, rkey: a.RKey(), length: 8, orig: orig}
	r.msn = psnAdd(r.msn, 1)
	qp.advance(psn, 1)
	qp.sendAtomicAck(psn, orig)
	return nil
}

func (qp *QP) sendAtomicAck(psn uint32, orig uint64) {
	h := wire.Header{Opcode: wire.RCAtomicAcknowledge, DestQP: qp.attr.DestQPN, PSN: psn, Syndrome: wire.ACKUnlimited,
		MSN: qp.resp.msn, Orig: orig}
	frame, err := qp.builder.Build(qp.dev.txBuffer(), &h, nil)
	if err == nil {
		qp.transmit(frame, h.Opcode, psn)
	}
}

func (qp *QP) advance(psn, n uint32) { qp.resp.psn = psnAdd(psn, n) }

func (qp *QP) ackIfAsked(f *wire.Frame, psn uint32) {
	if f.BTH.AckReq() {
		qp.sendAck(wire.ACKUnlimited, psn)
	}
}

// sendAck sends an ACKNOWLEDGE with the syndrome and PSN and the current MSN.
func (qp *QP) sendAck(syn wire.Syndrome, psn uint32) {
	h := wire.Header{Opcode: wire.RCAcknowledge, DestQP: qp.attr.DestQPN, PSN: psn, Syndrome: syn, MSN: qp.resp.msn}
	frame, err := qp.builder.Build(qp.dev.txBuffer(), &h, nil)
	if err == nil {
		qp.transmit(frame, h.Opcode, psn)
	}
}

// onDuplicate answers a request whose PSN is behind the expected one: SEND and WRITE are
// acknowledged again, a READ is executed again from the PSN asked for, an atomic gets its saved
// result; nothing runs twice that must not.
func (qp *QP) onDuplicate(f *wire.Frame, psn uint32) {
	r := &qp.resp
	d := qp.dev
	switch {
	case f.Info.Is(wire.FlagRead):
		for i := range r.res {
			res := &r.res[i]
			if !res.used || res.atomic || res.flush || res.atomicWrite || psnCmp(psn, res.first) < 0 || psnCmp(psn, res.last) > 0 {
				continue
			}
			mtu := uint64(qp.attr.PathMTU.Bytes())
			off := uint64(psnCmp(psn, res.first)) * mtu
			if f.RETH.RKey() != res.rkey || f.RETH.VA() != res.va+off || uint64(f.RETH.DMALen()) != res.length-off {
				break
			}
			d.event(Event{QP: qp.qpn, Kind: EvRecv, PSN: psn, Msg: fmt.Sprintf("duplicate READ psn %d: responding again", psn)})
			if e := qp.sendReadResponses(res, psn); e != nil {
				qp.respFail(f, psn, e)
			}
			return
		}
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("duplicate READ psn %d matches no saved READ: dropped", psn)})
	case f.Info.Is(wire.FlagAtomic):
		for i := range r.res {
			res := &r.res[i]
			if res.used && res.atomic && res.first == psn {
				d.event(Event{QP: qp.qpn, Kind: EvRecv, PSN: psn, Msg: fmt.Sprintf("duplicate atomic psn %d: saved result replayed", psn)})
				qp.sendAtomicAck(psn, res.orig)
				return
			}
		}
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("duplicate atomic psn %d matches no saved result: dropped", psn)})
	case f.Info.Is(wire.FlagAtomicWrite | wire.FlagFlush):
		// Replayed from the saved resource, as rxe does: an ATOMIC_WRITE is acknowledged again
		// and not stored again (a later write to the same word must not be undone), a FLUSH
		// gets its READ response again. Without a resource it is dropped (class D).
		flush := f.Info.Is(wire.FlagFlush)
		for i := range r.res {
			res := &r.res[i]
			if res.used && res.first == psn && res.flush == flush && res.atomicWrite == !flush {
				d.event(Event{QP: qp.qpn, Kind: EvRecv, PSN: psn, Msg: fmt.Sprintf("duplicate %s psn %d: replayed", f.Opcode, psn)})
				if flush {
					_ = qp.sendReadResponses(res, psn)
				} else {
					qp.sendAck(wire.ACKUnlimited, psn)
				}
				return
			}
		}
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("duplicate %s psn %d matches no saved resource: dropped", f.Opcode, psn)})
	default:
		if f.BTH.AckReq() {
			qp.sendAck(wire.ACKUnlimited, psnAdd(r.psn, psnMask))
		}
	}
}

// respFail NAKs a failed request and moves the QP to ERR; a receive WQE in use completes with
// the error. f is nil when the failure came while sending READ responses.
func (qp *QP) respFail(f *wire.Frame, psn uint32, e *respError) {
	d := qp.dev
	r := &qp.resp
	status := e.status
	var ae *keys.AccessError
	if errors.As(e.err, &ae) {
		d.event(Event{QP: qp.qpn, Kind: EvAccess, PSN: psn, Key: uint32(ae.Key), Msg: fmt.Sprintf("request psn %d refused", psn), Err: e.err})
	}
	d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Msg: fmt.Sprintf("sending %s for psn %d", e.syn, psn), Err: e.err})
	qp.sendAck(e.syn, psn)
	if r.recv != nil {
		if status == 0 {
			status = WCRemInvReqErr
		}
		w := r.recv
		qp.finishRecv(WC{WRID: w.id, Status: status, Opcode: WCRecv, Err: e.err}, false)
	}
	qp.fail(responderEvent(e.syn), fmt.Sprintf("responder refused psn %d", psn))
}
