package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire/roce"
)

const (
	psnMask = 1<<24 - 1
	// DefaultSendWindow is how far an RC requester runs ahead of the oldest unacknowledged PSN
	// unless its device is told otherwise (DeviceConfig.SendWindow): rxe's
	// RXE_MAX_UNACKED_PSNS, so that a device paces itself as rxe does.
	DefaultSendWindow = 128
	// MaxSendWindow is the largest window a device takes: 32 MiB in flight at path MTU 1024,
	// and far enough from half the 24-bit PSN space that a message's PSNs still compare.
	MaxSendWindow = 1 << 15
	// maxPktsPerAck is how many packets go without AckReq at most (RXE_MAX_PKT_PER_ACK); a
	// send window under twice that asks every half window, so that an ACK comes back before
	// the window fills.
	maxPktsPerAck = 64
	// requesterBudget is how many packets one requester run sends before it yields, so ACKs
	// and other QPs get their turn.
	requesterBudget = 64
)

func psnAdd(p, n uint32) uint32 { return (p + n) & psnMask }

// psnCmp compares PSNs on the 24-bit circle: negative when a is before b.
func psnCmp(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }

// requester is the send side of an RC QP: it turns WQEs into request packets, keeps the
// retransmission timer, and (as the completer) matches acknowledgements and responses.
type requester struct {
	psn       uint32 // next PSN to send
	sentPSN   uint32 // the PSN after the highest ever sent; a rewind does not lower it
	compPSN   uint32 // oldest PSN not yet acknowledged (by an ACK or a READ response)
	ackPSN    uint32 // the PSN after the latest cumulative ACK
	idx       int    // send-queue position (from head) of the next WQE to work on
	rdAtomic  int    // READs and atomics started and not finished
	noackPkts int
	retryLeft uint8
	rnrLeft   uint8
	waitRNR   bool
	faulted   bool // a page fault holds the send queue until ResumePageFault
	scheduled bool
	// The retransmission timer is made once and reset on every ACK that makes progress.
	timer    Timer
	armed    bool
	rnrTimer Timer
	rnrGen   uint64 // which RNR wait the pending timer belongs to
	deadline time.Duration
	// A sequence NAK for seqRetryPSN has been acted on and nothing has progressed since:
	// copies of it are ignored rather than each costing a retry.
	seqRetrying bool
	seqRetryPSN uint32
	txCount     uint64 // request packets sent, the first being 1: orders requests in time
	run         func() // runs the requester; made once so a kick does not allocate
}

func (r *requester) reset(qp *QP) {
	r.psn = qp.attr.SQPSN
	r.sentPSN = qp.attr.SQPSN
	r.compPSN = qp.attr.SQPSN
	r.ackPSN = qp.attr.SQPSN
	r.idx, r.rdAtomic, r.noackPkts = 0, 0, 0
	r.retryLeft, r.rnrLeft = qp.attr.RetryCnt, qp.attr.RNRRetry
	r.faulted = false
}

func (r *requester) stopTimers() {
	if r.armed {
		r.timer.Stop()
		r.armed = false
	}
	if r.rnrTimer != nil {
		r.rnrTimer.Stop()
		r.rnrTimer = nil
	}
	r.rnrGen++
	r.waitRNR = false
}

// kick schedules a requester run.
func (qp *QP) kick() {
	r := &qp.req
	if r.scheduled || qp.dev.stopped.Load() {
		return
	}
	if r.run == nil {
		r.run = func() {
			defer hold(qp.dev, &qp.mu).releaseOnClock()
			qp.req.scheduled = false
			qp.runRequester()
		}
	}
	r.scheduled = true
	qp.dev.clock.Post(0, r.run)
}

