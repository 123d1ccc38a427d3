package engine

import (
	"fmt"

	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire/roce"
)

// onResponse handles a packet a responder sent us: an ACK or NAK, a READ response, or an atomic
// acknowledgement.
func (qp *QP) onResponse(f *roce.Frame) {
	d := qp.dev
	if !qp.requesterActive() {
		d.stats.RxDropped++
		return
	}
	psn := f.BTH.PSN()
	switch f.Opcode {
	case roce.RCAcknowledge:
		qp.onAck(psn, f.AETH.Syndrome())
	case roce.RCAtomicAcknowledge:
		if syn := f.AETH.Syndrome(); syn.Type() != roce.SyndromeACK {
			qp.badResponse(psn, f.Opcode, syn)
			return
		}
		qp.onAtomicAck(psn, f.AtomicAckETH.Orig())
	default:
		qp.onReadResponse(f, psn)
	}
}

// onAck handles an AETH: a cumulative ACK, an RNR NAK or a NAK.
func (qp *QP) onAck(psn uint32, syn roce.Syndrome) {
	d := qp.dev
	r := &qp.req
	switch syn.Type() {
	case roce.SyndromeACK:
		if psnCmp(psn, r.sentPSN) >= 0 {
			// An acknowledgement for something never sent: a ghost ACK (IBTA 9.7.5.1.4).
			d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("ghost ACK for psn %d, nothing sent beyond %d", psn, psnAdd(r.sentPSN, psnMask))})
			d.stats.RxDropped++
			return
		}
		qp.ackThrough(psn)
		if qp.requesterActive() {
			qp.heard(psn)
		}
	case roce.SyndromeRNR:
		if r.waitRNR {
			return // a copy of the RNR NAK we are already waiting out
		}
		qp.acknowledge(psnAdd(psn, psnMask), psn) // everything before psn
		if !qp.requesterActive() {
			return
		}
		w := qp.wqeHolding(psn)
		if w == nil {
			return
		}
		if qp.attr.RNRRetry != 7 {
			if r.rnrLeft == 0 {
				d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, WRID: w.wr.ID, Msg: "RNR NAK, rnr_retry exhausted"})
				qp.failWQE(w, WCRNRRetryExcErr, fmt.Errorf("receiver not ready at psn %d after %d RNR retries", psn, qp.attr.RNRRetry))
				return
			}
			r.rnrLeft--
		}
		wait := roce.RNRTimerMicros(syn.Value())
		d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, WRID: w.wr.ID,
			Msg: fmt.Sprintf("RNR NAK: wait %d us and resend from psn %d", wait, psn)})
		r.waitRNR = true
		if r.armed {
			r.timer.Stop()
			r.armed = false
		}
		if r.rnrTimer != nil {
			r.rnrTimer.Stop()
		}
		r.rnrGen++
		gen := r.rnrGen
		r.rnrTimer = d.clock.AfterFunc(microseconds(wait), func() {
			d.mu.Lock()
			defer d.unlock()
			if qp.req.rnrGen != gen || !qp.req.waitRNR {
				return // stopped or replaced while it waited for the lock
			}
			qp.req.rnrTimer = nil
			qp.req.waitRNR = false
			if qp.requesterActive() {
				d.event(Event{QP: qp.qpn, Kind: EvRetry, PSN: psn, Msg: fmt.Sprintf("RNR wait over: resend from psn %d", psn)})
				qp.rewind(psn)
			}
		})
	case roce.SyndromeNAK:
		if syn != roce.NAKPSNSeqError {
			qp.ackThrough(psnAdd(psn, psnMask))
		} else {
			// Everything before psn was executed, so a READ or atomic before it that lacks
			// its responses lost them.
			qp.acknowledge(psnAdd(psn, psnMask), psn)
			if qp.requesterActive() {
				qp.heard(psnAdd(psn, psnMask))
			}
			if !qp.requesterActive() {
				return
			}
		}
		w := qp.wqeHolding(psn)
		if syn == roce.NAKPSNSeqError {
			if w == nil {
				return
			}
			if r.seqRetrying && r.seqRetryPSN == psn {
				return // a copy of the NAK whose retry is already under way
			}
			r.seqRetrying, r.seqRetryPSN = true, psn
			if r.retryLeft == 0 {
				d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Msg: "NAK sequence error, retries exhausted"})
				// The oldest unfinished WR takes the error, as at a timeout (a READ before
				// psn may still lack its response); the ones after it are flushed.
				if o := qp.outstanding(); o != nil {
					w = o
				}
				qp.failWQE(w, WCRetryExcErr, fmt.Errorf("sequence error NAKs at psn %d exhausted %d retries", psn, qp.attr.RetryCnt))
				return
			}
			r.retryLeft--
			d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Msg: fmt.Sprintf("NAK sequence error: resend from psn %d", psn)})
			qp.rewind(psn)
			return
		}
		status := WCRemOpErr
		switch syn {
		case roce.NAKInvalidRequest:
			status = WCRemInvReqErr
		case roce.NAKRemoteAccess:
			status = WCRemAccessErr
		}
		d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Status: status, Msg: fmt.Sprintf("received %s for psn %d", syn, psn)})
		if w == nil {
			return
		}
		qp.failWQE(w, status, fmt.Errorf("the responder answered psn %d with %s", psn, syn))
	default:
		d.stats.RxDropped++
	}
}

