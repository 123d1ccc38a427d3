package hw

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
)

// qp is a QP (RC, UC, UD or GSI) whose send and receive queues are rings in guest memory in
// rxe's layout.
//
// Locks: posting serialises doorbells, so WQEs reach the engine in ring order; sqMu guards the
// send queue's consumer index, which the engine's retire callback moves; rqMu the receive
// queue's, which the engine's receive source moves with the engine locked. None is held while
// calling into the engine except rqMu inside the engine's own call.
type qp struct {
	f    *Function
	emu  *engine.QP
	slot uint32
	pdn  uint32
	ud   bool // UD or GSI: its SENDs are addressed by an AH number or an rxe_av in the WQE
	sq   *ring
	rq   *ring // nil with an SRQ

	maxSendSGE, maxRecvSGE, maxInline int
	wrSlots                           uint32 // counted against the function's cap

	posting sync.Mutex
	sqNext  uint32 // the next send WQE to read (ring index)
	sqWQE   []byte // what a send WQE of this QP can hold, read from the ring under posting

	sqMu   sync.Mutex
	sqCons uint32
	sqGone bool // the ring's memory went: the consumer index is not written

	rqMu   sync.Mutex
	rqCons uint32
	rqGone bool   // the ring's memory went: nothing is fetched
	rqWQE  []byte // what a receive WQE of this QP can hold, read under rqMu

	gone bool // destroyed or its rings revoked: posting stops
}

// qpTypes are the QP types CREATE_QP takes, by their ABI numbers.
var qpTypes = map[uint8]engine.QPType{abi.QPTypeRC: engine.QPTypeRC, abi.QPTypeUC: engine.QPTypeUC, abi.QPTypeUD: engine.QPTypeUD, abi.QPTypeGSI: engine.QPTypeGSI}