// SendPosted runs the QP's requester now, on the caller's goroutine, over the send work posted
// so far, rather than when the device's clock comes to it: what the transport lets go without
// its peer goes. A datagram's send (UD, UC) completes as its frame is queued, so once it returns
// every such send posted before it has completed, unless something holds the queue (a page
// fault, a fence, a full window). A real NIC has written those completions long before its
// driver's next command reaches the firmware; a device model calls this before a command whose
// answer counts them (a CQ shrunk just after the posts must refuse with the CQEs unpolled, as
// rdma-core's test_resize_cq expects).
func (qp *QP) SendPosted() {
	if qp.check("send_posted", "QP") != nil {
		return
	}
	defer hold(qp.dev, &qp.mu).release()
	r := &qp.req
	for {
		idx, n, psn := r.idx, qp.sq.n, r.psn
		qp.runRequester()
		if r.idx == idx && qp.sq.n == n && r.psn == psn {
			return
		}
	}
}

// SendPostedDatagrams is SendPosted for a QP whose sends complete without their peer (UD, UC),
// and nothing for an RC QP, whose requests wait on it. A device model calls it before a command
// whose answer counts those completions (RESIZE_CQ) and before one that would drop the sends
// unsent (DESTROY_QP): rxe sends within the post, and a NIC long before its firmware sees the
// command. libfabric's rxd posts the ACK of its peer's last message and destroys its QP at once;
// a peer that never sees the ACK resends to a QP that is gone until it gives up, minutes later.
func (qp *QP) SendPostedDatagrams() {
	if qp != nil && qp.typ != QPTypeRC {
		qp.SendPosted()
	}
}

func (qp *QP) runRequester() {
	d := qp.dev
	r := &qp.req
	if d.stopped.Load() || !qp.requesterActive() || r.waitRNR || r.faulted {
		return
	}
	qp.beginPins() // the run's copies share one pin scope
	defer qp.endPins()
	if qp.tr.acked {
		// An RC run's frames are staged and queued together at its end, before the QP's lock
		// is released. Not a datagram's: its send completes as its frame is queued, and a
		// program may Drain as soon as it sees the completion.
		qp.staging = true
		defer qp.putStaged()
	}
	for budget := requesterBudget; r.idx < qp.sq.n; {
		w := qp.sq.at(r.idx)
		if w.state == wqeDone {
			r.idx++
			continue
		}
		if w.poison != nil {
			if qp.state == QPSSQD {
				return
			}
			qp.failWQE(w, w.poison.Status, w.poison.Err)
			return
		}
		if w.isLocal() {
			if qp.state == QPSSQD {
				return
			}
			// LOCAL_INV waits for every earlier WQE to finish (rxe's local invalidate fence,
			// IBA 10.6.5.1); so does any local operation that asks for a fence.
			if (w.wr.Opcode == WRLocalInv || w.wr.Flags&SendFence != 0) && r.idx > 0 {
				return
			}
			qp.execLocal(w)
			r.idx++
			qp.retire()
			if qp.state == QPSErr {
				return
			}
			continue
		}
		if w.state == wqePosted && w.next == 0 && !w.started() {
			if qp.state == QPSSQD {
				return // draining: what was started finishes, nothing new starts
			}
			if w.wr.Flags&SendFence != 0 && r.rdAtomic > 0 {
				return
			}
			if w.usesRdAtomic() && r.rdAtomic >= int(qp.attr.MaxRdAtomic) {
				return
			}
			if err := qp.checkLocalSGL(w); err != nil {
				if !qp.holdForFault(err) {
					qp.failWQE(w, accessStatus(err), err)
				}
				return
			}
			qp.start(w)
			if qp.tr.single && w.npkts > 1 {
				// A datagram longer than the path MTU: no packet, and success (C10-93.1.1).
				r.psn, r.sentPSN = psnAdd(w.firstPSN, 1), psnAdd(w.firstPSN, 1)
				w.state = wqeSent
				r.idx++
				qp.sentUnacked(w)
				if qp.state == QPSErr {
					return
				}
				continue
			}
		}
		if psnCmp(r.psn, psnAdd(r.compPSN, qp.dev.window)) >= 0 {
			return
		}
		if budget == 0 {
			qp.kick()
			return
		}
		budget--
		if !qp.sendRequestPacket(w) {
			return
		}
	}
}

func (w *sendWQE) started() bool { return w.state != wqePosted || w.npkts != 0 }

