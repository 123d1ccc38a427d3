package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/softirdma/softirdma/internal/names"
	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire/roce"
)

// responder is the receive side of an RC QP. A request goes through the responder's checks in
// the order IBTA's responder states them (9.7.5) and rxe's responder runs them (rxe_resp.c):
//
//	CHK_PSN       in order; behind is a duplicate, answered from what was saved; ahead is a
//	              gap, NAKed once (0x60) with the PSN expected
//	CHK_OP_SEQ    a message in progress goes on, none starts in the middle (0x61)
//	CHK_OP_VALID  an opcode an RC QP takes, allowed by the QP's access flags (0x61, not 0x62: K10)
//	CHK_RESOURCE  a receive WQE for SEND and WRITE_WITH_IMM (without one, an RNR NAK and
//	              nothing else); max_dest_rd_atomic for READ, atomics, FLUSH (0x61)
//	CHK_LENGTH    payload by place in the message, RETH lengths (0x61)
//	CHK_RKEY      the rkey over the range (the access error's NAK, 0x62); a WRITE's payload
//	              against what its RETH still expects (0x61)
//	EXECUTE       place, read or compute; what only this step can see fails here: the receive
//	              too short (0x61), its lkey (0x63), a misaligned atomic (0x61), an IETH (0x61)
//	COMPLETE      the receive completion of a SEND or WRITE_WITH_IMM
//	ACKNOWLEDGE   an ACK when asked, the atomic ACK, or the READ's responses; answers leave
//	              in request order, a long READ's responses a budget per scheduler step
//	              (answers.go), and everything after them waits its turn
//
// The first check a packet fails decides the NAK: a SEND too long for the path MTU that finds
// no receive posted is RNR NAKed, and refused only once a receive is there.
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

	answers answers // what is owed to the requester, in order
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
	// A run of answers may still be scheduled: it keeps its flag and finds nothing owed.
	*r = responder{psn: qp.attr.RQPSN, res: make([]rdResource, max(1, int(qp.attr.MaxDestRdAtomic))),
		answers: answers{scheduled: r.answers.scheduled, run: r.answers.run}}
}

func microseconds(us uint32) time.Duration { return time.Duration(us) * time.Microsecond }

// respError is a refused request: the NAK to send and what the receiving side records.
type respError struct {
	syn    roce.Syndrome
	status WCStatus // for the receive completion, when a receive WQE is involved
	err    error
}

func nak(syn roce.Syndrome, format string, args ...any) *respError {
	return &respError{syn: syn, err: fmt.Errorf(format, args...)}
}

// respState is a step of the responder (see responder).
type respState uint8

const (
	respCheckPSN respState = iota
	respCheckOpSeq
	respCheckOpValid
	respCheckResource
	respCheckLength
	respCheckRKey
	respExecute
	respComplete
	respAcknowledge
	respDuplicate // an earlier PSN
	respDone      // nothing more to do with this packet
)

var respStateNames = [...]string{"CHK_PSN", "CHK_OP_SEQ", "CHK_OP_VALID", "CHK_RESOURCE", "CHK_LENGTH",
	"CHK_RKEY", "EXECUTE", "COMPLETE", "ACKNOWLEDGE", "DUPLICATE", "DONE"}

func (s respState) String() string { return names.In(respStateNames[:], s, "state %d") }

// verdict is what a step decided: the step to go on to, or a refusal, which NAKs the request
// and moves the QP to ERR.
type verdict struct {
	next    respState
	refusal *respError
}

func proceed(next respState) verdict { return verdict{next: next} }

func refuse(e *respError) verdict { return verdict{next: respDone, refusal: e} }

// reply is how ACKNOWLEDGE answers an executed request.
type reply uint8

const (
	replyIfAsked reply = iota // SEND and WRITE packets: an ACK when AckReq asks for one
	replyACK                  // ATOMIC_WRITE: always an ACK
	replyAtomic               // compare-and-swap, fetch-add: the atomic ACK with the original value
	replyRead                 // READ, FLUSH: the READ responses of the resource saved
)