// wqeHolding returns the unfinished WQE whose PSN range holds psn.
func (qp *QP) wqeHolding(psn uint32) *sendWQE {
	for i := 0; i < qp.sq.n; i++ {
		w := qp.sq.at(i)
		if w.state == wqeDone || w.isLocal() || !w.started() {
			continue
		}
		if psnCmp(psn, w.firstPSN) >= 0 && psnCmp(psn, w.lastPSN) <= 0 {
			return w
		}
	}
	return nil
}

// ackThrough takes a cumulative acknowledgement of every PSN up to and including psn.
func (qp *QP) ackThrough(psn uint32) { qp.acknowledge(psn, psn) }

// acknowledge takes a cumulative acknowledgement of every PSN up to and including psn. A READ
// or atomic that ends before passed and still lacks responses had them lost: it is asked for
// again by itself, once for each gap (the requests after it are not sent again).
func (qp *QP) acknowledge(psn, passed uint32) {
	r := &qp.req
	progress := false
	if psnCmp(psnAdd(psn, 1), r.ackPSN) > 0 {
		// Forward progress, even while an earlier READ waits for its responses.
		r.ackPSN = psnAdd(psn, 1)
		progress = true
	}
	for i := 0; i < qp.sq.n; i++ {
		w := qp.sq.at(i)
		if w.state == wqeDone || w.isLocal() {
			continue
		}
		if !w.started() || psnCmp(w.firstPSN, psn) > 0 {
			break
		}
		if w.isReadOrAtomic() {
			if want, asked := w.gap(); psnCmp(w.lastPSN, passed) < 0 && w.state == wqeSent && !asked {
				qp.askAgain(w, want, fmt.Sprintf("acknowledgement of psn %d passes %s psn %d without its response", psn, w.wr.Opcode, w.firstPSN))
				if !qp.requesterActive() {
					return
				}
			}
			// What follows it was executed too; it completes when the READ or atomic does.
			continue
		}
		if psnCmp(w.lastPSN, psn) > 0 {
			break // partly acknowledged
		}
		// Acknowledged whole, even while it is being sent again after a rewind (its last
		// packet went out before, or the PSN would be a ghost's).
		w.state, w.status = wqeDone, WCSuccess
		progress = true
	}
	if qp.settleCompPSN() {
		progress = true
	}
	if progress {
		r.seqRetrying = false
		r.retryLeft, r.rnrLeft = qp.attr.RetryCnt, qp.attr.RNRRetry
		qp.retire()
		qp.restartRetransmit()
	}
}

// settleCompPSN moves compPSN up to the oldest PSN still unanswered: the first response an
// unfinished READ lacks, an unfinished atomic, or the first packet of a SEND or WRITE that no
// ACK covers; everything sent when nothing is unfinished. It reports whether compPSN moved.
func (qp *QP) settleCompPSN() bool {
	r := &qp.req
	c := r.sentPSN
	if w := qp.outstanding(); w != nil {
		switch {
		case w.wr.Opcode == WRRDMARead:
			c = psnAdd(w.firstPSN, w.next)
		case !w.isReadOrAtomic() && psnCmp(r.ackPSN, w.firstPSN) > 0:
			c = r.ackPSN // partly acknowledged
		default:
			c = w.firstPSN
		}
	}
	if psnCmp(c, r.compPSN) <= 0 {
		return false
	}
	r.compPSN = c
	return true
}

// gap returns the PSN a READ (its first missing response) or an atomic would be asked for again
// from, and whether it has been asked for from there already.
func (w *sendWQE) gap() (want uint32, asked bool) {
	want = w.firstPSN
	if w.wr.Opcode == WRRDMARead {
		want = psnAdd(w.firstPSN, w.next)
	}
	return want, w.gapAsked && w.gapPSN == want
}