// start gives a WQE its PSNs.
func (qp *QP) start(w *sendWQE) {
	r := &qp.req
	mtu := uint64(qp.attr.PathMTU.Bytes())
	// A new request follows everything ever sent. After a rewind r.psn can lag behind that,
	// when the requests that were being resent finished before their turn came.
	r.psn = r.sentPSN
	w.firstPSN = r.psn
	w.npkts = 1
	switch w.wr.Opcode {
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRAtomicWrite, WRFlush:
	default:
		if w.length > mtu {
			w.npkts = uint32((w.length + mtu - 1) / mtu)
		}
	}
	w.lastPSN = psnAdd(w.firstPSN, w.npkts-1)
	w.next = 0
	w.firstTx = 0
	if w.usesRdAtomic() {
		r.rdAtomic++
		w.counted = true
	}
}

// checkLocalSGL checks every SGE of a WQE before its first packet, so a bad lkey fails the
// request before anything reaches the wire: LOC_PROT_ERR (IBTA; rxe says LOC_QP_OP_ERR, K13).
func (qp *QP) checkLocalSGL(w *sendWQE) error {
	if w.wr.Flags&SendInline != 0 {
		return nil
	}
	var rights Access
	if w.isReadOrAtomic() {
		rights = AccessLocalWrite
	} else if w.length <= uint64(qp.attr.PathMTU.Bytes()) {
		// A message of one packet gathers its whole list for that packet, before anything is
		// sent, with the same checks: checking it here too would look every lkey up twice.
		return nil
	}
	for _, s := range w.sgl {
		// Pages a SEND or WRITE lacks fault as its packets gather them; those a READ's
		// responses or an atomic's result will land in must be there before it is sent.
		if err := qp.localAllowed(s, rights); err != nil && (rights != 0 || pageFault(err) == nil) {
			return err
		}
	}
	return nil
}

// sendRequestPacket sends the WQE's next request packet and reports whether it did.
func (qp *QP) sendRequestPacket(w *sendWQE) bool {
	r := &qp.req
	if !qp.transmitRequest(w) {
		return false
	}
	psn := psnAdd(w.firstPSN, w.next)
	end := psnAdd(psn, 1)
	if w.wr.Opcode == WRRDMARead {
		end = psnAdd(w.lastPSN, 1)
	}
	if psnCmp(end, r.sentPSN) > 0 {
		r.sentPSN = end
	}
	if w.isReadOrAtomic() {
		// A READ that was sent again resumes at the first response it is missing; its
		// next counts the responses received, which the completer advances.
		if w.wr.Opcode != WRRDMARead {
			w.next = w.npkts
		}
		w.state = wqeSent
		r.psn = psnAdd(w.lastPSN, 1)
		r.idx++
	} else {
		w.next++
		w.state = wqeSending
		r.psn = psnAdd(w.firstPSN, w.next)
		if w.next == w.npkts {
			w.state = wqeSent
			r.idx++
		}
	}
	if !qp.tr.acked {
		if w.state == wqeSent {
			qp.sentUnacked(w)
		}
		return true
	}
	qp.armRetransmit()
	return true
}

// sentUnacked completes a message of a transport without acknowledgements once its last packet
// has left: nothing will tell whether it arrived (UC, UD).
func (qp *QP) sentUnacked(w *sendWQE) {
	w.state, w.status = wqeDone, WCSuccess
	qp.req.compPSN = qp.req.sentPSN
	qp.retire()
}