// request is the packet going through the steps and what they found out about it.
type request struct {
	f    *roce.Frame
	psn  uint32
	info *roce.OpcodeInfo

	target    pinned      // the 8 bytes an atomic or ATOMIC_WRITE acts on, or a one-packet WRITE's range (CHK_RKEY, released by EXECUTE)
	writeHeld bool        // target is a one-packet WRITE's range, checked and pinned by CHK_RKEY
	wc        WC          // the receive completion of a SEND or WRITE_WITH_IMM, when completes
	completes bool        // (EXECUTE, posted by COMPLETE)
	reply     reply       // (EXECUTE, sent by ACKNOWLEDGE)
	orig      uint64      // an atomic's original value
	res       *rdResource // a READ's or FLUSH's saved resource
	recvFound bool        // CHK_RESOURCE found the receive WQE this packet starts a message in
}

// takesRequests says whether the QP's state lets its responder take a request packet: RTR
// onward, not ERR. A packet it does not take is counted and dropped.
func (qp *QP) takesRequests(f *roce.Frame) bool {
	switch qp.state {
	case QPSRTR, QPSRTS, QPSSQD, QPSSQE:
		return true
	}
	qp.dev.stats.RxDropped.Add(1)
	qp.dev.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: f.BTH.PSN(), Msg: fmt.Sprintf("%s while %s", f.Opcode, qp.state)})
	return false
}

// onRequest takes a request packet through the responder's steps.
func (qp *QP) onRequest(f *roce.Frame) {
	if !qp.takesRequests(f) {
		return
	}
	q := request{f: f, psn: f.BTH.PSN(), info: f.Info}
	for st := respCheckPSN; st != respDone; {
		var v verdict
		switch st {
		case respCheckPSN:
			v = qp.checkPSN(&q)
		case respCheckOpSeq:
			v = qp.checkOpSeq(&q)
		case respCheckOpValid:
			v = qp.checkOpValid(&q)
		case respCheckResource:
			v = qp.checkResource(&q)
		case respCheckLength:
			v = qp.checkLength(&q)
		case respCheckRKey:
			v = qp.checkRKey(&q)
		case respExecute:
			v = qp.execute(&q)
		case respComplete:
			v = qp.completeRequest(&q)
		case respAcknowledge:
			v = qp.answer(&q)
		case respDuplicate:
			qp.onDuplicate(f, q.psn)
			v = proceed(respDone)
		default:
			panic(fmt.Sprintf("emu: responder step %s", st))
		}
		if v.refusal != nil {
			if !qp.faultNAK(&q, v.refusal.err) {
				qp.respFail(f, q.psn, v.refusal)
			}
			return
		}
		st = v.next
	}
}

// checkPSN: a request ahead of the one expected means packets were lost. The first of a gap
// gets a sequence NAK carrying the PSN expected; the rest are dropped until it comes.
func (qp *QP) checkPSN(q *request) verdict {
	d := qp.dev
	r := &qp.resp
	switch c := psnCmp(q.psn, r.psn); {
	case c > 0:
		d.stats.RxDropped.Add(1)
		if !r.nakSent {
			r.nakSent = true
			d.stats.SeqNAKsSent.Add(1)
			d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: q.psn, Msg: fmt.Sprintf("psn %d ahead of %d: NAK sequence error", q.psn, r.psn)})
			qp.sendAck(roce.NAKPSNSeqError, r.psn)
		}
		return proceed(respDone)
	case c < 0:
		d.stats.DuplicatesSeen.Add(1)
		return proceed(respDuplicate)
	}
	r.nakSent = false
	return proceed(respCheckOpSeq)
}

// checkOpSeq: a message in progress must go on; none may start in the middle.
func (qp *QP) checkOpSeq(q *request) verdict {
	r := &qp.resp
	op, info := q.f.Opcode, q.info
	isSend, isWrite := info.Is(roce.FlagSend), info.Is(roce.FlagWrite)
	continues := !info.Is(roce.FlagStart) // a MIDDLE or LAST
	switch {
	case r.inSend && !(isSend && continues):
		return refuse(nak(roce.NAKInvalidRequest, "%s in the middle of a SEND", op))
	case r.inWrite && !(isWrite && continues):
		return refuse(nak(roce.NAKInvalidRequest, "%s in the middle of an RDMA WRITE", op))
	case !r.inSend && !r.inWrite && continues && (isSend || isWrite):
		return refuse(nak(roce.NAKInvalidRequest, "%s without a FIRST", op))
	}
	return proceed(respCheckOpValid)
}

