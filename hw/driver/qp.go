package driver

import (
	"fmt"
	"math/bits"
	"syscall"

	"github.com/softirdma/softirdma/hw/abi"
)

// QPCaps size a QP's rings: 2^SendLog and 2^RecvLog slots (one of each stays empty).
type QPCaps struct {
	SendLog, RecvLog       uint8
	MaxSendSGE, MaxRecvSGE int
	MaxInline              int
}

// QP is an RC QP whose rings are in the arena.
type QP struct {
	d       *Driver
	Num     uint32
	Slot    uint32
	sq, rq  *ring
	sqProd  uint32
	rqProd  uint32
	maxSGE  int
	maxInl  int
	maxRSGE int
}

// sendElem is a send WQE slot: the WQE and room for 16 SGEs or 256 bytes inline.
const sendElemLog = 9

// recvElemLog is a receive WQE slot: the WQE and room for 5 SGEs.
const recvElemLog = 7

// CreateQP creates an RC QP in pd with its send completions in scq and receive ones in rcq.
func (d *Driver) CreateQP(pd uint32, scq, rcq *CQ, c QPCaps) (*QP, error) {
	return d.createQP(pd, scq, rcq, nil, c)
}

func (d *Driver) createQP(pd uint32, scq, rcq *CQ, srq *SRQ, c QPCaps) (*QP, error) {
	if c.MaxSendSGE > 16 || c.MaxRecvSGE > 5 || c.MaxInline > 256 {
		return nil, fmt.Errorf("driver: %d send SGEs, %d receive SGEs, %d bytes inline: %w", c.MaxSendSGE, c.MaxRecvSGE, c.MaxInline, syscall.EINVAL)
	}
	sq, err := d.newRing(c.SendLog, sendElemLog)
	if err != nil {
		return nil, err
	}
	var rq *ring
	if srq == nil {
		if rq, err = d.newRing(c.RecvLog, recvElemLog); err != nil {
			sq.free()
			return nil, err
		}
	}
	a := make(abi.CreateQPArgs, abi.CreateQPArgsSize)
	a.SetPD(pd)
	a.SetType(abi.QPTypeRC)
	a.SetSendCQ(scq.Num)
	a.SetRecvCQ(rcq.Num)
	a.SetMaxInline(uint32(c.MaxInline))
	a.SetSendSGE(uint16(c.MaxSendSGE))
	a.SetRecvSGE(uint16(c.MaxRecvSGE))
	sq.putArgs(a.SQ())
	if srq != nil {
		a.SetSRQ(srq.Num)
	} else {
		rq.putArgs(a.RQ())
	}
	res, err := d.Command(abi.OpCreateQP, a)
	if err != nil {
		freeRings(sq, rq)
		return nil, err
	}
	return &QP{d: d, Num: res[abi.ResultNum], Slot: res[abi.ResultSlot], sq: sq, rq: rq, maxSGE: c.MaxSendSGE, maxInl: c.MaxInline, maxRSGE: c.MaxRecvSGE}, nil
}

// Destroy destroys the QP and gives its rings back. Work requests still outstanding are
// dropped without completions, as the engine drops them.
func (q *QP) Destroy() error {
	return q.d.destroy(abi.OpDestroyQP, q.Num, q.sq, q.rq)
}

// SRQ is a shared receive queue in the arena.
type SRQ struct {
	d      *Driver
	r      *ring
	Num    uint32
	prod   uint32
	maxSGE int
}

// CreateSRQ creates an SRQ of 2^logCount slots (one stays empty), each of up to maxSGE SGEs,
// armed for SRQ_LIMIT_REACHED below limit (0: not armed).
func (d *Driver) CreateSRQ(pd uint32, logCount uint8, maxSGE int, limit uint32) (*SRQ, error) {
	if maxSGE < 1 || maxSGE > 5 {
		return nil, fmt.Errorf("driver: %d SGEs: %w", maxSGE, syscall.EINVAL)
	}
	r, err := d.newRing(logCount, recvElemLog)
	if err != nil {
		return nil, err
	}
	args := make(abi.CreateSRQArgs, abi.CreateSRQArgsSize)
	args.SetPD(pd)
	args.SetMaxSGE(uint32(maxSGE))
	args.SetLimit(limit)
	r.putArgs(args.Queue())
	res, err := d.Command(abi.OpCreateSRQ, args)
	if err != nil {
		r.free()
		return nil, err
	}
	return &SRQ{d: d, r: r, Num: res[abi.ResultNum], maxSGE: maxSGE}, nil
}

