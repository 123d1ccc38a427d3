package engine

import (
	"fmt"
	"syscall"

	"github.com/softirdma/softirdma/keys"
)

// SendWR is a send work request (struct ibv_send_wr).
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Imm is the immediate data of a WITH_IMM opcode, or the rkey a SEND_WITH_INV or LOCAL_INV
	// invalidates (the union imm_data / invalidate_rkey), in host order.
	Imm uint32
	// RemoteAddr and RKey name the target of an RDMA or atomic operation.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of a CMP_AND_SWP or the addend of a FETCH_AND_ADD; Swap is
	// the swap value of a CMP_AND_SWP.
	CompareAdd, Swap uint64
	// Bind is a BIND_MW request for a type 2 window.
	Bind BindInfo
	// Reg is a REG_MR (fast-register) request.
	Reg RegInfo
	// Flush is a FLUSH request's placement type, level and length (the arguments of
	// ibv_wr_flush besides the rkey and address). A FLUSH carries no SGEs.
	Flush FlushInfo
	// InlineData, with SendInline, is the data itself rather than SGEs naming registered
	// memory: a device model hands over the bytes a WQE carries inline (SGL is then ignored).
	InlineData []byte
	// AH, RemoteQPN and RemoteQKey address a datagram (wr.ud): the handle, the QP it goes to
	// (McastQPN for a multicast group) and its Q_Key; a Q_Key with the high bit set sends the
	// QP's own instead (the controlled Q_Key).
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// FlushInfo is what a FLUSH asks for: which placement, over the range [RemoteAddr, +Length)
// (FlushRange) or the whole region of the rkey (FlushMR).
type FlushInfo struct {
	Type   FlushType
	Level  FlushLevel
	Length uint32
}

// BindInfo is a window bind (bind_mw in struct ibv_send_wr): RKey is the new rkey the consumer
// chose (its low 8 bits are what changes).
type BindInfo struct {
	MW     *MW
	RKey   uint32
	MR     *MR
	Addr   uint64
	Length uint64
	Access Access
}

// RegInfo is a fast registration: the MR from AllocFastRegMR, its new key (same index, new key8),
// and the memory, address and rights to give it.
type RegInfo struct {
	MR     *MR
	Key    uint32
	Buf    []byte
	IOVA   uint64
	Access Access
	// Guest, when set, is the memory instead of Buf: a guest's page list in an address space,
	// as a device's kernel-only REG_MR work request gives it (see PD.RegGuestMR).
	Guest *GuestPages
}

// GuestPages is memory a guest names by its pages, in the address space Space.
type GuestPages struct {
	Space keys.AddressSpace
	Pages PageList
	// Read, when set, gives Pages when the work request runs rather than when it is posted,
	// as a NIC reads a fast-register page list when it executes the WQE: a posted request then
	// holds no list, however many are queued. It runs with the QP locked and must not call
	// into the device; its error fails the request (LOC_QP_OP_ERR).
	Read func() (PageList, error)
}

type wqeState uint8

const (
	wqePosted  wqeState = iota // not started, or going to be sent again
	wqeSending                 // some packets sent
	wqeSent                    // every request packet sent, waiting for its acknowledgement or response
	wqeDone                    // finished, status set
)

// sendWQE is a posted send request and the requester's progress on it.
type sendWQE struct {
	wr     SendWR
	sgl    []SGE // owned copy of wr.SGL
	inline []byte
	length uint64
	wqeProgress
}

// wqeProgress is what the requester learns about a WQE as it works on it; posting starts it
// from zero.
type wqeProgress struct {
	state  wqeState
	status WCStatus
	err    error

	firstPSN, lastPSN uint32 // the PSNs the request uses, once it has started
	npkts             uint32 // request packets (SEND, WRITE) or response packets (READ)
	next              uint32 // index of the next request packet to send, or of the next READ response expected
	atomicOrig        uint64
	mwKey             uint32 // a bind: the window's rkey as the consumer held it when the bind was posted
	type1             bool   // a bind from the bind verb, counted in its window's posted binds until settleBind
	counted           bool   // a READ or atomic counted in the requester's rdAtomic
	gapAsked          bool   // a READ asked again for the responses from gapPSN on
	gapPSN            uint32
	firstTx           uint64 // the requester's packet count at the WQE's first request packet (0: none yet)
	// poison, set by PostSendError, fails the WQE with its status when the requester reaches it.
	poison *PostedError
	askTx  uint64 // the same at the request that asked again for gapPSN
}

