package ucontext

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/wqe"
)

// qp is a QP whose send and receive queues are rings the program writes, in rxe's layout.
type qp struct {
	c      *Context
	emu    *engine.QP
	handle uint64
	pd     *pd
	scq    *cq
	rcq    *cq
	srq    *srq
	ud     bool
	sigAll bool

	maxSendSGE, maxRecvSGE, maxInline int

	posting sync.Mutex // doorbells, so WQEs reach the engine in ring order
	sq      *ring
	sqNext  uint32
	sqWQE   []byte

	sqMu   sync.Mutex // the consumer index the engine's retirements move
	sqCons uint32

	rqMu   sync.Mutex
	rq     *ring // nil with an SRQ
	rqCons uint32
	rqWQE  []byte

	gone bool // destroyed: posting stops, the rings are unmapped (under posting, sqMu and rqMu)
}

// qpCreate is CREATE_QP's request (struct ib_uverbs_create_qp after the response pointer).
type qpCreate struct {
	handle                                      uint64
	pd, scq, rcq, srq                           uint32
	sendWR, recvWR, sendSGE, recvSGE, maxInline uint32
	sigAll, typ, isSRQ                          uint8
}

func (r *request) qpCreate(base int) qpCreate {
	le := binary.LittleEndian
	b := r.Core[base:]
	return qpCreate{handle: le.Uint64(b), pd: le.Uint32(b[8:]), scq: le.Uint32(b[12:]), rcq: le.Uint32(b[16:]),
		srq: le.Uint32(b[20:]), sendWR: le.Uint32(b[24:]), recvWR: le.Uint32(b[28:]), sendSGE: le.Uint32(b[32:]),
		recvSGE: le.Uint32(b[36:]), maxInline: le.Uint32(b[40:]), sigAll: b[44], typ: b[45], isSRQ: b[46]}
}

func (c *Context) createQP(r *request) error {
	if len(r.DriverIn) != 0 {
		return errf(syscall.EINVAL, "CREATE_QP with driver data")
	}
	return c.newQP(r, r.qpCreate(8), 0)
}

// EX_CREATE_QP: struct ib_uverbs_ex_create_qp, the legacy fields from user_handle on, then
// comp_mask (48), create_flags (52), rwq_ind_tbl_handle (56), source_qpn (60). libibverbs sends
// it for ibv_create_qp_ex with create flags or an indirection table; rxe takes neither.
func (c *Context) createQPEx(r *request) error {
	mask, flags := r.u32(48), r.u32(52)
	switch {
	case mask&^1 != 0:
		return errf(syscall.EINVAL, "EX_CREATE_QP comp_mask 0x%x", mask)
	case mask != 0 || flags != 0:
		return errf(syscall.EOPNOTSUPP, "EX_CREATE_QP comp_mask 0x%x create_flags 0x%x", mask, flags)
	case len(r.DriverIn) != 0:
		return errf(syscall.EINVAL, "EX_CREATE_QP with driver data")
	}
	putU32(r.resp[36:], uint32(min(r.CoreOut, len(r.resp))))
	return c.newQP(r, r.qpCreate(0), 0)
}

// qpTypes are the QP types a program may create (IBV_QPT_RC, UC, UD).
var qpTypes = map[uint8]engine.QPType{2: engine.QPTypeRC, 3: engine.QPTypeUC, 4: engine.QPTypeUD}