// Destroy destroys the SRQ (EBUSY while a QP takes its receives from it) and gives its ring
// back.
func (s *SRQ) Destroy() error {
	return s.d.destroy(abi.OpDestroySRQ, s.Num, s.r)
}

// SRQAttr is what an SRQ's Query answers and Modify sets (ibv_srq_attr).
type SRQAttr struct{ MaxWR, MaxSGE, Limit uint32 }

// ibv_srq_attr_mask.
const (
	SRQAttrMaxWR = 1
	SRQAttrLimit = 2
)

// Modify runs MODIFY_SRQ: the limit, armed anew (0 disarms it), and with SRQAttrMaxWR a new
// ring of the smallest power of two above MaxWR, to which the device moves the receives still
// posted; the driver posts on from the new ring's producer index.
func (s *SRQ) Modify(a SRQAttr, mask uint32) error {
	var r *ring
	args := make(abi.ModifySRQArgs, abi.ModifySRQArgsSize)
	args.SetNum(s.Num)
	args.SetMask(mask)
	args.SetLimit(a.Limit)
	if mask&SRQAttrMaxWR != 0 {
		logCount := uint8(bits.Len32(a.MaxWR))
		var err error
		if r, err = s.d.newRing(logCount, recvElemLog); err != nil {
			return err
		}
		r.putArgs(args.Queue())
	}
	if _, err := s.d.Command(abi.OpModifySRQ, args); err != nil {
		if r != nil {
			r.free()
		}
		return err
	}
	if r != nil {
		prod, err := r.get(abi.QHProducer)
		if err != nil {
			return err
		}
		old := s.r
		s.r, s.prod = r, prod&r.mask()
		old.free()
	}
	return nil
}

// Query runs QUERY_SRQ; Limit is 0 once SRQ_LIMIT_REACHED has fired.
func (s *SRQ) Query() (SRQAttr, error) {
	r, err := s.d.Command(abi.OpQuerySRQ, numArgs(s.Num))
	return SRQAttr{MaxWR: r[abi.ResultSRQMaxWR], MaxSGE: r[abi.ResultSRQMaxSGE], Limit: r[abi.ResultSRQLimit]}, err
}

// PostRecv posts a receive on the SRQ.
func (s *SRQ) PostRecv(id uint64, sgl ...SGE) error {
	return postRecv(s.d, s.r, &s.prod, s.maxSGE, id, sgl)
}

// CreateQPOnSRQ creates an RC QP whose receives come from srq (c.RecvLog is not used).
func (d *Driver) CreateQPOnSRQ(pd uint32, scq, rcq *CQ, srq *SRQ, c QPCaps) (*QP, error) {
	return d.createQP(pd, scq, rcq, srq, c)
}

// QPAttr is what Modify sets and Query answers (ibv_qp_attr's fields for an RC QP over
// RoCEv2), with libibverbs' values; the mask is ibv_qp_attr_mask's.
type QPAttr struct {
	State, PathMTU, Timeout, RetryCnt, RNRRetry, MinRNRTimer uint8
	MaxRdAtomic, MaxDestRdAtomic, HopLimit, PortNum          uint8
	TrafficClass                                             uint8
	PKeyIndex                                                uint16
	AccessFlags, DestQPN, RQPSN, SQPSN, FlowLabel            uint32
	DGID                                                     [16]byte
	// Query's only (ibv_qp_cap): the work requests the rings hold, SGEs, inline bytes.
	MaxSendWR, MaxRecvWR, MaxInline uint32
	MaxSendSGE, MaxRecvSGE          uint16
}