// askAgain sends a READ's request again for the responses it lacks (from want, its first missing
// one, with the address and length moved on), or an atomic's request, at once and without going
// back over the requests after it, as a NIC does. Callers ask once for each gap (see gap): the
// responses still arriving after the gap would each ask again otherwise. If the request or its
// first response is lost too, an answer to a request sent after it shows that (heardSince), or
// else the retransmission timer goes back.
func (qp *QP) askAgain(w *sendWQE, want uint32, why string) {
	w.gapAsked, w.gapPSN = true, want
	d := qp.dev
	d.stats.Retransmits++
	d.event(Event{QP: qp.qpn, Kind: EvRetry, PSN: want, WRID: w.wr.ID, Msg: fmt.Sprintf("%s: resend from %d", why, want)})
	if qp.transmitRequest(w) {
		w.askTx = qp.req.txCount
		qp.armRetransmit()
	}
}

// heard takes note that the responder has received the request packet with PSN psn: an ACK or
// a response answered it (or a later one). That packet went out no earlier than its WQE's first
// request packet; see heardSince.
func (qp *QP) heard(psn uint32) {
	// The WQE holding psn (the last one started at or before it).
	var x *sendWQE
	for i := 0; i < qp.sq.n; i++ {
		w := qp.sq.at(i)
		if w.isLocal() {
			continue
		}
		if !w.started() || psnCmp(w.firstPSN, psn) > 0 {
			break
		}
		x = w
	}
	if x != nil && x.firstTx != 0 {
		qp.heardSince(x.firstTx)
	}
}

// heardSince takes note that the responder has answered a request packet sent as the tx-th or
// later. A READ or atomic asked for again before that, whose gap is still open, lost the request
// that asked or the first response to it: requests reach the responder in the order they are
// sent and answers come back in the order they are made, so that response would have come
// first. It is asked for again at once rather than at the next timeout. (Where the path
// reorders, this can ask once too often, which costs a duplicate and nothing else.)
func (qp *QP) heardSince(tx uint64) {
	for i := 0; i < qp.sq.n; i++ {
		w := qp.sq.at(i)
		if w.state != wqeSent || !w.isReadOrAtomic() || w.askTx >= tx {
			continue
		}
		if want, asked := w.gap(); asked {
			qp.askAgain(w, want, fmt.Sprintf("a request sent after %s psn %d was asked for again has been answered, it has not", w.wr.Opcode, want))
			if !qp.requesterActive() {
				return
			}
		}
	}
}

func (qp *QP) onAtomicAck(psn uint32, orig uint64) {
	d := qp.dev
	w := qp.wqeHolding(psn)
	if w == nil || (w.wr.Opcode != WRAtomicCmpAndSwp && w.wr.Opcode != WRAtomicFetchAndAdd) || w.state != wqeSent {
		d.stats.RxDropped++
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: "atomic acknowledgement for no outstanding atomic"})
		return
	}
	qp.ackThrough(psnAdd(psn, psnMask))
	if w.state == wqeDone || !qp.requesterActive() {
		return // the acknowledgement before it ended the WQE or the QP
	}
	if err := qp.placeAtomicResult(w, orig); err != nil {
		qp.failWQE(w, accessStatus(err), err)
		return
	}
	w.atomicOrig = orig
	w.state, w.status = wqeDone, WCSuccess
	qp.ackThrough(psn)
	qp.retire()
	if qp.requesterActive() {
		qp.heard(psn)
	}
}