// checkQP resolves CREATE_QP's objects and checks its numbers.
func (c *Context) checkQP(a qpCreate) (*pd, *cq, *cq, *srq, error) {
	l := c.dev.Engine.Limits()
	p, err := find(c.pds, a.pd, "PD")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if _, ok := qpTypes[a.typ]; !ok {
		return nil, nil, nil, nil, errf(syscall.EOPNOTSUPP, "QP type %d", a.typ)
	}
	scq, err := find(c.cqs, a.scq, "send CQ")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	rcq, err := find(c.cqs, a.rcq, "receive CQ")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var s *srq
	if a.isSRQ != 0 {
		if s, err = find(c.srqs, a.srq, "SRQ"); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	switch {
	case int(a.sendWR) > l.MaxQPWR || s == nil && int(a.recvWR) > l.MaxQPWR:
		return nil, nil, nil, nil, errf(syscall.EINVAL, "%d send and %d receive WRs (at most %d)", a.sendWR, a.recvWR, l.MaxQPWR)
	case int(a.sendSGE) > l.MaxSGE || int(a.recvSGE) > l.MaxSGE:
		return nil, nil, nil, nil, errf(syscall.EINVAL, "%d send and %d receive SGEs (at most %d)", a.sendSGE, a.recvSGE, l.MaxSGE)
	case int(a.maxInline) > l.MaxInline:
		return nil, nil, nil, nil, errf(syscall.EINVAL, "%d bytes inline (at most %d)", a.maxInline, l.MaxInline)
	case a.sigAll > 1:
		return nil, nil, nil, nil, errf(syscall.EINVAL, "sq_sig_all %d", a.sigAll)
	}
	return p, scq, rcq, s, nil
}

// newQP creates the QP: rings sized as rxe's kernel sizes them (the caps it answers are what
// the slots hold), then the engine's QP.
func (c *Context) newQP(r *request, a qpCreate, respOff int) error {
	p, scq, rcq, s, err := c.checkQP(a)
	if err != nil {
		return err
	}
	wqe := max(int(a.sendSGE)*abi.SGESize, int(a.maxInline), abi.SGESize)
	q := &qp{c: c, handle: a.handle, pd: p, scq: scq, rcq: rcq, srq: s, ud: a.typ == 4, sigAll: a.sigAll != 0,
		maxSendSGE: wqe / abi.SGESize, maxInline: wqe, maxRecvSGE: max(int(a.recvSGE), 1)}
	if q.sq, err = c.area.newRing(slotsFor(a.sendWR), logElemFor(abi.SendWQESize+wqe)); err != nil {
		return err
	}
	if s == nil {
		if q.rq, err = c.area.newRing(slotsFor(a.recvWR), logElemFor(abi.RecvWQESize+q.maxRecvSGE*abi.SGESize)); err != nil {
			q.sq.unmap()
			return err
		}
	}
	q.emu, err = p.pd.CreateQP(q.initAttr(qpTypes[a.typ]))
	if err != nil {
		q.sq.unmap()
		q.rq.unmap()
		return err
	}
	q.sqWQE = make([]byte, min(1<<q.sq.logElem, abi.SendSGEs+max(abi.SGESize*q.maxSendSGE, q.maxInline, 8)))
	q.emu.OnRetire(q.retired)
	if q.rq != nil {
		q.rqWQE = make([]byte, min(1<<q.rq.logElem, abi.RecvSGEs+abi.SGESize*q.maxRecvSGE))
		q.emu.SetRecvSource(q.fetchRecv)
	}
	c.dev.own(c, ownQP, q.emu.Num(), q.handle)
	h := c.handle()
	c.qps[h] = q
	p.uses++
	scq.uses++
	rcq.uses++
	if s != nil {
		s.uses++
	}
	q.answerCreate(r, h, respOff)
	return nil
}

func (q *qp) initAttr(typ engine.QPType) engine.QPInitAttr {
	init := engine.QPInitAttr{Type: typ, SendCQ: q.scq.emu, RecvCQ: q.rcq.emu, SigAll: q.sigAll,
		Cap: engine.QPCap{MaxSendWR: int(q.sq.mask), MaxRecvWR: 1, MaxSendSGE: q.maxSendSGE, MaxRecvSGE: q.maxRecvSGE, MaxInlineData: q.maxInline}}
	if q.rq != nil {
		init.Cap.MaxRecvWR = int(q.rq.mask)
	} else {
		init.SRQ = q.srq.emu
	}
	return init
}

// answerCreate writes struct ib_uverbs_create_qp_resp and rxe's rq and sq mmap info.
func (q *qp) answerCreate(r *request, h uint32, off int) {
	b := r.resp[off:]
	putU32(b, h)
	putU32(b[4:], q.emu.Num())
	putU32(b[8:], q.sq.mask)
	if q.rq != nil {
		putU32(b[12:], q.rq.mask)
	}
	putU32(b[16:], uint32(q.maxSendSGE))
	putU32(b[20:], uint32(q.maxRecvSGE))
	putU32(b[24:], uint32(q.maxInline))
	r.driver = make([]byte, 32)
	if q.rq != nil {
		copy(r.driver, q.rq.mmapInfo())
	}
	copy(r.driver[16:], q.sq.mmapInfo())
}

// retired moves the send queue's consumer index past n retired WQEs: only now may the program
// reuse their slots.
func (q *qp) retired(n int) {
	q.sqMu.Lock()
	defer q.sqMu.Unlock()
	q.sqCons = (q.sqCons + uint32(n)) & q.sq.mask
	if !q.gone {
		q.sq.setConsumer(q.sqCons)
	}
}

// fetchRecv hands the engine up to limit receives the program posted since the last fetch.
func (q *qp) fetchRecv(limit int) []engine.RecvWR {
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if q.gone {
		return nil
	}
	prod := q.rq.producer()
	var out []engine.RecvWR
	for q.rqCons != prod && len(out) < limit {
		copy(q.rqWQE, q.rq.slot(q.rqCons))
		out = append(out, wqe.Recv(abi.RecvWQE(q.rqWQE), q.maxRecvSGE))
		q.rqCons = (q.rqCons + 1) & q.rq.mask
	}
	q.rq.setConsumer(q.rqCons)
	return out
}

// POST_SEND: qp_handle (8), wr_count (12): rxe's doorbell carries no WRs.
func (c *Context) postSend(r *request) error {
	q, err := find(c.qps, r.u32(8), "QP")
	if err != nil {
		return err
	}
	if r.u32(12) != 0 {
		return errf(syscall.EINVAL, "POST_SEND with %d WRs: the queue is the ring", r.u32(12))
	}
	if q.emu.State() < engine.QPSRTS && q.emu.State() != engine.QPSErr {
		return errf(syscall.EINVAL, "POST_SEND on a QP in %s", q.emu.State())
	}
	c.mu.Unlock() // the doorbell runs without the context's lock: the engine may take long
	q.ring()
	c.mu.Lock()
	return nil
}

// ring takes a doorbell: every WQE written since the last one goes to the engine in ring order;
// one the engine cannot take as it is completes in error in its place.
func (q *qp) ring() {
	q.posting.Lock()
	defer q.posting.Unlock()
	if q.gone {
		return
	}
	prod := q.sq.producer()
	for q.sqNext != prod {
		copy(q.sqWQE, q.sq.slot(q.sqNext))
		if err := q.post(abi.SendWQE(q.sqWQE)); err != nil {
			var pe *engine.PostError
			if errors.As(err, &pe) && pe.Err == syscall.ENOMEM {
				return // the engine's queue is full: a retirement or the next doorbell goes on
			}
			w := abi.SendWQE(q.sqWQE)
			if q.emu.PostSendError(engine.PostedError{ID: w.WRID(), Opcode: wqe.ErrOpcode(w.Opcode()),
				Status: engine.WCLocQPOpErr, Err: err}) != nil {
				return
			}
		}
		q.sqNext = (q.sqNext + 1) & q.sq.mask
	}
}

func (q *qp) destroy() {
	q.emu.SendPostedDatagrams()
	_ = q.emu.Destroy()
	q.posting.Lock()
	q.sqMu.Lock()
	q.rqMu.Lock()
	q.gone = true
	q.sq.unmap()
	q.rq.unmap()
	q.rqMu.Unlock()
	q.sqMu.Unlock()
	q.posting.Unlock()
}

// DESTROY_QP: qp_handle (8). The answer counts the QP's async events the program read.
func (c *Context) destroyQP(r *request) error {
	q, err := find(c.qps, r.u32(8), "QP")
	if err != nil {
		return err
	}
	q.destroy()
	delete(c.qps, r.u32(8))
	c.dev.disown(ownQP, q.emu.Num())
	putU32(r.resp, c.asyncReported(q.handle))
	q.pd.uses--
	q.scq.uses--
	q.rcq.uses--
	if q.srq != nil {
		q.srq.uses--
	}
	return nil
}

// ATTACH_MCAST and DETACH_MCAST: gid (0), qp_handle (16).
func (c *Context) attachMcast(r *request) error { return c.mcast(r, true) }
func (c *Context) detachMcast(r *request) error { return c.mcast(r, false) }

func (c *Context) mcast(r *request, attach bool) error {
	q, err := find(c.qps, r.u32(16), "QP")
	if err != nil {
		return err
	}
	g := netip.AddrFrom16([16]byte(r.Core[0:16])).Unmap()
	if !g.IsMulticast() {
		return errf(syscall.EINVAL, "GID %s is not a multicast group", g)
	}
	if attach {
		return q.emu.AttachMcast(g)
	}
	return q.emu.DetachMcast(g)
}