// checkOpValid: the opcode is one an RC QP executes, the QP's own access flags allow it (a
// missing right is 0x61, not 0x62: K10), and a FLUSH asks for a placement this responder knows.
func (qp *QP) checkOpValid(q *request) verdict {
	op, info := q.f.Opcode, q.info
	var need Access
	switch {
	case info.Is(roce.FlagWrite):
		need = AccessRemoteWrite
	case info.Is(roce.FlagRead):
		need = AccessRemoteRead
	case info.Is(roce.FlagAtomic):
		need = AccessRemoteAtomic
	case info.Is(roce.FlagAtomicWrite):
		need = AccessRemoteWrite // rxe's check_qp_attr_access treats it as a WRITE
	case info.Is(roce.FlagFlush):
		// The QP must grant the FLUSH_* right of each placement type asked for, as rxe's
		// check_qp_attr_access has it; the MR's rights are checked with the rkey.
		level, typ := q.f.FETH.SelectivityLevel(), q.f.FETH.PlacementType()
		if typ == 0 || typ&^uint8(FlushGlobal|FlushPersistent) != 0 || level > uint8(FlushMR) {
			return refuse(nak(roce.NAKInvalidRequest, "FLUSH with placement type %d, selectivity level %d", typ, level))
		}
		need = flushRights(typ)
	case info.Is(roce.FlagSend):
	default:
		return refuse(nak(roce.NAKInvalidRequest, "opcode %s is not supported on an RC QP", op))
	}
	if need != 0 && qp.attr.AccessFlags&need != need {
		return refuse(nak(roce.NAKInvalidRequest, "%s needs %s in the QP's access flags (%s)", op, need, qp.attr.AccessFlags))
	}
	return proceed(respCheckResource)
}

// checkResource: READ, atomics, ATOMIC_WRITE and FLUSH need responder resources
// (max_dest_rd_atomic; the requester keeps within them, the responder recycles the oldest).
// SEND and WRITE_WITH_IMM need a receive WQE; without one the packet gets an RNR NAK and nothing
// else, however else it is wrong: it has not been looked at, and comes again after the RNR timer.
func (qp *QP) checkResource(q *request) verdict {
	r := &qp.resp
	if q.info.Is(roce.FlagRead | roce.FlagAtomic | roce.FlagAtomicWrite | roce.FlagFlush) {
		if qp.attr.MaxDestRdAtomic == 0 {
			return refuse(nak(roce.NAKInvalidRequest, "%s with max_dest_rd_atomic 0", q.f.Opcode))
		}
		return proceed(respCheckLength)
	}
	if !q.info.Is(roce.FlagNeedsRecv) || r.recv != nil {
		return proceed(respCheckLength)
	}
	if _, ok := qp.recvReady(); !ok {
		return qp.noReceive(q)
	}
	q.recvFound = true
	return proceed(respCheckLength)
}

// noReceive answers a packet that needs a receive and finds none: on RC an RNR NAK and nothing
// else, on UC the loss of its message (UC has no RNR NAK).
func (qp *QP) noReceive(q *request) verdict {
	d := qp.dev
	r := &qp.resp
	if !qp.tr.acked {
		d.stats.RxNoRecv.Add(1)
		return refuse(nak(roce.NAKInvalidRequest, "%s and no receive posted", q.f.Opcode))
	}
	r.waitingRecv = true
	qp.rnrNAK(q, fmt.Sprintf("%s and no receive posted", q.f.Opcode))
	return proceed(respDone)
}

// rnrNAK answers q with an RNR NAK naming the QP's min_rnr_timer; why says what was not ready.
// The packets behind q are already on their way; they are dropped without a sequence NAK, which
// would cost the requester a retry for nothing (rxe sends one, and a long RNR wait can then
// exhaust retry_cnt). The NAK leaves behind the answers owed for earlier requests, as every
// answer does (sendAck).
func (qp *QP) rnrNAK(q *request, why string) {
	d := qp.dev
	d.stats.RNRNAKsSent.Add(1)
	qp.resp.nakSent = true
	d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: q.psn, Msg: fmt.Sprintf("%s: RNR NAK (timer %d)", why, qp.attr.MinRNRTimer)})
	qp.sendAck(roce.Syndrome(0x20|qp.attr.MinRNRTimer&0x1f), q.psn)
}

// recvReady says whether a receive waits for the next message, and its length.
func (qp *QP) recvReady() (length uint64, ok bool) {
	if s := qp.srq; s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.queue.next().size()
	}
	return qp.rq.next().size()
}