func (f *Function) createQPLocked(args []byte, result func(int, uint32)) error {
	le := binary.LittleEndian
	pdn := le.Uint32(args[abi.CreateQPPD:])
	p, err := f.pdLocked(pdn)
	if err != nil {
		return err
	}
	typ, ok := qpTypes[args[abi.CreateQPType]]
	if !ok {
		return errf(syscall.EOPNOTSUPP, "QP type %d (RC, UC, UD or GSI)", args[abi.CreateQPType])
	}
	if s := args[abi.CreateQPSigAll]; s > 1 {
		return errf(syscall.EINVAL, "sq_sig_all %d", s)
	}
	var shared *srq
	if n := le.Uint32(args[abi.CreateQPSRQ:]); n != 0 {
		if shared = f.srqs[n]; shared == nil {
			return errf(syscall.ENOENT, "SRQ %d", n)
		}
	}
	scq, rcq := f.cqs[le.Uint32(args[abi.CreateQPSendCQ:])], f.cqs[le.Uint32(args[abi.CreateQPRecvCQ:])]
	if scq == nil || rcq == nil {
		return errf(syscall.ENOENT, "CQ %d or %d", le.Uint32(args[abi.CreateQPSendCQ:]), le.Uint32(args[abi.CreateQPRecvCQ:]))
	}
	maxInline := int(le.Uint32(args[abi.CreateQPMaxInline:]))
	sendSGE, recvSGE := int(le.Uint16(args[abi.CreateQPSendSGE:])), int(le.Uint16(args[abi.CreateQPRecvSGE:]))
	lim := engine.DefaultLimits
	if sendSGE > lim.MaxSGE || recvSGE > lim.MaxSGE || maxInline > lim.MaxInline {
		return errf(syscall.EINVAL, "%d send SGEs, %d receive SGEs, %d bytes inline", sendSGE, recvSGE, maxInline)
	}
	sq, err := newRing(&f.mem, args[abi.CreateQPSQ:abi.CreateQPSQ+abi.QueueArgsSize],
		abi.SendWQESize+max(abi.SGESize*sendSGE, maxInline), ringLog(lim.MaxQPWR))
	if err != nil {
		return err
	}
	var rq *ring
	if shared == nil { // a QP on an SRQ has no receive queue of its own
		rq, err = newRing(&f.mem, args[abi.CreateQPRQ:abi.CreateQPRQ+abi.QueueArgsSize],
			abi.RecvWQESize+abi.SGESize*recvSGE, ringLog(lim.MaxQPWR))
		if err != nil {
			return err
		}
	}
	slot := -1
	for i, q := range f.qpSlots {
		if q == nil {
			slot = i
			break
		}
	}
	if slot < 0 {
		return errf(syscall.ENOMEM, "all %d QP slots in use", len(f.qpSlots))
	}
	slots := sq.count() - 1
	if rq != nil {
		slots += rq.count() - 1
	}
	if err := f.reserveWRsLocked(slots); err != nil {
		return err
	}
	init := engine.QPInitAttr{Type: typ, SendCQ: scq.emu, RecvCQ: rcq.emu, SigAll: args[abi.CreateQPSigAll] != 0,
		Cap: engine.QPCap{MaxSendWR: int(sq.count() - 1), MaxRecvWR: 1, MaxSendSGE: sendSGE, MaxRecvSGE: recvSGE, MaxInlineData: maxInline}}
	if rq != nil {
		init.Cap.MaxRecvWR = int(rq.count() - 1)
	} else {
		init.SRQ = shared.emu
	}
	eqp, err := p.pd.CreateQP(init)
	if err != nil {
		f.wrSlots -= uint64(slots)
		return err
	}
	q := &qp{f: f, emu: eqp, slot: uint32(slot), pdn: pdn, ud: typ == engine.QPTypeUD || typ == engine.QPTypeGSI, sq: sq, rq: rq, wrSlots: slots,
		maxSendSGE: sendSGE, maxRecvSGE: recvSGE, maxInline: maxInline,
		sqWQE: make([]byte, sendWQEBytes(sq, sendSGE, maxInline))}
	if rq != nil {
		q.rqWQE = make([]byte, recvWQEBytes(rq, recvSGE))
	}
	eqp.OnRetire(q.retired)
	if rq != nil {
		eqp.SetRecvSource(q.fetchRecv)
	}
	f.qpSlots[slot] = q
	f.qps[eqp.Num()] = q
	p.uses++
	result(abi.ResultNum, eqp.Num())
	result(abi.ResultSlot, uint32(slot))
	return nil
}

func (f *Function) destroyQPLocked(n uint32) error {
	q, ok := f.qps[n]
	if !ok {
		return errf(syscall.ENOENT, "QP %d", n)
	}
	if err := q.emu.Destroy(); err != nil {
		return err
	}
	// The driver frees the rings' pages once this completes: nothing may touch them after.
	q.markGone()
	delete(f.qps, n)
	f.qpSlots[q.slot] = nil
	f.pds[q.pdn].uses--
	f.wrSlots -= uint64(q.wrSlots)
	return nil
}

// markGone stops every access to the QP's rings, waiting for one in progress: posting, the
// send queue's consumer index, the receive queue's fetches.
func (q *qp) markGone() {
	q.posting.Lock()
	q.gone = true
	q.posting.Unlock()
	q.sqMu.Lock()
	q.sqGone = true
	q.sqMu.Unlock()
	q.rqMu.Lock()
	q.rqGone = true
	q.rqMu.Unlock()
}