// settleBind takes a type 1 bind off its window's count of posted binds: it has run, failed,
// or will never run. After it the window's handle shows what the key space holds.
func (w *sendWQE) settleBind() {
	if w.type1 {
		d := w.wr.Bind.MW.pd.dev
		d.tab.Lock()
		w.settleBindLocked()
		d.tab.Unlock()
	}
}

// settleBindLocked is settleBind with the tables lock held.
func (w *sendWQE) settleBindLocked() {
	if w.type1 {
		w.type1 = false
		w.wr.Bind.MW.posted--
	}
}

// settleBinds settles the type 1 binds of WQEs dropped without running (a reset, a destroy).
func (q *sendQueue) settleBinds() {
	for i := range q.n {
		q.at(i).settleBind()
	}
}

func (w *sendWQE) isLocal() bool {
	switch w.wr.Opcode {
	case WRLocalInv, WRBindMW, WRRegMR:
		return true
	}
	return false
}

// isReadOrAtomic says whether the request is answered by a response of its own (READ responses,
// an atomic acknowledgement, the READ response of a FLUSH) rather than by an ACK.
func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRFlush:
		return true
	}
	return false
}

// usesRdAtomic says whether the request takes one of the responder's resources and so counts
// against max_rd_atomic: READ, the atomics, FLUSH and ATOMIC_WRITE (rxe's init depth covers
// RXE_READ_OR_ATOMIC_MASK and RXE_ATOMIC_WRITE_MASK, and its responder keeps a resource for
// each FLUSH).
func (w *sendWQE) usesRdAtomic() bool {
	return w.isReadOrAtomic() || w.wr.Opcode == WRAtomicWrite
}

// sendQueue is a ring of WQEs: [head, head+n) are posted and not yet retired.
type sendQueue struct {
	ring    []sendWQE
	head, n int
}

func newSendQueue(n int) sendQueue { return sendQueue{ring: make([]sendWQE, n)} }

// full says why a post found no room.
func (q *sendQueue) full() string {
	if len(q.ring) == 0 {
		return "the QP has no send queue (max_send_wr 0)"
	}
	return "send queue full"
}

func (q *sendQueue) at(i int) *sendWQE {
	// i < len(q.ring) and head < len(q.ring): one subtraction instead of a division.
	j := q.head + i
	if j >= len(q.ring) {
		j -= len(q.ring)
	}
	return &q.ring[j]
}

func (q *sendQueue) reset() {
	q.settleBinds()
	for i := range q.ring {
		q.ring[i] = sendWQE{sgl: q.ring[i].sgl[:0]}
	}
	q.head, q.n = 0, 0
}

// flush completes every WQE not yet retired with WR_FLUSH_ERR, or with its own error status.
// A WQE that finished successfully while one before it was still outstanding (a SEND or WRITE
// acknowledged, a READ or atomic answered, past a READ awaiting a lost response) is flushed
// too: completions keep the order of posting, and none says SUCCESS after the failure (IBTA
// 10.8.3; rxe flushes the whole queue the same way). Its remote effect happened all the same.
func (q *sendQueue) flush(qp *QP) {
	for q.n > 0 {
		w := q.at(0)
		if w.state != wqeDone || w.status == WCSuccess {
			w.state, w.status, w.err = wqeDone, WCWRFlushErr, qp.flushed
		}
		qp.retireHead()
	}
	qp.req.idx = 0
}

// PostSend posts send work requests (ibv_post_send). A request that cannot be posted is an
// *PostError naming it; the ones before it were posted. On a QP in ERR the requests are posted
// and complete at once with WR_FLUSH_ERR.
func (qp *QP) PostSend(wrs ...SendWR) error { return qp.postSends(wrs, true) }

// PostSendHere is PostSend for a device model that runs the requester itself once a doorbell's
// work is all posted (SendPosted), on the goroutine that took the doorbell. The work is not also
// handed to the device's clock, whose goroutine would be woken for it only to find it done.
func (qp *QP) PostSendHere(wrs ...SendWR) error { return qp.postSends(wrs, false) }