// takeRecv takes the receive WQE CHK_RESOURCE found off its queue, for the message it starts:
// now, not when the message ends, so another QP on the same SRQ cannot get it (rxe's
// get_srq_wqe does the same). It is taken once the packet's size is known good: a packet
// refused for its length leaves the receive on its queue, and the QP's flush completes it (a
// peer with a larger path MTU sees WR_FLUSH_ERR there); a refusal after this completes it with
// the error. It reports false if there is none after all: another QP of the SRQ took the last.
func (qp *QP) takeRecv() bool {
	if s := qp.srq; s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !qp.resp.hold(s.queue.next()) {
			return false
		}
		s.queue.pop()
		s.tookReceive()
		return true
	}
	if !qp.resp.hold(qp.rq.next()) {
		return false
	}
	qp.rq.pop()
	return true
}

// hold makes a copy of w the receive of the message starting; false for none.
func (r *responder) hold(w *recvWQE) bool {
	if w == nil {
		return false
	}
	r.held.id, r.held.length, r.held.err = w.id, w.length, w.err
	r.held.sgl = append(r.held.sgl[:0], w.sgl...)
	r.recv = &r.held
	r.placed = 0
	return true
}

// checkLength: a FIRST or MIDDLE carries exactly the path MTU, a LAST 1 to MTU bytes, an ONLY at
// most MTU; a RETH asks for at most 2 GiB, a READ for fewer responses than the PSN space can
// tell apart, an ATOMIC_WRITE for 8 bytes.
func (qp *QP) checkLength(q *request) verdict {
	op, info := q.f.Opcode, q.info
	mtu := qp.attr.PathMTU.Bytes()
	n := len(q.f.Payload)
	switch info.Class {
	case roce.First, roce.Middle:
		if info.Is(roce.FlagSend|roce.FlagWrite) && n != mtu {
			return refuse(nak(roce.NAKInvalidRequest, "%s with %d bytes, the path MTU is %d", op, n, mtu))
		}
	case roce.Last:
		if n == 0 || n > mtu {
			return refuse(nak(roce.NAKInvalidRequest, "%s with %d bytes", op, n))
		}
	case roce.Only:
		if n > mtu {
			return refuse(nak(roce.NAKInvalidRequest, "%s with %d bytes, the path MTU is %d", op, n, mtu))
		}
	}
	switch {
	case info.Is(roce.FlagWrite) && info.Is(roce.FlagStart):
		if l := uint64(q.f.RETH.DMALen()); l > 1<<31 {
			return refuse(nak(roce.NAKInvalidRequest, "RDMA WRITE of %d bytes", l))
		}
	case info.Is(roce.FlagRead):
		l := uint64(q.f.RETH.DMALen())
		if l > 1<<31 {
			return refuse(nak(roce.NAKInvalidRequest, "RDMA READ of %d bytes", l))
		}
		if npkts := qp.readPackets(l); npkts >= 1<<23-qp.dev.window {
			return refuse(nak(roce.NAKInvalidRequest, "RDMA READ of %d bytes needs %d responses at MTU %d", l, npkts, mtu))
		}
	case info.Is(roce.FlagAtomicWrite):
		if l := q.f.RETH.DMALen(); l != 8 {
			return refuse(nak(roce.NAKInvalidRequest, "ATOMIC_WRITE with RETH length %d", l))
		}
	}
	if q.recvFound {
		if !qp.takeRecv() {
			return qp.noReceive(q)
		}
		if err := qp.resp.recv.err; err != nil {
			// A receive the device could not read is no receive: the responder's own failure.
			return refuse(&respError{syn: roce.NAKRemoteOp, status: WCLocQPOpErr, err: fmt.Errorf("receive WQE: %w", err)})
		}
	}
	return proceed(respCheckRKey)
}

// readPackets is how many responses a READ of n bytes takes.
func (qp *QP) readPackets(n uint64) uint32 {
	mtu := uint64(qp.attr.PathMTU.Bytes())
	if n <= mtu {
		return 1
	}
	return uint32((n + mtu - 1) / mtu)
}