// transmitRequest builds and sends the WQE's request packet at w.next (a READ's request asks for
// the responses from its next on; an atomic's is its only packet), and reports whether it did:
// a failure fails the WQE.
func (qp *QP) transmitRequest(w *sendWQE) bool {
	r := &qp.req
	var h roce.Header
	off, payload := qp.requestHeader(w, &h)
	if h.AckReq {
		r.noackPkts = 0
	}
	// A connected QP's packets go to its one peer on the path set at RTR; a datagram's go where
	// the transport says (written out for the first: it is every RC packet).
	rt := route{b: &qp.builder, local: qp.local}
	if qp.tr.connected {
		h.DestQP = qp.attr.DestQPN
	} else {
		h, rt = qp.tr.header(qp, w, h)
	}
	frame, slot, err := rt.b.Begin(qp.dev.txBuffer(), &h, int(payload))
	if err != nil {
		qp.failWQE(w, WCLocQPOpErr, fmt.Errorf("building %s: %w", h.Opcode, err))
		return false
	}
	if payload > 0 {
		if err := qp.gather(w, off, slot); err != nil {
			qp.dev.dropBuffer(frame)
			if !qp.holdForFault(qp.wholeFault(w, off, err)) {
				qp.failWQE(w, accessStatus(err), err)
			}
			return false
		}
	}
	qp.transmit(frame, h.Opcode, h.PSN, rt.local, qp.sealFor(rt.b, frame, rt.local))
	r.txCount++
	if w.firstTx == 0 {
		w.firstTx = r.txCount
	}
	return true
}

// requestHeader writes into h, which is zero, the header of the WQE's request packet at w.next,
// and returns the offset in the message of the payload it carries and that payload's length.
// h is the caller's rather than a result: returning the 88-byte header cost a copy per packet.
func (qp *QP) requestHeader(w *sendWQE, h *roce.Header) (off, payload uint64) {
	r := &qp.req
	mtu := uint64(qp.attr.PathMTU.Bytes())
	h.PSN = psnAdd(w.firstPSN, w.next)
	last := w.next == w.npkts-1
	switch w.wr.Opcode {
	case WRRDMARead:
		off = uint64(w.next) * mtu
		h.Opcode, h.VA, h.RKey, h.DMALen = roce.RCReadRequest, w.wr.RemoteAddr+off, w.wr.RKey, uint32(w.length-off)
		h.AckReq = true
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		h.PSN = w.firstPSN
		h.Opcode = roce.RCFetchAdd
		if w.wr.Opcode == WRAtomicCmpAndSwp {
			h.Opcode = roce.RCCompareSwap
			h.SwapAdd, h.Compare = w.wr.Swap, w.wr.CompareAdd
		} else {
			h.SwapAdd = w.wr.CompareAdd
		}
		h.VA, h.RKey, h.AckReq = w.wr.RemoteAddr, w.wr.RKey, true
	case WRFlush:
		// FETH (selectivity level in bits 5:4, placement type in 3:0) and a RETH naming the
		// range; rxe sends the RETH whatever the level.
		h.PSN = w.firstPSN
		h.Opcode = roce.RCFlush
		h.FETH = uint32(w.wr.Flush.Level)<<4 | uint32(w.wr.Flush.Type)
		h.VA, h.RKey, h.DMALen, h.AckReq = w.wr.RemoteAddr, w.wr.RKey, w.wr.Flush.Length, true
	case WRAtomicWrite:
		// A RETH of length 8 and the 8 bytes as payload; answered by an ACK.
		h.Opcode = roce.RCAtomicWrite
		h.VA, h.RKey, h.DMALen, h.AckReq = w.wr.RemoteAddr, w.wr.RKey, 8, true
		payload = 8
	default:
		off = uint64(w.next) * mtu
		payload = min(mtu, w.length-off)
		h.Opcode = requestOpcode(qp.tr.wire, w.wr.Opcode, w.next == 0, last)
		if h.Opcode.Has(roce.ExtRETH) {
			h.VA, h.RKey, h.DMALen = w.wr.RemoteAddr, w.wr.RKey, uint32(w.length)
		}
		if last {
			h.Imm, h.InvRKey = w.wr.Imm, w.wr.Imm
			h.SE = w.wr.Flags&SendSolicited != 0 && w.wr.Opcode != WRRDMAWrite
		}
		if qp.tr.acked {
			r.noackPkts++
			h.AckReq = last || r.noackPkts >= int(qp.dev.ackEvery)
		}
	}
	return off, payload
}

// gather copies the WQE's bytes [off, off+len(dst)) into dst, from its inline copy or through
// its SGEs (looked up again, so an MR deregistered meanwhile is caught).
func (qp *QP) gather(w *sendWQE, off uint64, dst []byte) error {
	if w.wr.Flags&SendInline != 0 {
		copy(dst, w.inline[off:])
		return nil
	}
	return qp.gatherSGL(w.sgl, off, dst)
}