func (qp *QP) postSends(wrs []SendWR, kick bool) error {
	if err := qp.check("post_send", "QP"); err != nil {
		return err
	}
	defer hold(qp.dev, &qp.mu).release()
	for i := range wrs {
		if err := qp.postSend(&wrs[i]); err != nil {
			err.Index, err.ID, err.verb, err.batch = i, wrs[i].ID, "post_send", len(wrs)
			return err
		}
	}
	if kick {
		qp.kick()
	}
	return nil
}

// postFail is a *PostError with its reason formatted.
func postFail(errno syscall.Errno, format string, args ...any) *PostError {
	return &PostError{Err: errno, Reason: fmt.Sprintf(format, args...)}
}

func (qp *QP) postSend(wr *SendWR) *PostError {
	length, perr := qp.checkSendWR(wr)
	if perr != nil {
		return perr
	}
	q := &qp.sq
	if q.n == len(q.ring) {
		return postFail(syscall.ENOMEM, "%s", q.full())
	}
	w := q.at(q.n)
	if perr := qp.fillSendWQE(w, wr, length); perr != nil {
		return perr
	}
	q.n++
	if qp.dev.tracing() {
		qp.dev.event(Event{QP: qp.qpn, Kind: EvPost, WRID: wr.ID, Msg: fmt.Sprintf("post %s len %d", wr.Opcode, length)})
	}
	if qp.state == QPSErr {
		w.state, w.status, w.err = wqeDone, WCWRFlushErr, qp.flushed
		qp.retire()
	}
	return nil
}

// checkSendWR is the post-time check of a send work request against the QP's state, its
// transport and its capabilities; it returns the message length.
func (qp *QP) checkSendWR(wr *SendWR) (uint64, *PostError) {
	switch qp.state {
	case QPSReset, QPSInit, QPSRTR:
		return 0, postFail(syscall.EINVAL, "the QP is in %s", qp.state)
	}
	if !wr.Opcode.valid() {
		return 0, postFail(syscall.EINVAL, "opcode %d", wr.Opcode)
	}
	if !qp.tr.sends.has(wr.Opcode) {
		return 0, postFail(syscall.EINVAL, "%s on a %s QP", wr.Opcode, qp.tr.name)
	}
	if qp.tr.postCheck != nil {
		if err := qp.tr.postCheck(qp, *wr); err != nil {
			return 0, &PostError{Err: syscall.EINVAL, Reason: err.Error()}
		}
	}
	if len(wr.SGL) > qp.cap.MaxSendSGE {
		return 0, postFail(syscall.EINVAL, "%d SGEs, the QP takes %d", len(wr.SGL), qp.cap.MaxSendSGE)
	}
	var length uint64
	for _, s := range wr.SGL {
		length += uint64(s.Length)
	}
	if wr.Flags&SendInline != 0 && wr.InlineData != nil {
		length = uint64(len(wr.InlineData))
	}
	if length > qp.dev.limits.MaxMsgSize {
		return 0, postFail(syscall.EINVAL, "message of %d bytes, at most %d", length, qp.dev.limits.MaxMsgSize)
	}
	if mtu := uint64(qp.attr.PathMTU.Bytes()); mtu > 0 && length > (1<<23-1-uint64(qp.dev.window))*mtu {
		// Half the 24-bit PSN space less the window, in packets (ceil(length/mtu) reaching
		// it, without a division per post): beyond it PSN comparisons break.
		return 0, postFail(syscall.EINVAL, "message of %d bytes needs too many packets at MTU %d", length, mtu)
	}
	if perr := checkSendOperands(wr, length); perr != nil {
		return 0, perr
	}
	if wr.Flags&SendInline != 0 {
		switch wr.Opcode {
		case WRSend, WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm, WRAtomicWrite:
		default:
			return 0, postFail(syscall.EINVAL, "%s cannot be inline", wr.Opcode)
		}
		if length > uint64(qp.cap.MaxInlineData) {
			return 0, postFail(syscall.EINVAL, "%d bytes inline, the QP takes %d", length, qp.cap.MaxInlineData)
		}
	}
	return length, nil
}