// checkRKey: the rkey must give the rights the operation needs over the whole range before any
// byte moves (a zero-length READ or WRITE checks nothing: K7). A WRITE packet must not carry
// more than its RETH still expects, and its LAST must carry exactly that.
func (qp *QP) checkRKey(q *request) verdict {
	r := &qp.resp
	f, info := q.f, q.info
	var err error
	switch {
	case info.Is(roce.FlagWrite):
		left, total := r.left, r.writeLen
		n := uint64(len(f.Payload))
		if info.Is(roce.FlagStart) {
			va, rkey := f.RETH.VA(), f.RETH.RKey()
			left, total = uint64(f.RETH.DMALen()), uint64(f.RETH.DMALen())
			switch {
			case left > 0 && info.Is(roce.FlagEnd) && n == left:
				// The message is this packet: the range checked is the one written, pinned
				// here for EXECUTE rather than looked up a second time.
				if q.target, err = qp.remoteAccess(rkey, va, left, AccessRemoteWrite); err != nil {
					return refuse(accessNAK(err))
				}
				q.writeHeld = true
			case left > 0:
				// Pages missing fault packet by packet, as the WRITE lands.
				if err := qp.remoteAllowed(rkey, va, left, AccessRemoteWrite); err != nil && pageFault(err) == nil {
					return refuse(accessNAK(err))
				}
			}
		}
		if n > left || (info.Is(roce.FlagEnd) && n != left) {
			return refuse(nak(roce.NAKInvalidRequest, "%s carries %d bytes, %d remain of the RETH length %d", f.Opcode, n, left, total))
		}
	case info.Is(roce.FlagRead):
		if n := uint64(f.RETH.DMALen()); n > 0 {
			err = qp.remoteAllowed(f.RETH.RKey(), f.RETH.VA(), n, AccessRemoteRead)
		}
	case info.Is(roce.FlagAtomic):
		q.target, err = qp.remoteAccess(f.AtomicETH.RKey(), f.AtomicETH.VA(), 8, AccessRemoteAtomic)
	case info.Is(roce.FlagAtomicWrite):
		// rxe: check_rkey with REMOTE_WRITE.
		q.target, err = qp.remoteAccess(f.RETH.RKey(), f.RETH.VA(), 8, AccessRemoteWrite)
	case info.Is(roce.FlagFlush):
		// The range must be in the rkey's region with FLUSH rights for the placement type. At
		// the MR level the key, PD, state and rights are checked, the range is not (rxe skips
		// it at that level).
		va, rkey, n := f.RETH.VA(), f.RETH.RKey(), uint64(f.RETH.DMALen())
		need := flushRights(f.FETH.PlacementType())
		if FlushLevel(f.FETH.SelectivityLevel()) == FlushMR {
			err = qp.remoteAllowed(rkey, qp.regionStart(rkey, va), 1, need)
		} else if n > 0 {
			err = qp.remoteAllowed(rkey, va, n, need)
		}
		if pageFault(err) != nil {
			err = nil // a page not mapped holds nothing to flush
		}
	}
	if err != nil {
		return refuse(accessNAK(err))
	}
	return proceed(respExecute)
}

// execute carries out a request that passed every check.
func (qp *QP) execute(q *request) verdict {
	defer q.target.release()
	switch info := q.info; {
	case info.Is(roce.FlagSend):
		return qp.execSend(q)
	case info.Is(roce.FlagWrite):
		return qp.execWrite(q)
	case info.Is(roce.FlagRead):
		return qp.execRead(q)
	case info.Is(roce.FlagAtomicWrite):
		return qp.execAtomicWrite(q)
	case info.Is(roce.FlagFlush):
		return qp.execFlush(q)
	default:
		return qp.execAtomic(q)
	}
}

// completeRequest posts the receive completion execute made, if it made one. The Solicited
// Event bit of the message's last packet fires a CQ armed for solicited completions.
func (qp *QP) completeRequest(q *request) verdict {
	if q.completes {
		qp.finishRecv(q.wc, q.f.BTH.SE())
	}
	return proceed(respAcknowledge)
}

// answer is ACKNOWLEDGE: it answers an executed request.
func (qp *QP) answer(q *request) verdict {
	switch q.reply {
	case replyIfAsked:
		switch {
		case !q.f.BTH.AckReq():
		case q.completes:
			qp.sendAck(roce.ACKUnlimited, q.psn)
		default:
			qp.sendAckLater(q.psn)
		}
	case replyACK:
		qp.sendAck(roce.ACKUnlimited, q.psn)
	case replyAtomic:
		qp.sendAtomicAck(q.psn, q.orig)
	case replyRead:
		qp.sendReadResponses(q.res, q.psn)
	}
	return proceed(respDone)
}

// takeResource saves a READ, atomic, FLUSH or ATOMIC_WRITE in the next responder resource, for
// its duplicates, recycling the oldest.
func (qp *QP) takeResource(res rdResource) *rdResource {
	r := &qp.resp
	slot := &r.res[r.resIdx]
	*slot = res
	r.resIdx = (r.resIdx + 1) % len(r.res)
	return slot
}