// modifyQPLocked applies ibv_modify_qp's attributes (abi QPAttr) under its mask.
func (f *Function) modifyQPLocked(n, mask uint32, a []byte) error {
	q, ok := f.qps[n]
	if !ok {
		return errf(syscall.ENOENT, "QP %d", n)
	}
	if err := checkQPAttr(engine.AttrMask(mask), a); err != nil {
		return err
	}
	le := binary.LittleEndian
	attr := engine.QPAttr{
		State: engine.QPState(a[abi.QPAttrState]), CurState: engine.QPState(a[abi.QPAttrCurState]),
		PathMTU: engine.MTU(a[abi.QPAttrPathMTU]), Timeout: a[abi.QPAttrTimeout], RetryCnt: a[abi.QPAttrRetryCnt],
		RNRRetry: a[abi.QPAttrRNRRetry], MinRNRTimer: a[abi.QPAttrMinRNRTimer], MaxRdAtomic: a[abi.QPAttrMaxRdAtomic],
		MaxDestRdAtomic: a[abi.QPAttrMaxDestRdAtom], Port: a[abi.QPAttrPortNum],
		EnSQDAsyncNotify: a[abi.QPAttrSQDrainNotify] != 0, PKeyIndex: le.Uint16(a[abi.QPAttrPKeyIndex:]),
		AccessFlags: engine.Access(le.Uint32(a[abi.QPAttrAccessFlags:])), DestQPN: le.Uint32(a[abi.QPAttrDestQPN:]),
		RQPSN: le.Uint32(a[abi.QPAttrRQPSN:]), SQPSN: le.Uint32(a[abi.QPAttrSQPSN:]), QKey: le.Uint32(a[abi.QPAttrQKey:]),
		AH: engine.AHAttr{DGID: netip.AddrFrom16([16]byte(a[abi.QPAttrDGID:])).Unmap(), HopLimit: a[abi.QPAttrHopLimit],
			TrafficClass: a[abi.QPAttrTrafficClass], FlowLabel: le.Uint32(a[abi.QPAttrFlowLabel:])},
	}
	if err := q.emu.Modify(attr, engine.AttrMask(mask)); err != nil {
		return err
	}
	if engine.AttrMask(mask)&engine.AttrState != 0 && attr.State == engine.QPSReset {
		// Back to RESET the queues start over empty, as a new QP's: the indices in the rings'
		// headers too, as rxe's kernel zeroes them (the provider reads them from there).
		q.posting.Lock()
		q.sqNext = 0
		q.posting.Unlock()
		q.sqMu.Lock()
		q.sqCons = 0
		if !q.sqGone {
			_ = q.sq.writeU32(abi.QHProducer, 0)
			_ = q.sq.writeU32(abi.QHConsumer, 0)
		}
		q.sqMu.Unlock()
		q.rqMu.Lock()
		q.rqCons = 0
		if q.rq != nil && !q.rqGone {
			_ = q.rq.writeU32(abi.QHProducer, 0)
			_ = q.rq.writeU32(abi.QHConsumer, 0)
		}
		q.rqMu.Unlock()
	}
	return nil
}

// checkQPAttr refuses what the engine's verbs leave to the caller, which a guest may write
// anyway: a port other than the function's one, a P_Key index past its one-entry table, a GID
// index past the GID table, a flow label wider than 20 bits, a flag that is neither 0 nor 1.
func checkQPAttr(mask engine.AttrMask, a []byte) error {
	le := binary.LittleEndian
	switch {
	case mask&engine.AttrPort != 0 && a[abi.QPAttrPortNum] != 1:
		return errf(syscall.EINVAL, "port %d (the function has port 1)", a[abi.QPAttrPortNum])
	case mask&engine.AttrPKeyIndex != 0 && le.Uint16(a[abi.QPAttrPKeyIndex:]) != 0:
		return errf(syscall.EINVAL, "P_Key index %d (the table has one entry)", le.Uint16(a[abi.QPAttrPKeyIndex:]))
	case mask&engine.AttrAV != 0 && a[abi.QPAttrSGIDIndex] >= abi.GIDTableLen:
		return errf(syscall.EINVAL, "GID index %d of %d", a[abi.QPAttrSGIDIndex], abi.GIDTableLen)
	case mask&engine.AttrAV != 0 && le.Uint32(a[abi.QPAttrFlowLabel:]) > 0xfffff:
		return errf(syscall.EINVAL, "flow label 0x%x is wider than 20 bits", le.Uint32(a[abi.QPAttrFlowLabel:]))
	case mask&engine.AttrEnSQDAsyncNotify != 0 && a[abi.QPAttrSQDrainNotify] > 1:
		return errf(syscall.EINVAL, "en_sqd_async_notify %d", a[abi.QPAttrSQDrainNotify])
	}
	return nil
}