// checkSendOperands checks what each opcode asks of its SGEs and its opcode-specific fields.
func checkSendOperands(wr *SendWR, length uint64) *PostError {
	switch wr.Opcode {
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return postFail(syscall.EINVAL, "an atomic needs one 8-byte SGE")
		}
	case WRAtomicWrite:
		// The 8 bytes to store come from the SGEs (or their inline copy), as rxe takes them.
		if length != 8 {
			return postFail(syscall.EINVAL, "an ATOMIC_WRITE carries 8 bytes, not %d", length)
		}
	case WRFlush:
		if len(wr.SGL) != 0 {
			return postFail(syscall.EINVAL, "a FLUSH has no SGEs")
		}
		if t := wr.Flush.Type; t == 0 || t&^(FlushGlobal|FlushPersistent) != 0 {
			return postFail(syscall.EINVAL, "FLUSH placement type %d", t)
		}
		if wr.Flush.Level > FlushMR {
			return postFail(syscall.EINVAL, "FLUSH selectivity level %d", wr.Flush.Level)
		}
	case WRBindMW:
		if wr.Bind.MW == nil || wr.Bind.MW.typ == MWType1 {
			return postFail(syscall.EINVAL, "BIND_MW work requests bind type 2 windows; use QP.BindMW for type 1")
		}
		if wr.Bind.MW.pd == nil {
			return postFail(syscall.EINVAL, "the window was not made by AllocMW")
		}
	case WRRegMR:
		if wr.Reg.MR == nil {
			return postFail(syscall.EINVAL, "REG_MR without an MR")
		}
	}
	return nil
}

// fillSendWQE copies a checked work request into the free ring slot w, reading inline data
// from the SGEs now if the request names it that way.
func (qp *QP) fillSendWQE(w *sendWQE, wr *SendWR, length uint64) *PostError {
	// Field by field: building a whole sendWQE and copying it in was a good part of posting.
	w.wr = *wr
	w.wr.SGL = nil
	w.sgl, w.inline, w.length = append(w.sgl[:0], wr.SGL...), w.inline[:0], length
	w.wqeProgress = wqeProgress{}
	if wr.Opcode == WRBindMW {
		w.mwKey = wr.Bind.MW.currentRKey() // the rkey the consumer named, checked when the bind runs (B1)
	}
	if wr.Flags&SendInline == 0 {
		return nil
	}
	if wr.InlineData != nil {
		w.inline = append(w.inline, wr.InlineData...)
		w.wr.InlineData = nil
		return nil
	}
	// Inline data is read at post time, through the local address space, which for Go
	// callers means the registered memory the SGEs name.
	for _, s := range wr.SGL {
		p, err := qp.localAccess(SGE{Addr: s.Addr, LKey: s.LKey}, 0, uint64(s.Length), 0)
		if err != nil {
			return postFail(syscall.EINVAL, "inline data: %v", err)
		}
		start := len(w.inline)
		w.inline = append(w.inline, make([]byte, s.Length)...)
		p.CopyTo(w.inline[start:])
		p.release()
	}
	return nil
}

// MWBind is the bind verb's request (struct ibv_mw_bind).
type MWBind struct {
	ID     uint64
	Flags  SendFlags
	MR     *MR
	Addr   uint64
	Length uint64
	Access Access
}