// execAtomicWrite stores an ATOMIC_WRITE's 8 bytes as one aligned write (a misaligned address
// is rxe's RESPST_ERR_MISALIGNED_ATOMIC, NAK 0x61) and acknowledges it. Memory receives the
// payload's bytes as they are.
func (qp *QP) execAtomicWrite(q *request) verdict {
	r := &qp.resp
	va := q.f.RETH.VA()
	if va%8 != 0 {
		return refuse(nak(roce.NAKInvalidRequest, "ATOMIC_WRITE at 0x%x is not 8-byte aligned", va))
	}
	d := qp.dev
	d.atomics.Lock()
	moved := q.target.CopyFrom(q.f.Payload)
	d.atomics.Unlock()
	q.target.release()
	if err := copied(q.target.Span, moved, keys.OpRemote); err != nil {
		return refuse(accessNAK(err))
	}
	qp.takeResource(rdResource{used: true, atomicWrite: true, first: q.psn, last: q.psn, va: va, rkey: q.f.RETH.RKey(), length: 8})
	r.msn = psnAdd(r.msn, 1)
	qp.advance(q.psn, 1)
	q.reply = replyACK
	return proceed(respComplete)
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
	d := qp.dev
	d.tab.Lock()
	defer d.tab.Unlock()
	k := keys.Key(rkey)
	if k.IsMW() {
		if w, err := d.keys.QueryMW(k); err == nil {
			if w.Access&AccessZeroBased != 0 {
				return 0
			}
			return w.Addr
		}
		return va
	}
	if m, err := d.keys.QueryMR(k); err == nil {
		return m.IOVA
	}
	return va
}

// execFlush answers a FLUSH with an empty RDMA READ RESPONSE ONLY (IBTA 1.5; rxe's process_flush
// ends in its READ reply). Requests are executed in PSN order and memory is always visible here,
// so every placement before the FLUSH is already where it asks for: executing it is checking it.
func (qp *QP) execFlush(q *request) verdict {
	r := &qp.resp
	q.res = qp.takeResource(rdResource{used: true, flush: true, first: q.psn, last: q.psn, va: q.f.RETH.VA(), rkey: q.f.RETH.RKey()})
	r.msn = psnAdd(r.msn, 1)
	qp.advance(q.psn, 1)
	q.reply = replyRead
	return proceed(respComplete)
}

func (qp *QP) execSend(q *request) verdict {
	r := &qp.resp
	f, info := q.f, q.info
	w := r.recv
	n := uint64(len(f.Payload))
	if r.placed+n > w.length {
		// The message is longer than the receive buffer: LOC_LEN_ERR for the receiver (IBTA;
		// rxe says REM_INV_REQ_ERR), NAK 0x61 for the requester.
		return refuse(&respError{syn: roce.NAKInvalidRequest, status: WCLocLenErr,
			err: fmt.Errorf("SEND of at least %d bytes into a receive of %d", r.placed+n, w.length)})
	}
	if err := qp.scatterSGL(w.sgl, r.placed, f.Payload); err != nil {
		// The receive WQE names memory it may not write: NAK 0x63, REM_OP_ERR for the
		// requester; the receiver's completion says LOC_PROT_ERR.
		return refuse(accessNAK(fmt.Errorf("receive buffer: %w", err)))
	}
	r.placed += n
	r.inSend = !info.Is(roce.FlagEnd)
	qp.advance(q.psn, 1)
	if r.inSend {
		return proceed(respComplete)
	}
	wc := WC{WRID: w.id, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(r.placed), SrcQP: qp.attr.DestQPN}
	switch {
	case info.Is(roce.FlagImm):
		wc.Flags, wc.Imm = WCWithImm, f.ImmDt.Imm()
	case info.Is(roce.FlagInv):
		rkey := f.IETH.RKey()
		d := qp.dev
		d.tab.Lock()
		reached := d.keyMRLocked(keys.Key(rkey))
		err := d.keys.Invalidate(keys.Invalidate{Key: keys.Key(rkey), QP: keys.QPN(qp.qpn), Remote: true, At: d.clock.Now()})
		d.tab.Unlock()
		if err == nil {
			qp.drainMR(reached)
		}
		if err != nil {
			// rxe ACKs and fails only the receive; softirdma also NAKs (W18): 0x61 and
			// REM_INV_REQ_ERR, as the error says.
			return refuse(accessNAK(err))
		}
		if qp.dev.tracing() {
			qp.dev.event(Event{QP: qp.qpn, Kind: EvKey, Key: rkey, PSN: q.psn,
				Msg: fmt.Sprintf("SEND_WITH_INV psn %d invalidated %s", q.psn, keys.Key(rkey))})
		}
		wc.Flags, wc.Imm = WCWithInv, rkey
	}
	q.wc, q.completes = wc, true
	r.msn = psnAdd(r.msn, 1)
	return proceed(respComplete)
}