func (qp *QP) onReadResponse(f *roce.Frame, psn uint32) {
	d := qp.dev
	w := qp.wqeHolding(psn)
	if w != nil && w.wr.Opcode == WRFlush {
		qp.onFlushResponse(f, psn, w)
		return
	}
	// A READ being asked for again still takes the responses it is missing as they come.
	if w == nil || w.wr.Opcode != WRRDMARead {
		d.stats.RxDropped++
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("%s for no outstanding READ", f.Opcode)})
		return
	}
	r := &qp.req
	if psnCmp(w.firstPSN, r.compPSN) > 0 {
		// A response to this READ says that everything before its request was executed:
		// a READ or atomic before it that still lacks its responses lost them.
		qp.acknowledge(psnAdd(w.firstPSN, psnMask), w.firstPSN)
		if !qp.requesterActive() {
			return
		}
	}
	qp.heard(psn)
	if !qp.requesterActive() {
		return
	}
	want := psnAdd(w.firstPSN, w.next)
	if c := psnCmp(psn, want); c != 0 {
		if c < 0 {
			d.stats.DuplicatesSeen++
			return // a duplicate of a response already placed
		}
		// A response is missing: ask again from the first one we lack.
		if _, asked := w.gap(); w.state == wqeSent && !asked {
			qp.askAgain(w, want, fmt.Sprintf("READ response psn %d arrived, %d expected", psn, want))
		}
		return
	}
	if f.AETH != nil && f.AETH.Syndrome().Type() != roce.SyndromeACK {
		qp.badResponse(psn, f.Opcode, f.AETH.Syndrome())
		return
	}
	mtu := uint64(qp.attr.PathMTU.Bytes())
	off := uint64(w.next) * mtu
	lastPkt := w.next == w.npkts-1
	wantLen := mtu
	if lastPkt {
		wantLen = w.length - off
	}
	cls := f.Info.Class
	okClass := (w.npkts == 1 && cls == roce.Only) || (w.npkts > 1 && ((w.next == 0 && cls == roce.First) ||
		(lastPkt && cls == roce.Last) || (w.next > 0 && !lastPkt && cls == roce.Middle)))
	// A resent READ starts over with FIRST (or ONLY) at the response it resumes from.
	if !okClass && w.next > 0 && (cls == roce.First || cls == roce.Only) {
		okClass = (cls == roce.Only) == lastPkt
	}
	if !okClass || uint64(len(f.Payload)) != wantLen {
		qp.failWQE(w, WCBadRespErr, fmt.Errorf("READ response psn %d: %s with %d bytes, expected response %d of %d with %d",
			psn, f.Opcode, len(f.Payload), w.next+1, w.npkts, wantLen))
		return
	}
	src := f.Payload
	if err := qp.walkSGL(w.sgl, off, wantLen, AccessLocalWrite, func(sp keys.Span) {
		n := sp.CopyFrom(src)
		src = src[n:]
	}); err != nil {
		qp.failWQE(w, accessStatus(err), err)
		return
	}
	// The first response to a request asked again shows when the responder received that
	// request.
	filled, askTx := w.gapAsked && w.gapPSN == psn, w.askTx
	w.next++
	if r.compPSN == psn {
		r.compPSN = psnAdd(psn, 1) // a response acknowledges its PSN
	}
	// Every response in order is forward progress: the retry budget starts again.
	r.retryLeft, r.rnrLeft = qp.attr.RetryCnt, qp.attr.RNRRetry
	if w.next == w.npkts {
		w.state, w.status = wqeDone, WCSuccess
		qp.ackThrough(psn)
		qp.retire()
	}
	qp.restartRetransmit()
	if filled && qp.requesterActive() {
		qp.heardSince(askTx)
	}
}

// onFlushResponse takes the answer to a FLUSH: one RDMA READ RESPONSE ONLY without payload at
// the FLUSH's PSN (IBTA 1.5 memory placement extensions; rxe's responder answers FLUSH through
// its READ reply path, and its completer accepts a READ response for a FLUSH WQE). Anything
// else is BAD_RESP_ERR.
func (qp *QP) onFlushResponse(f *roce.Frame, psn uint32, w *sendWQE) {
	d := qp.dev
	if w.state != wqeSent {
		d.stats.RxDropped++
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("%s for a FLUSH not yet sent again", f.Opcode)})
		return
	}
	if f.AETH != nil && f.AETH.Syndrome().Type() != roce.SyndromeACK {
		qp.badResponse(psn, f.Opcode, f.AETH.Syndrome())
		return
	}
	if f.Info.Class != roce.Only || len(f.Payload) != 0 {
		qp.failWQE(w, WCBadRespErr, fmt.Errorf("FLUSH psn %d answered with %s carrying %d bytes", psn, f.Opcode, len(f.Payload)))
		return
	}
	// Everything before the FLUSH was executed; a READ or atomic before it that lacks its
	// response lost it.
	qp.ackThrough(psnAdd(psn, psnMask))
	if w.state == wqeDone || !qp.requesterActive() {
		return
	}
	w.state, w.status = wqeDone, WCSuccess
	qp.ackThrough(psn)
	qp.retire()
	if qp.requesterActive() {
		qp.heard(psn)
	}
}

// badResponse fails the WQE a READ response or atomic acknowledgement belongs to when its AETH
// is not an ACK: responses carry data, not NAKs, so this is BAD_RESP_ERR.
func (qp *QP) badResponse(psn uint32, op roce.Opcode, syn roce.Syndrome) {
	if w := qp.wqeHolding(psn); w != nil {
		qp.failWQE(w, WCBadRespErr, fmt.Errorf("%s psn %d carries %s", op, psn, syn))
	}
}