// Modify runs MODIFY_QP.
func (q *QP) Modify(a QPAttr, mask uint32) error {
	b := make(abi.ModifyQPArgs, abi.ModifyQPArgsSize)
	b.SetNum(q.Num)
	b.SetMask(mask)
	x := b.Attr()
	x.SetState(a.State)
	x.SetPathMTU(a.PathMTU)
	x.SetTimeout(a.Timeout)
	x.SetRetryCnt(a.RetryCnt)
	x.SetRNRRetry(a.RNRRetry)
	x.SetMinRNRTimer(a.MinRNRTimer)
	x.SetMaxRdAtomic(a.MaxRdAtomic)
	x.SetMaxDestRdAtomic(a.MaxDestRdAtomic)
	x.SetHopLimit(a.HopLimit)
	x.SetPortNum(a.PortNum)
	x.SetTrafficClass(a.TrafficClass)
	x.SetPKeyIndex(a.PKeyIndex)
	x.SetAccessFlags(a.AccessFlags)
	x.SetDestQPN(a.DestQPN)
	x.SetRQPSN(a.RQPSN)
	x.SetSQPSN(a.SQPSN)
	x.SetFlowLabel(a.FlowLabel)
	copy(x.DGID(), a.DGID[:])
	if _, err := q.d.Command(abi.OpModifyQP, b); err != nil {
		return err
	}
	if mask&1 != 0 && a.State == 0 {
		q.sqProd, q.rqProd = 0, 0 // RESET empties the rings; the device zeroed their indices
	}
	return nil
}

// Query runs QUERY_QP: the device writes the attributes into the command's arguments.
func (q *QP) Query() (QPAttr, error) {
	args := make(abi.QueryQPArgs, abi.QueryQPArgsSize)
	args.SetNum(q.Num)
	_, answer, err := q.d.Query(abi.OpQueryQP, args)
	if err != nil {
		return QPAttr{}, err
	}
	x := abi.QueryQPArgs(answer).Attr()
	return QPAttr{
		State: x.State(), PathMTU: x.PathMTU(), Timeout: x.Timeout(), RetryCnt: x.RetryCnt(),
		RNRRetry: x.RNRRetry(), MinRNRTimer: x.MinRNRTimer(), MaxRdAtomic: x.MaxRdAtomic(),
		MaxDestRdAtomic: x.MaxDestRdAtomic(), HopLimit: x.HopLimit(), PortNum: x.PortNum(),
		TrafficClass: x.TrafficClass(), PKeyIndex: x.PKeyIndex(),
		AccessFlags: x.AccessFlags(), DestQPN: x.DestQPN(),
		RQPSN: x.RQPSN(), SQPSN: x.SQPSN(), FlowLabel: x.FlowLabel(),
		DGID:      [16]byte(x.DGID()),
		MaxSendWR: x.MaxSendWR(), MaxRecvWR: x.MaxRecvWR(), MaxInline: x.MaxInline(),
		MaxSendSGE: x.MaxSendSGE(), MaxRecvSGE: x.MaxRecvSGE(),
	}, nil
}

// SGE is a scatter/gather element.
type SGE struct {
	Addr        uint64
	Length, Key uint32
}

// SendWR is a send work request, with libibverbs' opcode and flag values.
type SendWR struct {
	ID               uint64
	Opcode, Flags    uint32
	SGL              []SGE
	Inline           []byte // with IBV_SEND_INLINE (8), the data itself
	Imm              uint32 // immediate data (host order) or the rkey to invalidate
	RemoteAddr       uint64
	RKey             uint32
	CompareAdd, Swap uint64
	Bind             Bind    // BIND_MW
	Flush            Flush   // FLUSH: RemoteAddr and RKey name the target
	AtomicWrite      [8]byte // ATOMIC_WRITE's value, the 8 bytes that land at RemoteAddr
	Reg              Reg     // REG_MR
}

// Reg is a REG_MR work request, the kernel's IB_WR_REG_MR: MR takes Key (its index, a new
// key8) and Access, and maps IOVA to the Length bytes from Offset in Pages (4 KiB each).
type Reg struct {
	MR                   *FastRegMR
	Key, Access          uint32
	IOVA, Length, Offset uint64
	Pages                []uint64
}