// finishRecv completes the receive WQE in use; solicited is the Solicited Event bit of the
// message's last packet, which fires a CQ armed for solicited completions.
func (qp *QP) finishRecv(wc WC, solicited bool) {
	r := &qp.resp
	r.recv = nil
	r.placed = 0
	qp.completeSolicited(qp.recvCQ, wc, solicited)
}

func (qp *QP) execWrite(q *request) verdict {
	r := &qp.resp
	f, info := q.f, q.info
	n := uint64(len(f.Payload))
	if info.Is(roce.FlagStart) {
		r.va, r.rkey, r.left, r.writeLen = f.RETH.VA(), f.RETH.RKey(), uint64(f.RETH.DMALen()), uint64(f.RETH.DMALen())
	}
	if n > 0 {
		p := &q.target
		if !q.writeHeld {
			// Looked up again per packet: an rkey invalidated mid-message stops the rest.
			held, err := qp.remoteAccess(r.rkey, r.va, n, AccessRemoteWrite)
			if err != nil {
				return refuse(accessNAK(err))
			}
			p = &held
		}
		moved := p.CopyFrom(f.Payload)
		p.release()
		if err := copied(p.Span, moved, keys.OpRemote); err != nil {
			return refuse(accessNAK(err))
		}
	}
	last := info.Is(roce.FlagEnd)
	r.va += n
	r.left -= n
	r.inWrite = !last
	qp.advance(q.psn, 1)
	if last {
		r.msn = psnAdd(r.msn, 1)
		if info.Is(roce.FlagCompletes) {
			q.wc = WC{WRID: r.recv.id, Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(r.writeLen),
				Imm: f.ImmDt.Imm(), Flags: WCWithImm, SrcQP: qp.attr.DestQPN}
			q.completes = true
		}
	}
	return proceed(respComplete)
}

// accessNAK is the refusal for a failed key check, with the NAK and status the access error
// carries (an rkey: 0x62 and REM_ACCESS_ERR; an IETH: 0x61 and REM_INV_REQ_ERR). A failure
// the error reports only locally (a receive WQE's lkey) is the responder's own, which the
// requester hears as NAK 0x63, remote operational error.
func accessNAK(err error) *respError {
	e := &respError{syn: roce.NAKRemoteOp, status: WCLocProtErr, err: err}
	if ae, ok := errors.AsType[*keys.AccessError](err); ok {
		e.status = WCStatus(ae.Status)
		if ae.Syndrome != keys.SyndromeNone {
			e.syn = roce.Syndrome(ae.Syndrome)
		}
	}
	return e
}

// accessStatus is the completion status of a failed local access: the access error's own, or
// LOC_PROT_ERR for a scatter/gather list that does not cover the bytes.
func accessStatus(err error) WCStatus {
	if ae, ok := errors.AsType[*keys.AccessError](err); ok {
		return WCStatus(ae.Status)
	}
	return WCLocProtErr
}

// execRead accepts a READ: it counts as done when accepted (C9-148), and ACKNOWLEDGE sends its
// responses.
func (qp *QP) execRead(q *request) verdict {
	r := &qp.resp
	va, rkey, n := q.f.RETH.VA(), q.f.RETH.RKey(), uint64(q.f.RETH.DMALen())
	npkts := qp.readPackets(n)
	q.res = qp.takeResource(rdResource{used: true, first: q.psn, last: psnAdd(q.psn, npkts-1), va: va, rkey: rkey, length: n})
	r.msn = psnAdd(r.msn, 1)
	qp.advance(q.psn, npkts)
	q.reply = replyRead
	return proceed(respComplete)
}