// sealFor seals a frame b built unless the device's link seals the engine's frames itself
// (UnsealedLink) and the frame goes to it, and reports whether it did.
func (qp *QP) sealFor(b *roce.Builder, frame []byte, local bool) bool {
	if !local && qp.dev.att.Load().unsealer != nil {
		return false
	}
	b.Seal(frame)
	return true
}

// transmit queues a frame for the link; it goes out when the engine's locks are released. It
// reports whether the frame left, for the counters of what went on the roce. sealed false: its
// ICRC is left to the link (sealFor).
func (qp *QP) transmit(frame []byte, op roce.Opcode, psn uint32, local, sealed bool) bool {
	d := qp.dev
	if d.stopped.Load() || d.portDown.Load() || d.att.Load().link == nil {
		d.dropBuffer(frame)
		return false
	}
	if local {
		d.stats.Loopback.Add(1)
		if d.tracing() {
			d.event(Event{Kind: EvSend, Msg: fmt.Sprintf("loopback frame of %d bytes", len(frame))})
		}
	}
	if d.att.Load().lender == nil && d.tracing() {
		// A link that lends buffers is the fabric, which traces what enters the wire itself.
		d.event(Event{QP: qp.qpn, Kind: EvSend, PSN: psn, Msg: fmt.Sprintf("%s psn %d", op, psn)})
	}
	if qp.staging {
		qp.staged = append(qp.staged, d.sentFrame(frame, local, sealed))
		return true
	}
	d.send(frame, local, sealed)
	return true
}

// putStaged ends a requester run's staging: its frames go into the outbox in one hold of its
// lock rather than one each.
func (qp *QP) putStaged() {
	qp.staging = false
	if len(qp.staged) > 0 {
		qp.dev.out.putSent(qp.staged...)
		clear(qp.staged)
		qp.staged = qp.staged[:0]
	}
}

// execLocal runs a local operation in send-queue order: LOCAL_INV, BIND_MW or REG_MR.
func (qp *QP) execLocal(w *sendWQE) {
	d := qp.dev
	w.state, w.status = wqeDone, WCSuccess
	var err error
	switch w.wr.Opcode {
	case WRLocalInv:
		err = qp.localInvalidate(w)
	case WRBindMW:
		err = qp.bindWindow(w)
	case WRRegMR:
		err = qp.fastRegister(w)
	}
	if err != nil {
		var ae *keys.AccessError
		status := WCLocQPOpErr
		if errors.As(err, &ae) {
			status = WCStatus(ae.Status)
		}
		d.event(Event{QP: qp.qpn, Kind: EvAccess, WRID: w.wr.ID, Status: status, Err: err, Msg: w.wr.Opcode.String() + " failed"})
		w.status, w.err = status, err
		qp.toErrorAfter(w)
	}
}

// localInvalidate runs a LOCAL_INV.
func (qp *QP) localInvalidate(w *sendWQE) error {
	d := qp.dev
	d.tab.Lock()
	reached := d.keyMRLocked(keys.Key(w.wr.Imm))
	err := d.keys.Invalidate(keys.Invalidate{Key: keys.Key(w.wr.Imm), QP: keys.QPN(qp.qpn), At: d.clock.Now()})
	d.tab.Unlock()
	if err == nil {
		qp.drainMR(reached)
	}
	if err == nil && d.tracing() {
		d.event(Event{QP: qp.qpn, Kind: EvKey, Key: w.wr.Imm, WRID: w.wr.ID, Msg: "LOCAL_INV invalidated " + keys.Key(w.wr.Imm).String()})
	}
	return err
}