// Flush is what a FLUSH asks for: its placement types (FlushGlobal, FlushPersistent) over
// Length bytes at the target (FlushRange) or over the rkey's whole region (FlushMR).
type Flush struct {
	Type, Level uint8
	Length      uint32
}

// Bind is a BIND_MW work request's window, MR and range.
type Bind struct {
	MWRKey, NewRKey, MRLKey uint32
	Addr, Length            uint64
	Access                  uint32
}

// Opcodes and flags the driver's users name (libibverbs' values).
const (
	WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead = 0, 1, 2, 3, 4
	WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRLocalInv, WRBindMW       = 5, 6, 7, 8
	WRSendWithInv, WRFlush, WRAtomicWrite                              = 9, 14, 15
	WRRegMR                                                            = abi.WROpRegMR // the kernel's IB_WR_REG_MR has no libibverbs number: the ABI gives it one
	SendSignaled, SendInline                                           = 2, 8
	FlushGlobal, FlushPersistent                                       = 1, 2 // ibv_placement_type
	FlushRange, FlushMR                                                = 0, 1 // ibv_selectivity_level
)

// PostSend writes the WQEs into the send queue, in rxe's layout, and rings its doorbell once.
func (q *QP) PostSend(wrs ...SendWR) error {
	cons, err := q.sq.get(abi.QHConsumer)
	if err != nil {
		return err
	}
	for i := range wrs {
		if (q.sqProd+1)&q.sq.mask() == cons&q.sq.mask() {
			return fmt.Errorf("driver: send queue full at work request %d: %w", i, syscall.ENOMEM)
		}
		e, err := q.sendWQE(&wrs[i])
		if err != nil {
			return fmt.Errorf("driver: work request %d: %w", i, err)
		}
		if err := q.d.bus.WriteMem(q.sq.elem(q.sqProd), e); err != nil {
			return err
		}
		q.sqProd = (q.sqProd + 1) & q.sq.mask()
	}
	if err := q.sq.put(abi.QHProducer, q.sqProd); err != nil {
		return err
	}
	return q.d.bus.WriteReg(abi.BARDoorbell, abi.SQDoorbell(q.Slot), q.sqProd)
}

func (q *QP) sendWQE(w *SendWR) (abi.SendWQE, error) {
	e := make(abi.SendWQE, 1<<sendElemLog)
	e.SetWRID(w.ID)
	e.SetOpcode(w.Opcode)
	e.SetFlags(w.Flags)
	imm := w.Imm
	if w.Opcode == WRRDMAWriteWithImm || w.Opcode == WRSendWithImm {
		imm = bits.ReverseBytes32(imm) // imm_data goes in network order
	}
	e.SetImm(imm)
	// iova and dma.resid as rxe's provider fills them, for a device that reads the WQE as
	// rxe's kernel does rather than as this one does (it takes the union and dma.length).
	e.SetIOVA(w.RemoteAddr)
	payload := true // the message's data is the SGEs' or inline
	var total uint32
	switch w.Opcode {
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		e.SetRemoteAddr(w.RemoteAddr)
		e.SetCompareAdd(w.CompareAdd)
		e.SetSwap(w.Swap)
		e.SetAtomicRKey(w.RKey)
	case WRBindMW:
		e.SetMWAddr(w.Bind.Addr)
		e.SetMWLength(w.Bind.Length)
		e.SetMWMRLKey(w.Bind.MRLKey)
		e.SetMWRKey(w.Bind.MWRKey)
		e.SetMWNewRKey(w.Bind.NewRKey)
		e.SetMWAccess(w.Bind.Access)
	case WRFlush:
		// rxe's provider leaves flush.length 0 and puts the length in dma.length; the rkey is
		// flush.rkey, not rdma.rkey, which would sit where flush.length is.
		e.SetRemoteAddr(w.RemoteAddr)
		e.SetFlushRKey(w.RKey)
		e.SetFlushType(w.Flush.Type)
		e.SetFlushLevel(w.Flush.Level)
		payload, total = false, w.Flush.Length
	case WRAtomicWrite:
		// The value travels in the WQE (dma.atomic_wr, where SGEs would be), not through an lkey.
		e.SetRemoteAddr(w.RemoteAddr)
		e.SetRKey(w.RKey)
		copy(e.AtomicWrite(), w.AtomicWrite[:])
		payload, total = false, 8
	case WRRegMR:
		if err := q.regWQE(e, &w.Reg); err != nil {
			return nil, err
		}
		payload = false
	default:
		e.SetRemoteAddr(w.RemoteAddr)
		e.SetRKey(w.RKey)
	}
	if payload {
		var err error
		if total, err = q.payload(e, w); err != nil {
			return nil, err
		}
	}
	e.SetDMALength(total)
	e.SetDMAResid(total)
	return e, nil
}