// queryQPLocked writes the QP's attributes (abi QPAttr) into a.
func (f *Function) queryQPLocked(n uint32, a []byte) error {
	q, ok := f.qps[n]
	if !ok {
		return errf(syscall.ENOENT, "QP %d", n)
	}
	attr := q.emu.Query()
	le := binary.LittleEndian
	clear(a[:abi.QPAttrSize])
	a[abi.QPAttrState], a[abi.QPAttrCurState] = byte(attr.State), byte(attr.State)
	a[abi.QPAttrPathMTU], a[abi.QPAttrTimeout], a[abi.QPAttrRetryCnt] = byte(attr.PathMTU), attr.Timeout, attr.RetryCnt
	a[abi.QPAttrRNRRetry], a[abi.QPAttrMinRNRTimer] = attr.RNRRetry, attr.MinRNRTimer
	a[abi.QPAttrMaxRdAtomic], a[abi.QPAttrMaxDestRdAtom] = attr.MaxRdAtomic, attr.MaxDestRdAtomic
	a[abi.QPAttrHopLimit], a[abi.QPAttrTrafficClass], a[abi.QPAttrPortNum] = attr.AH.HopLimit, attr.AH.TrafficClass, attr.Port
	le.PutUint16(a[abi.QPAttrPKeyIndex:], attr.PKeyIndex)
	le.PutUint32(a[abi.QPAttrAccessFlags:], uint32(attr.AccessFlags))
	le.PutUint32(a[abi.QPAttrDestQPN:], attr.DestQPN)
	le.PutUint32(a[abi.QPAttrRQPSN:], attr.RQPSN)
	le.PutUint32(a[abi.QPAttrSQPSN:], attr.SQPSN)
	le.PutUint32(a[abi.QPAttrFlowLabel:], attr.AH.FlowLabel)
	if attr.AH.DGID.IsValid() {
		g := attr.AH.DGID.As16()
		copy(a[abi.QPAttrDGID:], g[:])
	}
	le.PutUint32(a[abi.QPAttrMaxSendWR:], q.sq.count()-1)
	if q.rq != nil {
		le.PutUint32(a[abi.QPAttrMaxRecvWR:], q.rq.count()-1)
	}
	le.PutUint16(a[abi.QPAttrMaxSendSGE:], uint16(q.maxSendSGE))
	le.PutUint16(a[abi.QPAttrMaxRecvSGE:], uint16(q.maxRecvSGE))
	le.PutUint32(a[abi.QPAttrMaxInline:], uint32(q.maxInline))
	le.PutUint32(a[abi.QPAttrQKey:], attr.QKey)
	return nil
}

// retired moves the send queue's consumer index past n retired WQEs: only now may the driver
// reuse their slots. It runs with the engine locked, before the WQEs' CQEs are written, so a
// driver that sees a completion finds its slot free.
func (q *qp) retired(n int) {
	q.sqMu.Lock()
	defer q.sqMu.Unlock()
	q.sqCons = (q.sqCons + uint32(n)) & q.sq.mask()
	if !q.sqGone {
		_ = q.sq.writeU32(abi.QHConsumer, q.sqCons)
	}
}

