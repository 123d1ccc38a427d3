package hw

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/wqe"
)

// qp is a QP (RC, UC, UD or GSI) whose send and receive queues are rings in guest memory in
// rxe's layout.
//
// Locks: posting serialises doorbells, so WQEs reach the engine in ring order; sqMu guards the
// send queue's consumer index, which the engine's retire callback moves; rqMu the receive
// queue's, which the engine's receive source moves with the engine locked. posting is held
// across a doorbell's calls into the engine (its posts, then the requester's run over them),
// and no engine callback takes it; sqMu and rqMu are taken only inside the engine's own calls.
type qp struct {
	f    *Function
	emu  *engine.QP
	slot uint32
	pdn  uint32
	ud   bool // UD or GSI: its SENDs are addressed by an AH number or an rxe_av in the WQE
	scq  *cq  // where its sends complete
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

// qpRequest is what CREATE_QP asks for, checked against the function's objects and limits.
type qpRequest struct {
	p                           *pdEntry
	pdn                         uint32
	typ                         engine.QPType
	sigAll                      bool
	shared                      *srq // nil: the QP has its own receive queue
	scq, rcq                    *cq
	sendSGE, recvSGE, maxInline int
}

func (f *Function) createQPLocked(args abi.CreateQPArgs, result func(int, uint32)) error {
	req, err := f.checkCreateQPLocked(args)
	if err != nil {
		return err
	}
	sq, rq, err := f.qpRings(args, req)
	if err != nil {
		return err
	}
	slot := freeSlot(f.qpSlots[:])
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
	eqp, err := req.p.pd.CreateQP(req.initAttr(sq, rq))
	if err != nil {
		f.wrSlots -= uint64(slots)
		return err
	}
	q := &qp{f: f, emu: eqp, slot: uint32(slot), pdn: req.pdn, ud: req.typ == engine.QPTypeUD || req.typ == engine.QPTypeGSI, scq: req.scq,
		sq: sq, rq: rq, wrSlots: slots, maxSendSGE: req.sendSGE, maxRecvSGE: req.recvSGE, maxInline: req.maxInline,
		sqWQE: make([]byte, sendWQEBytes(sq, req.sendSGE, req.maxInline))}
	eqp.OnRetire(q.retired)
	if rq != nil {
		q.rqWQE = make([]byte, recvWQEBytes(rq, req.recvSGE))
		eqp.SetRecvSource(q.fetchRecv)
	}
	f.qpSlots[slot] = q
	f.qps[eqp.Num()] = q
	req.p.uses++
	result(abi.ResultNum, eqp.Num())
	result(abi.ResultSlot, uint32(slot))
	return nil
}

// checkCreateQPLocked checks CREATE_QP's numbers, in the order their errors take precedence:
// the PD, the type, sq_sig_all, the SRQ, the CQs, then the SGE and inline sizes.
func (f *Function) checkCreateQPLocked(a abi.CreateQPArgs) (qpRequest, error) {
	req := qpRequest{pdn: a.PD()}
	var err error
	if req.p, err = f.pdLocked(req.pdn); err != nil {
		return req, err
	}
	var ok bool
	if req.typ, ok = qpTypes[a.Type()]; !ok {
		return req, errf(syscall.EOPNOTSUPP, "QP type %d (RC, UC, UD or GSI)", a.Type())
	}
	if s := a.SigAll(); s > 1 {
		return req, errf(syscall.EINVAL, "sq_sig_all %d", s)
	}
	req.sigAll = a.SigAll() != 0
	if n := a.SRQ(); n != 0 {
		if req.shared = f.srqs[n]; req.shared == nil {
			return req, errf(syscall.ENOENT, "SRQ %d", n)
		}
	}
	req.scq, req.rcq = f.cqs[a.SendCQ()], f.cqs[a.RecvCQ()]
	if req.scq == nil || req.rcq == nil {
		return req, errf(syscall.ENOENT, "CQ %d or %d", a.SendCQ(), a.RecvCQ())
	}
	req.maxInline, req.sendSGE, req.recvSGE = int(a.MaxInline()), int(a.SendSGE()), int(a.RecvSGE())
	lim := engine.DefaultLimits
	if req.sendSGE > lim.MaxSGE || req.recvSGE > lim.MaxSGE || req.maxInline > lim.MaxInline {
		return req, errf(syscall.EINVAL, "%d send SGEs, %d receive SGEs, %d bytes inline", req.sendSGE, req.recvSGE, req.maxInline)
	}
	return req, nil
}

// qpRings resolves the QP's send queue and, without an SRQ, its receive queue.
func (f *Function) qpRings(a abi.CreateQPArgs, req qpRequest) (sq, rq *ring, err error) {
	maxLog := ringLog(engine.DefaultLimits.MaxQPWR)
	sq, err = newRing(&f.mem, a.SQ(), abi.SendWQESize+max(abi.SGESize*req.sendSGE, req.maxInline), maxLog)
	if err != nil || req.shared != nil { // a QP on an SRQ has no receive queue of its own
		return sq, nil, err
	}
	rq, err = newRing(&f.mem, a.RQ(), abi.RecvWQESize+abi.SGESize*req.recvSGE, maxLog)
	return sq, rq, err
}

// initAttr is the engine's QP for the request on rings sq and rq (nil with an SRQ).
func (req *qpRequest) initAttr(sq, rq *ring) engine.QPInitAttr {
	init := engine.QPInitAttr{Type: req.typ, SendCQ: req.scq.emu, RecvCQ: req.rcq.emu, SigAll: req.sigAll,
		Cap: engine.QPCap{MaxSendWR: int(sq.count() - 1), MaxRecvWR: 1, MaxSendSGE: req.sendSGE, MaxRecvSGE: req.recvSGE, MaxInlineData: req.maxInline}}
	if rq != nil {
		init.Cap.MaxRecvWR = int(rq.count() - 1)
	} else {
		init.SRQ = req.shared.emu
	}
	return init
}

// freeSlot is the first free slot of a doorbell or arm table, or -1 if all are taken.
func freeSlot[T any](slots []*T) int {
	for i, s := range slots {
		if s == nil {
			return i
		}
	}
	return -1
}

func (f *Function) destroyQPLocked(n uint32) error {
	return destroyFound(f.qps, n, "QP", func(q *qp) error {
		q.emu.SendPostedDatagrams() // their doorbell came before this command
		return q.emu.Destroy()
	}, func(q *qp) {
		// The driver frees the rings' pages once this completes: nothing may touch them after.
		q.markGone()
		f.qpSlots[q.slot] = nil
		f.pds[q.pdn].uses--
		f.wrSlots -= uint64(q.wrSlots)
	})
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

// modifyQPLocked applies ibv_modify_qp's attributes under its mask.
func (f *Function) modifyQPLocked(n, mask uint32, a abi.QPAttr) error {
	q, err := find(f.qps, n, "QP")
	if err != nil {
		return err
	}
	if err := checkQPAttr(engine.AttrMask(mask), a); err != nil {
		return err
	}
	attr := decodeQPAttr(a)
	if err := q.emu.Modify(attr, engine.AttrMask(mask)); err != nil {
		return err
	}
	if engine.AttrMask(mask)&engine.AttrState != 0 && attr.State == engine.QPSReset {
		q.resetRings()
	}
	return nil
}

// decodeQPAttr reads the attributes a modify carries.
func decodeQPAttr(a abi.QPAttr) engine.QPAttr {
	return engine.QPAttr{
		State: engine.QPState(a.State()), CurState: engine.QPState(a.CurState()),
		PathMTU: engine.MTU(a.PathMTU()), Timeout: a.Timeout(), RetryCnt: a.RetryCnt(),
		RNRRetry: a.RNRRetry(), MinRNRTimer: a.MinRNRTimer(), MaxRdAtomic: a.MaxRdAtomic(),
		MaxDestRdAtomic: a.MaxDestRdAtomic(), Port: a.PortNum(),
		EnSQDAsyncNotify: a.SQDrainNotify() != 0, PKeyIndex: a.PKeyIndex(),
		AccessFlags: engine.Access(a.AccessFlags()), DestQPN: a.DestQPN(),
		RQPSN: a.RQPSN(), SQPSN: a.SQPSN(), QKey: a.QKey(),
		AH: engine.AHAttr{DGID: netip.AddrFrom16([16]byte(a.DGID())).Unmap(), HopLimit: a.HopLimit(),
			TrafficClass: a.TrafficClass(), FlowLabel: a.FlowLabel()},
	}
}

// resetRings starts the queues over empty, as a new QP's, when the QP goes back to RESET: the
// indices in the rings' headers too, as rxe's kernel zeroes them (the provider reads them from
// there).
func (q *qp) resetRings() {
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

// checkQPAttr refuses what the engine's verbs leave to the caller, which a guest may write
// anyway: a port other than the function's one, a P_Key index past its one-entry table, a GID
// index past the GID table, a flow label wider than 20 bits, a flag that is neither 0 nor 1.
func checkQPAttr(mask engine.AttrMask, a abi.QPAttr) error {
	switch {
	case mask&engine.AttrPort != 0 && a.PortNum() != 1:
		return errf(syscall.EINVAL, "port %d (the function has port 1)", a.PortNum())
	case mask&engine.AttrPKeyIndex != 0 && a.PKeyIndex() != 0:
		return errf(syscall.EINVAL, "P_Key index %d (the table has one entry)", a.PKeyIndex())
	case mask&engine.AttrAV != 0 && a.SGIDIndex() >= abi.GIDTableLen:
		return errf(syscall.EINVAL, "GID index %d of %d", a.SGIDIndex(), abi.GIDTableLen)
	case mask&engine.AttrAV != 0 && a.FlowLabel() > 0xfffff:
		return errf(syscall.EINVAL, "flow label 0x%x is wider than 20 bits", a.FlowLabel())
	case mask&engine.AttrEnSQDAsyncNotify != 0 && a.SQDrainNotify() > 1:
		return errf(syscall.EINVAL, "en_sqd_async_notify %d", a.SQDrainNotify())
	}
	return nil
}

// queryQPLocked writes the QP's attributes into a.
func (f *Function) queryQPLocked(n uint32, a abi.QPAttr) error {
	q, err := find(f.qps, n, "QP")
	if err != nil {
		return err
	}
	attr := q.emu.Query()
	clear(a)
	a.SetState(byte(attr.State))
	a.SetCurState(byte(attr.State))
	a.SetPathMTU(byte(attr.PathMTU))
	a.SetTimeout(attr.Timeout)
	a.SetRetryCnt(attr.RetryCnt)
	a.SetRNRRetry(attr.RNRRetry)
	a.SetMinRNRTimer(attr.MinRNRTimer)
	a.SetMaxRdAtomic(attr.MaxRdAtomic)
	a.SetMaxDestRdAtomic(attr.MaxDestRdAtomic)
	a.SetHopLimit(attr.AH.HopLimit)
	a.SetTrafficClass(attr.AH.TrafficClass)
	a.SetPortNum(attr.Port)
	a.SetPKeyIndex(attr.PKeyIndex)
	a.SetAccessFlags(uint32(attr.AccessFlags))
	a.SetDestQPN(attr.DestQPN)
	a.SetRQPSN(attr.RQPSN)
	a.SetSQPSN(attr.SQPSN)
	a.SetFlowLabel(attr.AH.FlowLabel)
	if attr.AH.DGID.IsValid() {
		g := attr.AH.DGID.As16()
		copy(a.DGID(), g[:])
	}
	a.SetMaxSendWR(q.sq.count() - 1)
	if q.rq != nil {
		a.SetMaxRecvWR(q.rq.count() - 1)
	}
	a.SetMaxSendSGE(uint16(q.maxSendSGE))
	a.SetMaxRecvSGE(uint16(q.maxRecvSGE))
	a.SetMaxInline(uint32(q.maxInline))
	a.SetQKey(attr.QKey)
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
		wr := wqe.Recv(q.rqWQE, q.maxRecvSGE)
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
	// With DoorbellRuns, what this doorbell posted runs here, on the goroutine that took it.
	posted := false
	defer func() {
		if posted && q.f.cfg.DoorbellRuns {
			q.emu.SendPosted()
		}
	}()
	defer q.flushPostedRecvs()
	elem := q.sqWQE
	for q.sqNext != prod {
		if q.sq.access(q.sq.elemOff(q.sqNext), elem, false) != nil {
			return
		}
		posted = true
		if err := q.post(elem); err != nil {
			var pe *engine.PostError
			if errors.As(err, &pe) && pe.Err == syscall.ENOMEM {
				return // the engine's queue is full: the next doorbell or retirement goes on
			}
			w := abi.SendWQE(elem)
			raw := w.Opcode()
			if l := q.f.cfg.Log; l != nil {
				l.Info("send WQE refused", "qpn", q.emu.Num(), "wr_id", w.WRID(), "opcode", raw, "err", err)
			}
			if q.emu.PostSendError(engine.PostedError{ID: w.WRID(), Opcode: wqe.ErrOpcode(raw),
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

// post turns one rxe_send_wqe into the engine's work request.
func (q *qp) post(e abi.SendWQE) error {
	wr, then, err := wqe.Decode(e)
	if err != nil {
		return err
	}
	switch then {
	case wqe.Bind:
		return q.bind(e, &wr)
	case wqe.RegMR:
		return q.regMR(e, &wr)
	case wqe.Address:
		if q.ud {
			if err := q.address(e, &wr); err != nil {
				return err
			}
		}
	}
	if then != wqe.Post {
		if err := wqe.ReadPayload(e, &wr, q.maxInline, q.maxSendSGE); err != nil {
			return err
		}
	}
	return q.postWR(wr)
}

// postWR posts wr to the engine: for the doorbell's own goroutine to run (Config.DoorbellRuns),
// or for the device's clock.
func (q *qp) postWR(wr engine.SendWR) error {
	if q.f.cfg.DoorbellRuns {
		return q.emu.PostSendHere(wr)
	}
	return q.emu.PostSend(wr)
}

// bind posts a BIND_MW WQE: a type 2 window by the work request, a type 1 by the bind verb (the
// provider's ibv_bind_mw posts one with rkey = ibv_inc_rkey(old), which is the verb's rule).
func (q *qp) bind(e abi.SendWQE, wr *engine.SendWR) error {
	mwKey, mrKey := e.MWRKey(), e.MWMRLKey()
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
	addr, length, access := e.MWAddr(), e.MWLength(), engine.Access(e.MWAccess())
	if w.mw.Type() == engine.MWType1 {
		return q.emu.BindMW(w.mw, engine.MWBind{ID: wr.ID, Flags: wr.Flags, MR: mr, Addr: addr, Length: length, Access: access})
	}
	wr.Bind = engine.BindInfo{MW: w.mw, RKey: e.MWNewRKey(), MR: mr, Addr: addr, Length: length, Access: access}
	return q.postWR(*wr)
}

// regMR posts the kernel-only REG_MR WQE (abi.WROpRegMR): the fast-register MR named by the
// new key's index takes the pages the WQE's page list names in guest memory.
func (q *qp) regMR(e abi.SendWQE, wr *engine.SendWR) error {
	key := e.RegKey()
	q.f.keysMu.Lock()
	m, ok := q.f.mrs[key>>8]
	q.f.keysMu.Unlock()
	if !ok {
		return fmt.Errorf("REG_MR of unknown MR 0x%x: %w", key, syscall.EINVAL)
	}
	// The MR's own most pages bound the list, not the device's. The list's fields are checked
	// now; its pages are read when the work request runs, as a NIC reads a fast-register page
	// list, so a send queue full of REG_MRs holds no lists, only their 16-byte descriptors.
	pl := decodePageList(e.RegPages())
	if _, err := checkPageList(pl, m.pages); err != nil {
		return err
	}
	offset, length := e.RegOffset(), e.RegLength()
	mem := &q.f.mem
	read := func() (engine.PageList, error) {
		pageSize, pages, err := resolvePages(mem, pl, m.pages)
		return engine.PageList{PageSize: pageSize, Offset: offset, Length: length, Pages: pages}, err
	}
	wr.Reg = engine.RegInfo{MR: m.mr, Key: key, IOVA: e.RegIOVA(), Access: engine.Access(e.RegAccess()),
		Guest: &engine.GuestPages{Space: mem, Read: read}}
	return q.postWR(*wr)
}