// bindWindow runs a bind, of either type.
func (qp *QP) bindWindow(w *sendWQE) error {
	d := qp.dev
	b := w.wr.Bind
	kb := keys.Bind{MW: keys.Key(w.mwKey), Key8: uint8(b.RKey), QP: keys.QPN(qp.qpn), PD: qp.pd.handle,
		Addr: b.Addr, Len: b.Length, Access: b.Access, At: d.clock.Now()}
	d.tab.Lock()
	if b.MR != nil {
		kb.MR = b.MR.key
	}
	was := d.keyMRLocked(kb.MW) // the memory the window reached before; a bind moves it away
	res, err := d.keys.BindMW(kb)
	// Run or failed, the bind leaves the key to the key space: after a type 2 bind the handle
	// reads the new rkey as irdma writes it back (rxe does not: rdma-core #1777), after a failed
	// type 1 bind the rkey it had.
	w.settleBindLocked()
	d.tab.Unlock()
	if err != nil {
		return err
	}
	qp.drainMR(was)
	if d.tracing() {
		d.event(Event{QP: qp.qpn, Kind: EvKey, Key: uint32(res.Key), WRID: w.wr.ID,
			Msg: fmt.Sprintf("bind %s %s -> %s [0x%x, +%d) %s", b.MW.typ, kb.MW, res.Key, b.Addr, b.Length, b.Access)})
	}
	if res.SameKey8 {
		d.event(Event{QP: qp.qpn, Kind: EvWarning, Key: uint32(res.Key), WRID: w.wr.ID,
			Msg: "type 2 bind reused the window's previous key8: the rkey that was invalidated works again"})
	}
	return nil
}

// fastRegister runs a REG_MR. A guest's page list is read first, with no lock but the QP's; it
// is resolved and registered in one hold of the tables lock, so a RevokeRange comes before
// (and the unmapped pages fail here) or after (and finds the MR).
func (qp *QP) fastRegister(w *sendWQE) error {
	g := w.wr.Reg
	var pages PageList
	if g.Guest != nil {
		pages = g.Guest.Pages
		if g.Guest.Read != nil {
			var err error
			if pages, err = g.Guest.Read(); err != nil {
				return err
			}
		}
	}
	if err := qp.fastRegisterLocked(w, pages); err != nil {
		return err
	}
	qp.drainMR(g.MR) // a copy through the MR's previous memory is done before the REG_MR completes
	return nil
}

// fastRegisterLocked resolves a REG_MR's pages and registers them, in one hold of the tables
// lock.
func (qp *QP) fastRegisterLocked(w *sendWQE, pages PageList) error {
	d, g := qp.dev, w.wr.Reg
	d.tab.Lock()
	defer d.tab.Unlock()
	mem, guest := keys.Contiguous(g.Buf), (*guestMapping)(nil)
	if g.Guest != nil {
		var err error
		if mem, guest, err = guestMemory(g.Guest.Space, &pages); err != nil {
			return err
		}
	}
	if err := d.keys.FastReg(keys.FastReg{Key: keys.Key(g.Key), PD: qp.pd.handle, Mem: mem, IOVA: g.IOVA, Access: g.Access, At: d.clock.Now()}); err != nil {
		return err
	}
	g.MR.key, g.MR.addr, g.MR.length, g.MR.buf, g.MR.guest = keys.Key(g.Key), g.IOVA, mem.Len(), g.Buf, guest
	return nil
}

// failWQE completes a WQE with an error and moves the QP to ERR.
func (qp *QP) failWQE(w *sendWQE, status WCStatus, err error) {
	w.state, w.status, w.err = wqeDone, status, err
	qp.dev.event(Event{QP: qp.qpn, Kind: EvAccess, WRID: w.wr.ID, Status: status, Err: err, Msg: w.wr.Opcode.String() + " failed"})
	qp.toErrorAfter(w)
}

// toErrorAfter completes the failed WQE in its place, after what finished before it, and moves
// the QP to ERR: sendQueue.flush then flushes everything after it, finished or not.
func (qp *QP) toErrorAfter(w *sendWQE) {
	for qp.sq.n > 0 && qp.sq.at(0).state == wqeDone {
		x := qp.sq.at(0)
		qp.retireHead()
		if x == w {
			break
		}
	}
	qp.kickIfWaiting()
	qp.toError(fmt.Sprintf("wr 0x%x %s completed with %s", w.wr.ID, w.wr.Opcode, w.status))
}