// fetchRecv hands the engine up to max receives the driver has posted since the last fetch,
// advancing the receive queue's consumer index past them (the device has its copy). It runs
// with the engine locked. A WQE naming more SGEs than the QP takes becomes a receive through
// an invalid lkey, which fails the message that uses it with an error completion.
func (q *qp) fetchRecv(limit int) []engine.RecvWR {
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.rqGone {
		return nil
	}
	prod, err := q.rq.readU32(abi.QHProducer)
	if err != nil {
		return nil
	}
	prod &= q.rq.mask()
	var out []engine.RecvWR
	for q.rqCons != prod && len(out) < limit {
		if q.rq.access(q.rq.elemOff(q.rqCons), q.rqWQE, false) != nil {
			break
		}
		wr := decodeRecv(q.rqWQE, q.maxRecvSGE)
		out = append(out, wr)
		q.rqCons = (q.rqCons + 1) & q.rq.mask()
	}
	_ = q.rq.writeU32(abi.QHConsumer, q.rqCons)
	return out
}

// ring takes a send-queue doorbell: every WQE the driver wrote since the last one goes to the
// engine, in ring order. A WQE the engine cannot take as it is (a bad opcode, too many SGEs,
// unknown objects) is posted as a failing request, so it completes with an error in its place.
func (q *qp) ring() {
	q.posting.Lock()
	defer q.posting.Unlock()
	if q.gone {
		return
	}
	prod, err := q.sq.readU32(abi.QHProducer)
	if err != nil {
		return
	}
	prod &= q.sq.mask()
	defer q.flushPostedRecvs()
	elem := q.sqWQE
	for q.sqNext != prod {
		if q.sq.access(q.sq.elemOff(q.sqNext), elem, false) != nil {
			return
		}
		if err := q.post(elem); err != nil {
			var pe *engine.PostError
			if errors.As(err, &pe) && pe.Err == syscall.ENOMEM {
				return // the engine's queue is full: the next doorbell or retirement goes on
			}
			le := binary.LittleEndian
			raw := le.Uint32(elem[abi.SendOpcode:])
			if l := q.f.cfg.Log; l != nil {
				l.Info("send WQE refused", "qpn", q.emu.Num(), "wr_id", le.Uint64(elem[abi.SendWRID:]),
					"opcode", raw, "err", err)
			}
			if q.emu.PostSendError(engine.PostedError{ID: le.Uint64(elem[abi.SendWRID:]), Opcode: errOpcode(raw),
				Status: engine.WCLocQPOpErr, Err: err}) != nil {
				return
			}
		}
		q.sqNext = (q.sqNext + 1) & q.sq.mask()
	}
}

// flushPostedRecvs completes flushed the receives posted to a QP in ERR since it got there, as
// verbs say (the kernel's ib_drain_rq waits for one): the receive queue has no doorbell, so a
// driver posting to a QP in ERR rings the send queue's. posting is held.
func (q *qp) flushPostedRecvs() {
	if q.rq == nil || q.gone || q.emu.State() != engine.QPSErr {
		return
	}
	for {
		wrs := q.fetchRecv(int(q.rq.count()))
		if len(wrs) == 0 || q.emu.PostRecv(wrs...) != nil {
			return
		}
	}
}

// sendWQEBytes is how much of a send WQE slot the device reads: the WQE and as many SGEs or
// inline bytes as the QP takes (and an ATOMIC_WRITE's 8 bytes), never more than the slot. A
// guest's large slots cost it ring memory, not the device buffers.
func sendWQEBytes(r *ring, sges, inline int) int {
	return min(1<<r.logElem, abi.SendSGEs+max(abi.SGESize*sges, inline, 8))
}

// recvWQEBytes is sendWQEBytes for a receive WQE.
func recvWQEBytes(r *ring, sges int) int {
	return min(1<<r.logElem, abi.RecvSGEs+abi.SGESize*sges)
}

// errOpcode is the opcode a refused WQE's error completion reports: the guest's own if it is a
// byte, else one that is no opcode (its completion is an error, whose opcode verbs leave
// undefined), never the low byte of a larger number.
func errOpcode(raw uint32) engine.WROpcode {
	if raw > 0xff {
		return 0xff
	}
	return engine.WROpcode(raw)
}