// BindMW binds a type 1 window (ibv_bind_mw): the window's rkey becomes key8+1 at once and
// rolls back if the bind completes in error. A zero-length bind invalidates the window. It
// fails with EINVAL or EPERM, posting nothing, where rxe's provider does.
func (qp *QP) BindMW(mw *MW, b MWBind) error {
	if err := qp.check("bind_mw", "QP"); err != nil {
		return err
	}
	if err := mw.check("bind_mw"); err != nil {
		return err
	}
	d := qp.dev
	defer hold(d, &qp.mu).release()
	if mw.typ != MWType1 {
		return fmt.Errorf("bind_mw: %s window: %w", mw.typ, syscall.EINVAL)
	}
	if !qp.tr.sends.has(WRBindMW) {
		return fmt.Errorf("bind_mw: on a %s QP: %w", qp.tr.name, syscall.EINVAL)
	}
	// The verb's checks look at the window as the key space has it; binds still queued ahead
	// of this one may have moved the handle's rkey on already. The checks, the rkey read and the
	// bind's count in the window's posted ones are one hold of the tables lock, so that a bind of
	// the same window on another QP moves the rkey on from this one's.
	d.tab.Lock()
	kb := keys.Bind{MW: mw.key(), QP: keys.QPN(qp.qpn), PD: qp.pd.handle, Addr: b.Addr, Len: b.Length, Access: b.Access}
	if b.MR != nil {
		kb.MR = b.MR.key
	}
	var err error
	if b.MR == nil && (b.Addr != 0 || b.Length != 0) {
		err = fmt.Errorf("bind_mw: address or length without an MR: %w", syscall.EINVAL)
	} else {
		err = d.keys.CheckBindVerb(kb)
	}
	if err == nil {
		err = qp.bind1Room()
	}
	old := mw.rkey()
	if err == nil {
		mw.posted++
	}
	d.tab.Unlock()
	if err != nil {
		return err
	}
	wr := SendWR{ID: b.ID, Opcode: WRBindMW, Flags: b.Flags,
		Bind: BindInfo{MW: mw, RKey: uint32(old.Inc()), MR: b.MR, Addr: b.Addr, Length: b.Length, Access: b.Access}}
	// postSend refuses type 1 windows in BIND_MW work requests; this is the verb's own path.
	qp.postBind1(&wr, uint32(old))
	qp.kick()
	return nil
}

// bind1Room says why the send queue cannot take a type 1 bind now, if it cannot.
func (qp *QP) bind1Room() error {
	switch qp.state {
	case QPSReset, QPSInit, QPSRTR:
		return fmt.Errorf("bind_mw: the QP is in %s: %w", qp.state, syscall.EINVAL)
	}
	if q := &qp.sq; q.n == len(q.ring) {
		return fmt.Errorf("bind_mw: %s: %w", q.full(), syscall.ENOMEM)
	}
	return nil
}

// postBind1 queues a type 1 bind that bind1Room found room for and its window counts already
// (see BindMW). From then on the window's handle shows the new rkey: the bind counts in the
// window's posted binds until it runs, fails or is dropped (settleBind).
func (qp *QP) postBind1(wr *SendWR, old uint32) {
	q := &qp.sq
	w := q.at(q.n)
	*w = sendWQE{wr: *wr, sgl: w.sgl[:0], inline: w.inline[:0], wqeProgress: wqeProgress{type1: true, mwKey: old}}
	q.n++
	if qp.state == QPSErr {
		w.state, w.status, w.err = wqeDone, WCWRFlushErr, qp.flushed
		qp.retire()
	}
}

// PostedError is a work request a device model could not turn into a WR (a malformed
// descriptor in the guest's send queue): posted in its place, it completes with Status (and
// moves the QP to ERR) when the requester reaches it, in posting order.
type PostedError struct {
	ID     uint64
	Opcode WROpcode
	Status WCStatus
	Err    error
}

// PostSendError posts a work request that fails: see PostedError. It fails with EINVAL on a QP
// not yet in RTS and ENOMEM when the send queue is full, as PostSend does.
func (qp *QP) PostSendError(e PostedError) error {
	if err := qp.check("post_send", "QP"); err != nil {
		return err
	}
	defer hold(qp.dev, &qp.mu).release()
	switch qp.state {
	case QPSReset, QPSInit, QPSRTR:
		return postError("post_send", 0, 1, e.ID, syscall.EINVAL, fmt.Sprintf("the QP is in %s", qp.state))
	}
	q := &qp.sq
	if q.n == len(q.ring) {
		return postError("post_send", 0, 1, e.ID, syscall.ENOMEM, q.full())
	}
	w := q.at(q.n)
	w.wr = SendWR{ID: e.ID, Opcode: e.Opcode, Flags: SendSignaled}
	w.sgl, w.inline, w.length = w.sgl[:0], w.inline[:0], 0
	w.wqeProgress = wqeProgress{poison: &e}
	q.n++
	if qp.state == QPSErr {
		w.state, w.status, w.err = wqeDone, WCWRFlushErr, qp.flushed
		qp.retire()
		return nil
	}
	qp.kick()
	return nil
}