// retire completes finished WQEs at the head of the send queue, in order.
func (qp *QP) retire() {
	for qp.sq.n > 0 && qp.sq.at(0).state == wqeDone {
		qp.retireHead()
	}
	qp.kickIfWaiting()
	qp.checkDrained()
}

func (qp *QP) retireHead() {
	q := &qp.sq
	w := q.at(0)
	if w.counted {
		qp.req.rdAtomic--
	}
	w.settleBind() // a type 1 bind flushed without running
	signalled := w.status != WCSuccess || qp.sigAll || w.wr.Flags&SendSignaled != 0
	wc := WC{WRID: w.wr.ID, Status: w.status, Opcode: wcOpcodeOf(w.wr.Opcode), ByteLen: uint32(w.length), Err: w.err}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	if qp.req.idx > 0 {
		qp.req.idx--
	}
	// The slot is free before its completion is seen, as rxe advances the send queue's
	// consumer before it posts the CQE: whoever polls the completion may post at once.
	if qp.onRetire != nil {
		qp.onRetire(1)
	}
	if signalled {
		qp.complete(qp.sendCQ, wc)
	}
}

// OnRetire sets a function told each time a send WQE is retired (completed, signalled or not,
// or flushed), in posting order and before its completion is pushed: a device model advances
// the guest send queue's consumer index, as rxe's user ABI asks (only retired WQEs free their
// slots), before the CQE that shows the WQE done. Like a CQ's sink it runs with the QP locked
// and must not call into the device.
func (qp *QP) OnRetire(f func(n int)) {
	defer hold(qp.dev, &qp.mu).release()
	qp.onRetire = f
}

// requesterActive says whether the QP sends requests and takes their answers: in RTS, and in
// SQD while it drains.
func (qp *QP) requesterActive() bool { return qp.state == QPSRTS || qp.state == QPSSQD }

func (qp *QP) kickIfWaiting() {
	if qp.req.idx < qp.sq.n {
		qp.kick()
	}
}

func wcOpcodeOf(op WROpcode) WCOpcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	case WRBindMW:
		return WCBindMW
	case WRLocalInv:
		return WCLocalInv
	case WRRegMR:
		return WCRegMR
	case WRFlush:
		return WCFlush
	case WRAtomicWrite:
		return WCAtomicWrite
	}
	return WCSend
}

// ackTimeout is the local ACK timeout: 4.096 us x 2^timeout, none for 0.
func (qp *QP) ackTimeout() time.Duration {
	t := qp.attr.Timeout
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<t) * time.Nanosecond
}

// armRetransmit starts the retransmission timer unless it runs already. It does not run while
// the requester waits out an RNR NAK: the responder has answered, nothing may be sent before
// the RNR timer ends, and that starts it again (a READ response arriving meanwhile used to
// start it, and a long RNR wait then ended in RETRY_EXC_ERR).
func (qp *QP) armRetransmit() {
	r := &qp.req
	if r.armed || r.waitRNR {
		return
	}
	to := qp.ackTimeout()
	if to == 0 {
		return
	}
	if r.timer == nil {
		r.timer = qp.dev.clock.NewTimer(func() {
			defer hold(qp.dev, &qp.mu).releaseOnClock()
			// The deadline moves on with every ACK while the timer stays where it was set
			// (see restartRetransmit), so the timer may fire early: it then sets itself for
			// the rest. On the wall clock a callback can also be waiting for the lock while
			// the timer is stopped and set again; it too acts only once the deadline has come.
			r := &qp.req
			if !r.armed {
				return
			}
			if now := qp.dev.clock.Now(); now < r.deadline {
				r.timer.Reset(r.deadline - now)
				return
			}
			r.armed = false
			if r.faulted {
				return // a fault's hold stopped the timer while this run waited; see holdForFault
			}
			qp.onTimeout()
		})
	}
	r.armed = true
	r.deadline = qp.dev.clock.Now() + to
	r.timer.Reset(to)
}