// post turns one rxe_send_wqe into the engine's work request. The opcode is the guest's u32:
// checked whole before it becomes the engine's byte.
func (q *qp) post(e []byte) error {
	le := binary.LittleEndian
	raw := le.Uint32(e[abi.SendOpcode:])
	if raw > 0xff {
		return fmt.Errorf("send WQE opcode %d is not supported: %w", raw, syscall.EOPNOTSUPP)
	}
	wr := engine.SendWR{ID: le.Uint64(e[abi.SendWRID:]), Opcode: engine.WROpcode(raw),
		Flags: engine.SendFlags(le.Uint32(e[abi.SendFlags:]))}
	switch wr.Opcode {
	case engine.WRRDMAWriteWithImm, engine.WRSendWithImm:
		wr.Imm = binary.BigEndian.Uint32(e[abi.SendImm:]) // imm_data is in network order
	case engine.WRSendWithInv, engine.WRLocalInv:
		wr.Imm = le.Uint32(e[abi.SendImm:])
	}
	switch wr.Opcode {
	case engine.WRRDMAWrite, engine.WRRDMAWriteWithImm, engine.WRRDMARead:
		wr.RemoteAddr, wr.RKey = le.Uint64(e[abi.SendRemote:]), le.Uint32(e[abi.SendRKey:])
	case engine.WRAtomicCmpAndSwp, engine.WRAtomicFetchAndAdd:
		wr.RemoteAddr, wr.RKey = le.Uint64(e[abi.SendRemote:]), le.Uint32(e[abi.SendAtomRKey:])
		wr.CompareAdd, wr.Swap = le.Uint64(e[abi.SendCompare:]), le.Uint64(e[abi.SendSwap:])
	case engine.WRSend, engine.WRSendWithImm, engine.WRSendWithInv, engine.WRLocalInv:
		if q.ud && wr.Opcode != engine.WRLocalInv {
			if err := q.address(e, &wr); err != nil {
				return err
			}
		}
	case engine.WRFlush:
		wr.RemoteAddr, wr.RKey = le.Uint64(e[abi.SendRemote:]), le.Uint32(e[abi.SendFlushRKey:])
		wr.Flush = engine.FlushInfo{Type: engine.FlushType(e[abi.SendFlushType]), Level: engine.FlushLevel(e[abi.SendFlushLvl]),
			Length: cmp.Or(le.Uint32(e[abi.SendDMALength:]), le.Uint32(e[abi.SendFlushLen:]))}
		return q.emu.PostSend(wr)
	case engine.WRAtomicWrite:
		// The 8 bytes travel in the WQE (dma.atomic_wr), as rxe's provider puts them.
		if len(e) < abi.SendAtomicWr+8 {
			return fmt.Errorf("an ATOMIC_WRITE in a %d-byte WQE slot: %w", len(e), syscall.EINVAL)
		}
		wr.RemoteAddr, wr.RKey = le.Uint64(e[abi.SendRemote:]), le.Uint32(e[abi.SendRKey:])
		wr.Flags |= engine.SendInline
		wr.InlineData = append([]byte{}, e[abi.SendAtomicWr:abi.SendAtomicWr+8]...)
		return q.emu.PostSend(wr)
	case engine.WRBindMW:
		return q.bind(e, &wr)
	case engine.WRRegMR:
		return q.regMR(e, &wr)
	default:
		return fmt.Errorf("send WQE opcode %d is not supported: %w", wr.Opcode, syscall.EOPNOTSUPP)
	}
	if wr.Flags&engine.SendInline != 0 {
		n := int(le.Uint32(e[abi.SendDMALength:]))
		if n > q.maxInline || abi.SendSGEs+n > len(e) {
			return fmt.Errorf("%d bytes inline, the QP takes %d: %w", n, q.maxInline, syscall.EINVAL)
		}
		wr.InlineData = append([]byte{}, e[abi.SendSGEs:abi.SendSGEs+n]...)
	} else if wr.Opcode != engine.WRLocalInv {
		n := int(le.Uint32(e[abi.SendDMANumSGE:]))
		if n > q.maxSendSGE || abi.SendSGEs+n*abi.SGESize > len(e) {
			return fmt.Errorf("%d SGEs, the QP takes %d: %w", n, q.maxSendSGE, syscall.EINVAL)
		}
		for i := range n {
			s := e[abi.SendSGEs+i*abi.SGESize:]
			wr.SGL = append(wr.SGL, engine.SGE{Addr: le.Uint64(s[abi.SGEAddr:]), Length: le.Uint32(s[abi.SGELength:]), LKey: le.Uint32(s[abi.SGELKey:])})
		}
	}
	return q.emu.PostSend(wr)
}