// execAtomic runs a compare-and-swap or fetch-add on the 8 bytes CHK_RKEY found. A misaligned
// target is refused here, after the rkey, as rxe's atomic reply does (NAK 0x61: K12).
func (qp *QP) execAtomic(q *request) verdict {
	r := &qp.resp
	a := q.f.AtomicETH
	va := a.VA()
	if va%8 != 0 {
		return refuse(nak(roce.NAKInvalidRequest, "atomic at 0x%x is not 8-byte aligned", va))
	}
	orig, err := qp.dev.atomic(&q.target, q.f.Opcode == roce.RCFetchAdd, a.Compare(), a.SwapAdd())
	if err != nil {
		return refuse(accessNAK(err))
	}
	qp.takeResource(rdResource{used: true, atomic: true, first: q.psn, last: q.psn, va: va, rkey: a.RKey(), length: 8, orig: orig})
	r.msn = psnAdd(r.msn, 1)
	qp.advance(q.psn, 1)
	q.reply, q.orig = replyAtomic, orig
	return proceed(respComplete)
}

func (qp *QP) advance(psn, n uint32) { qp.resp.psn = psnAdd(psn, n) }

// onDuplicate answers a request whose PSN is behind the expected one: SEND and WRITE are
// acknowledged again, a READ is executed again from the PSN asked for, an atomic gets its saved
// result; nothing runs twice that must not.
func (qp *QP) onDuplicate(f *roce.Frame, psn uint32) {
	r := &qp.resp
	d := qp.dev
	switch {
	case f.Info.Is(roce.FlagRead):
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
			qp.sendReadResponses(res, psn)
			return
		}
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("duplicate READ psn %d matches no saved READ: dropped", psn)})
	case f.Info.Is(roce.FlagAtomic):
		for i := range r.res {
			res := &r.res[i]
			if res.used && res.atomic && res.first == psn {
				d.event(Event{QP: qp.qpn, Kind: EvRecv, PSN: psn, Msg: fmt.Sprintf("duplicate atomic psn %d: saved result replayed", psn)})
				qp.sendAtomicAck(psn, res.orig)
				return
			}
		}
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("duplicate atomic psn %d matches no saved result: dropped", psn)})
	case f.Info.Is(roce.FlagAtomicWrite | roce.FlagFlush):
		// Replayed from the saved resource, as rxe does: an ATOMIC_WRITE is acknowledged again
		// and not stored again (a later write to the same word must not be undone), a FLUSH
		// gets its READ response again. Without a resource it is dropped (class D).
		flush := f.Info.Is(roce.FlagFlush)
		for i := range r.res {
			res := &r.res[i]
			if res.used && res.first == psn && res.flush == flush && res.atomicWrite == !flush {
				d.event(Event{QP: qp.qpn, Kind: EvRecv, PSN: psn, Msg: fmt.Sprintf("duplicate %s psn %d: replayed", f.Opcode, psn)})
				if flush {
					qp.sendReadResponses(res, psn)
				} else {
					qp.sendAck(roce.ACKUnlimited, psn)
				}
				return
			}
		}
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("duplicate %s psn %d matches no saved resource: dropped", f.Opcode, psn)})
	default:
		if f.BTH.AckReq() {
			qp.sendAck(roce.ACKUnlimited, psnAdd(r.psn, psnMask))
		}
	}
}

// respFail NAKs a failed request and moves the QP to ERR; a receive WQE in use completes with
// the error. f is nil when the failure came while sending READ responses.
func (qp *QP) respFail(f *roce.Frame, psn uint32, e *respError) {
	d := qp.dev
	r := &qp.resp
	// The answers owed for earlier requests leave first, all of them now: the NAK must not
	// overtake them, and nothing is sent after it. If one of them fails, its NAK ends the QP.
	if qp.sendOwed(); qp.state == QPSErr {
		return
	}
	status := e.status
	var ae *keys.AccessError
	if errors.As(e.err, &ae) {
		d.event(Event{QP: qp.qpn, Kind: EvAccess, PSN: psn, Key: uint32(ae.Key), Msg: fmt.Sprintf("request psn %d refused", psn), Err: e.err})
	}
	d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Msg: fmt.Sprintf("sending %s for psn %d", e.syn, psn), Err: e.err})
	qp.sendAck(e.syn, psn)
	// A receive in use belongs to the refused request, unless the failure came from the READ
	// responses of an earlier one: that receive is flushed with the QP.
	if r.recv != nil && f != nil {
		if status == 0 {
			status = WCRemInvReqErr
		}
		w := r.recv
		qp.finishRecv(WC{WRID: w.id, Status: status, Opcode: WCRecv, Err: e.err}, false)
	}
	qp.fail(responderEvent(e.syn), fmt.Sprintf("responder refused psn %d with %s: %v", psn, e.syn, e.err))
}