// regWQE writes a REG_MR's fields, and the pages into its MR's table, which the WQE names.
func (q *QP) regWQE(e abi.SendWQE, r *Reg) error {
	if r.MR == nil || len(r.Pages) == 0 || len(r.Pages) > int(r.MR.MaxPages) {
		return fmt.Errorf("a REG_MR of %d pages: %w", len(r.Pages), syscall.EINVAL)
	}
	if err := q.d.writePages(r.MR.table, r.Pages); err != nil {
		return err
	}
	e.SetRegKey(r.Key)
	e.SetRegAccess(r.Access)
	e.SetRegIOVA(r.IOVA)
	e.SetRegLength(r.Length)
	e.SetRegOffset(r.Offset)
	putPageList(e.RegPages(), r.MR.table, uint32(len(r.Pages)))
	return nil
}

// payload writes a WQE's inline data or SGEs and returns the message's length.
func (q *QP) payload(e abi.SendWQE, w *SendWR) (uint32, error) {
	if w.Flags&SendInline != 0 {
		if len(w.Inline) > q.maxInl {
			return 0, fmt.Errorf("%d bytes inline, the QP takes %d: %w", len(w.Inline), q.maxInl, syscall.EINVAL)
		}
		copy(e.Payload(), w.Inline)
		return uint32(len(w.Inline)), nil
	}
	if len(w.SGL) > q.maxSGE {
		return 0, fmt.Errorf("%d SGEs, the QP takes %d: %w", len(w.SGL), q.maxSGE, syscall.EINVAL)
	}
	e.SetNumSGE(uint32(len(w.SGL)))
	return putSGEs(e.SGE, w.SGL), nil
}

// putSGEs writes sgl into the WQE's SGEs (sge(i) is the i-th) and returns their total length.
func putSGEs(sge func(i int) abi.SGE, sgl []SGE) uint32 {
	var total uint32
	for i, s := range sgl {
		e := sge(i)
		e.SetAddr(s.Addr)
		e.SetLength(s.Length)
		e.SetLKey(s.Key)
		total += s.Length
	}
	return total
}

// PostRecv writes a receive WQE and advances the producer index: receive queues have no
// doorbell.
func (q *QP) PostRecv(id uint64, sgl ...SGE) error {
	if q.rq == nil {
		return fmt.Errorf("driver: the QP takes its receives from an SRQ: %w", syscall.EINVAL)
	}
	return postRecv(q.d, q.rq, &q.rqProd, q.maxRSGE, id, sgl)
}

func postRecv(d *Driver, r *ring, prod *uint32, maxSGE int, id uint64, sgl []SGE) error {
	if len(sgl) > maxSGE {
		return fmt.Errorf("driver: %d SGEs, the queue takes %d: %w", len(sgl), maxSGE, syscall.EINVAL)
	}
	cons, err := r.get(abi.QHConsumer)
	if err != nil {
		return err
	}
	if (*prod+1)&r.mask() == cons&r.mask() {
		return fmt.Errorf("driver: receive queue full: %w", syscall.ENOMEM)
	}
	e := make(abi.RecvWQE, 1<<recvElemLog)
	e.SetWRID(id)
	e.SetDMALength(putSGEs(e.SGE, sgl))
	e.SetNumSGE(uint32(len(sgl)))
	if err := d.bus.WriteMem(r.elem(*prod), e); err != nil {
		return err
	}
	*prod = (*prod + 1) & r.mask()
	return r.put(abi.QHProducer, *prod)
}