// bind posts a BIND_MW WQE: a type 2 window by the work request, a type 1 by the bind verb (the
// provider's ibv_bind_mw posts one with rkey = ibv_inc_rkey(old), which is the verb's rule).
func (q *qp) bind(e []byte, wr *engine.SendWR) error {
	le := binary.LittleEndian
	mwKey, mrKey := le.Uint32(e[abi.SendMWRKey:]), le.Uint32(e[abi.SendMWMRLKey:])
	q.f.keysMu.Lock()
	w, okW := q.f.mws[mwKey>>8]
	m, okM := q.f.mrs[mrKey>>8]
	q.f.keysMu.Unlock()
	if !okW {
		return fmt.Errorf("BIND_MW of unknown window 0x%x: %w", mwKey, syscall.EINVAL)
	}
	var mr *engine.MR
	if okM {
		mr = m.mr
	}
	addr, length, access := le.Uint64(e[abi.SendMWAddr:]), le.Uint64(e[abi.SendMWLength:]), engine.Access(le.Uint32(e[abi.SendMWAccess:]))
	if w.mw.Type() == engine.MWType1 {
		return q.emu.BindMW(w.mw, engine.MWBind{ID: wr.ID, Flags: wr.Flags, MR: mr, Addr: addr, Length: length, Access: access})
	}
	wr.Bind = engine.BindInfo{MW: w.mw, RKey: le.Uint32(e[abi.SendMWNewRKey:]), MR: mr, Addr: addr, Length: length, Access: access}
	return q.emu.PostSend(*wr)
}

// regMR posts the kernel-only REG_MR WQE (abi.WROpRegMR): the fast-register MR named by the
// new key's index takes the pages the WQE's page list names in guest memory.
func (q *qp) regMR(e []byte, wr *engine.SendWR) error {
	le := binary.LittleEndian
	key := le.Uint32(e[abi.RegWRKey:])
	q.f.keysMu.Lock()
	m, ok := q.f.mrs[key>>8]
	q.f.keysMu.Unlock()
	if !ok {
		return fmt.Errorf("REG_MR of unknown MR 0x%x: %w", key, syscall.EINVAL)
	}
	// The MR's own most pages bound the list, not the device's. The list's fields are checked
	// now; its pages are read when the work request runs, as a NIC reads a fast-register page
	// list, so a send queue full of REG_MRs holds no lists, only their 16-byte descriptors.
	pl := decodePageList(e[abi.RegWRPages:])
	if _, err := checkPageList(pl, m.pages); err != nil {
		return err
	}
	offset, length := le.Uint64(e[abi.RegWROffset:]), le.Uint64(e[abi.RegWRLength:])
	mem := &q.f.mem
	read := func() (engine.PageList, error) {
		pageSize, pages, err := resolvePages(mem, pl, m.pages)
		return engine.PageList{PageSize: pageSize, Offset: offset, Length: length, Pages: pages}, err
	}
	wr.Reg = engine.RegInfo{MR: m.mr, Key: key, IOVA: le.Uint64(e[abi.RegWRIOVA:]), Access: engine.Access(le.Uint32(e[abi.RegWRAccess:])),
		Guest: &engine.GuestPages{Space: mem, Read: read}}
	return q.emu.PostSend(*wr)
}