// restartRetransmit starts the timer over, or stops it when nothing is outstanding. Starting
// over moves only the deadline, not the timer: an ACK arrives for every few packets, and
// rescheduling the timer each time was a clock update per ACK; the timer, when it fires
// before the deadline, sets itself again for the rest, so the timeout comes when it always did.
func (qp *QP) restartRetransmit() {
	r := &qp.req
	if qp.outstanding() == nil {
		if r.armed {
			r.timer.Stop()
			r.armed = false
		}
		return
	}
	if r.armed {
		r.deadline = qp.dev.clock.Now() + qp.ackTimeout()
		return
	}
	qp.armRetransmit()
}

// outstanding returns the oldest WQE that has packets on the wire awaiting an answer.
func (qp *QP) outstanding() *sendWQE {
	for i := 0; i < qp.sq.n; i++ {
		w := qp.sq.at(i)
		if w.state == wqeDone || w.isLocal() {
			continue
		}
		if w.state == wqePosted && !w.started() {
			return nil
		}
		return w
	}
	return nil
}

func (qp *QP) onTimeout() {
	d := qp.dev
	if d.stopped.Load() || !qp.requesterActive() {
		return
	}
	w := qp.outstanding()
	if w == nil {
		return
	}
	d.stats.Timeouts.Add(1)
	r := &qp.req
	if r.retryLeft == 0 {
		d.event(Event{QP: qp.qpn, Kind: EvRetry, PSN: r.compPSN, WRID: w.wr.ID,
			Msg: fmt.Sprintf("local ACK timeout (%v) at psn %d, retries exhausted", qp.ackTimeout(), r.compPSN)})
		qp.failWQE(w, WCRetryExcErr, fmt.Errorf("no acknowledgement for psn %d after %d retries of %v", r.compPSN, qp.attr.RetryCnt, qp.ackTimeout()))
		return
	}
	r.retryLeft--
	d.event(Event{QP: qp.qpn, Kind: EvRetry, PSN: r.compPSN, WRID: w.wr.ID,
		Msg: fmt.Sprintf("local ACK timeout (%v): resend from psn %d, %d retries left", qp.ackTimeout(), r.compPSN, r.retryLeft)})
	qp.rewind(r.compPSN)
}

// rewind goes back to resend from psn (go-back-N): every WQE from the one holding psn on is
// sent again, the first from the packet (or, for a READ, the response) where psn falls. What
// ends before psn is not: the responder has executed it (a READ or atomic before psn still
// missing its responses is asked for by itself, see askAgain).
func (qp *QP) rewind(psn uint32) {
	r := &qp.req
	first := -1
	for i := 0; i < qp.sq.n; i++ {
		w := qp.sq.at(i)
		if w.state == wqeDone || w.isLocal() {
			continue
		}
		if !w.started() {
			break
		}
		if first < 0 && psnCmp(w.lastPSN, psn) < 0 {
			continue
		}
		if w.isReadOrAtomic() {
			w.gapAsked = false // a gap in what is sent again is asked for again
		}
		switch {
		case w.wr.Opcode == WRRDMARead:
			// next already counts the responses received.
		case w.isReadOrAtomic():
			w.next = 0
		case first < 0 && psnCmp(psn, w.firstPSN) > 0 && psnCmp(psn, w.lastPSN) <= 0:
			w.next = uint32(psnCmp(psn, w.firstPSN)) // resume inside the message
		default:
			w.next = 0
		}
		if first < 0 {
			first = i
		}
		w.state = wqeSending
		if w.isReadOrAtomic() {
			w.state = wqePosted
		}
	}
	if first >= 0 {
		w := qp.sq.at(first)
		r.idx = first
		r.psn = psnAdd(w.firstPSN, w.next)
		qp.dev.stats.Retransmits.Add(1)
	}
	qp.restartRetransmit()
	qp.kick()
}

// placeAtomicResult stores an atomic's original value into the WQE's 8-byte SGE, as a native
// (little-endian) word.
func (qp *QP) placeAtomicResult(w *sendWQE, orig uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], orig)
	return qp.scatterSGL(w.sgl, 0, b[:])
}
