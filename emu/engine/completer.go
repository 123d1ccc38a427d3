package engine

import (
	"fmt"

	"github.com/softirdma/softirdma/internal/names"
	"github.com/softirdma/softirdma/wire/roce"
)

// The completer matches what a responder sends back (ACKs and NAKs, atomic acknowledgements,
// READ responses) to the send queue, in named steps as rxe's completer runs them (rxe_comp.c's
// comp_state), each returning the next:
//
//	GET_ACK       the requester must be active; the packet is sorted by opcode and AETH
//	ACK           a cumulative ACK; a ghost, beyond anything sent, is dropped (IBTA 9.7.5.1.4)
//	RNR_RETRY     an RNR NAK: the wait it names, then a resend from its PSN, while rnr_retry lasts
//	SEQ_RETRY     a sequence NAK: a resend from its PSN, while retry_cnt lasts
//	REMOTE_ERROR  any other NAK: the WQE it names fails with the NAK's status
//	ATOMIC        an atomic acknowledgement: the original value placed, the atomic complete
//	READ          a READ response: placed in order, the READ complete at its last
//	FLUSH         a FLUSH's empty READ response
//	BAD_RESPONSE  a READ response or atomic acknowledgement whose AETH is no ACK: BAD_RESP_ERR
type compState uint8

const (
	compGetAck compState = iota
	compAck
	compRNRRetry
	compSeqRetry
	compRemoteError
	compAtomic
	compRead
	compFlush
	compBadResponse
	compDone
)

var compStateNames = [...]string{"GET_ACK", "ACK", "RNR_RETRY", "SEQ_RETRY", "REMOTE_ERROR", "ATOMIC", "READ",
	"FLUSH", "BAD_RESPONSE", "DONE"}

func (s compState) String() string { return names.In(compStateNames[:], s, "state %d") }

// completerSteps is the completer: each state's step, which returns the state to go on to. The
// packet going through them is the QP's (QP.comp), not an argument: through these indirect calls
// a pointer argument would put every response on the heap.
var completerSteps = [compDone]func(qp *QP) compState{
	compGetAck:      (*QP).compGetAck,
	compAck:         (*QP).compAck,
	compRNRRetry:    (*QP).compRNRRetry,
	compSeqRetry:    (*QP).compSeqRetry,
	compRemoteError: (*QP).compRemoteError,
	compAtomic:      (*QP).compAtomic,
	compRead:        (*QP).compRead,
	compFlush:       (*QP).compFlush,
	compBadResponse: (*QP).compBadResponse,
}

// response is the packet going through the completer's steps.
type response struct {
	f   *roce.Frame
	psn uint32
	syn roce.Syndrome // the AETH's, when there is one
	w   *sendWQE      // the FLUSH a READ response answers (GET_ACK)
}

// onResponse takes a packet a responder sent through the completer's steps.
func (qp *QP) onResponse(f *roce.Frame) {
	qp.comp = response{f: f, psn: f.BTH.PSN()}
	if f.AETH != nil {
		qp.comp.syn = f.AETH.Syndrome()
	}
	for st := compGetAck; st != compDone; {
		st = completerSteps[st](qp)
	}
	qp.comp.f = nil // the frame is the receive buffer's, reused after this
}

// compGetAck sorts a response by its opcode and AETH.
func (qp *QP) compGetAck() compState {
	a := &qp.comp
	if !qp.requesterActive() {
		qp.dev.stats.RxDropped.Add(1)
		return compDone
	}
	switch a.f.Opcode {
	case roce.RCAcknowledge:
		switch a.syn.Type() {
		case roce.SyndromeACK:
			return compAck
		case roce.SyndromeRNR:
			return compRNRRetry
		case roce.SyndromeNAK:
			if a.syn == roce.NAKPSNSeqError {
				return compSeqRetry
			}
			return compRemoteError
		}
		qp.dev.stats.RxDropped.Add(1) // the reserved syndrome
		return compDone
	case roce.RCAtomicAcknowledge:
		if a.syn.Type() != roce.SyndromeACK {
			return compBadResponse
		}
		return compAtomic
	}
	if w := qp.wqeHolding(a.psn); w != nil && w.wr.Opcode == WRFlush {
		a.w = w
		return compFlush
	}
	return compRead
}

// compAck takes a cumulative ACK.
func (qp *QP) compAck() compState {
	a := &qp.comp
	d, r, psn := qp.dev, &qp.req, a.psn
	if psnCmp(psn, r.sentPSN) >= 0 {
		// An acknowledgement for something never sent: a ghost ACK (IBTA 9.7.5.1.4).
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("ghost ACK for psn %d, nothing sent beyond %d", psn, psnAdd(r.sentPSN, psnMask))})
		d.stats.RxDropped.Add(1)
		return compDone
	}
	qp.ackThrough(psn)
	if qp.requesterActive() {
		qp.heard(psn)
	}
	return compDone
}

// compRNRRetry takes an RNR NAK: everything before its PSN was executed; the WQE holding it is
// sent again from there once the timer the NAK names runs out, while rnr_retry lasts.
func (qp *QP) compRNRRetry() compState {
	a := &qp.comp
	d, r, psn := qp.dev, &qp.req, a.psn
	if r.waitRNR {
		return compDone // a copy of the RNR NAK we are already waiting out
	}
	qp.acknowledge(psnAdd(psn, psnMask), psn) // everything before psn
	if !qp.requesterActive() {
		return compDone
	}
	w := qp.wqeHolding(psn)
	if w == nil {
		return compDone
	}
	if qp.attr.RNRRetry != 7 {
		if r.rnrLeft == 0 {
			d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, WRID: w.wr.ID, Msg: "RNR NAK, rnr_retry exhausted"})
			qp.failWQE(w, WCRNRRetryExcErr, fmt.Errorf("receiver not ready at psn %d after %d RNR retries", psn, qp.attr.RNRRetry))
			return compDone
		}
		r.rnrLeft--
	}
	wait := roce.RNRTimerMicros(a.syn.Value())
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
		defer hold(d, &qp.mu).releaseOnClock()
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
	return compDone
}

// compSeqRetry takes a sequence NAK: everything before its PSN was executed, so a READ or
// atomic before it that lacks its responses lost them; the rest is sent again from the PSN.
func (qp *QP) compSeqRetry() compState {
	a := &qp.comp
	d, r, psn := qp.dev, &qp.req, a.psn
	qp.acknowledge(psnAdd(psn, psnMask), psn)
	if qp.requesterActive() {
		qp.heard(psnAdd(psn, psnMask))
	}
	if !qp.requesterActive() {
		return compDone
	}
	w := qp.wqeHolding(psn)
	if w == nil {
		return compDone
	}
	if r.seqRetrying && r.seqRetryPSN == psn {
		return compDone // a copy of the NAK whose retry is already under way
	}
	r.seqRetrying, r.seqRetryPSN = true, psn
	if r.retryLeft == 0 {
		d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Msg: "NAK sequence error, retries exhausted"})
		// The oldest unfinished WR takes the error, as at a timeout (a READ before psn may
		// still lack its response); the ones after it are flushed.
		if o := qp.outstanding(); o != nil {
			w = o
		}
		qp.failWQE(w, WCRetryExcErr, fmt.Errorf("sequence error NAKs at psn %d exhausted %d retries", psn, qp.attr.RetryCnt))
		return compDone
	}
	r.retryLeft--
	d.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Msg: fmt.Sprintf("NAK sequence error: resend from psn %d", psn)})
	qp.rewind(psn)
	return compDone
}

// compRemoteError takes a NAK other than a sequence error: everything before its PSN was
// executed, and the WQE holding the PSN fails with the NAK's status.
func (qp *QP) compRemoteError() compState {
	a := &qp.comp
	psn, syn := a.psn, a.syn
	qp.ackThrough(psnAdd(psn, psnMask))
	w := qp.wqeHolding(psn)
	status := WCRemOpErr
	switch syn {
	case roce.NAKInvalidRequest:
		status = WCRemInvReqErr
	case roce.NAKRemoteAccess:
		status = WCRemAccessErr
	}
	qp.dev.event(Event{QP: qp.qpn, Kind: EvNAK, PSN: psn, Status: status, Msg: fmt.Sprintf("received %s for psn %d", syn, psn)})
	if w != nil {
		qp.failWQE(w, status, fmt.Errorf("the responder answered psn %d with %s", psn, syn))
	}
	return compDone
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
	d.stats.Retransmits.Add(1)
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

// compAtomic takes an atomic acknowledgement: the original value goes to the WQE's buffer.
func (qp *QP) compAtomic() compState {
	a := &qp.comp
	d, psn, orig := qp.dev, a.psn, a.f.AtomicAckETH.Orig()
	w := qp.wqeHolding(psn)
	if w == nil || (w.wr.Opcode != WRAtomicCmpAndSwp && w.wr.Opcode != WRAtomicFetchAndAdd) || w.state != wqeSent {
		d.stats.RxDropped.Add(1)
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: "atomic acknowledgement for no outstanding atomic"})
		return compDone
	}
	if !qp.ackBefore(w, psn) {
		return compDone
	}
	if err := qp.placeAtomicResult(w, orig); err != nil {
		if pf := pageFault(err); pf != nil {
			// Its result's page went since it was sent: the answer is dropped, the atomic
			// sent again when the retransmit timer fires, and answered from the responder's
			// saved result.
			qp.raiseFault(pf, false)
			return compDone
		}
		qp.failWQE(w, accessStatus(err), err)
		return compDone
	}
	w.atomicOrig = orig
	qp.answered(w, psn)
	return compDone
}

// ackBefore takes the answer at psn to w as the acknowledgement of everything before it, and
// reports whether w is still to be completed: that acknowledgement may have ended w or the QP.
func (qp *QP) ackBefore(w *sendWQE, psn uint32) bool {
	qp.ackThrough(psnAdd(psn, psnMask))
	return w.state != wqeDone && qp.requesterActive()
}

// answered completes w successfully with its answer at psn.
func (qp *QP) answered(w *sendWQE, psn uint32) {
	w.state, w.status = wqeDone, WCSuccess
	qp.ackThrough(psn)
	qp.retire()
	if qp.requesterActive() {
		qp.heard(psn)
	}
}

// compRead takes a READ response: in order it is placed, ahead of order it asks again from the
// first one missing, behind it is a duplicate.
func (qp *QP) compRead() compState {
	a := &qp.comp
	d, f, psn := qp.dev, a.f, a.psn
	w := qp.wqeHolding(psn)
	// A READ being asked for again still takes the responses it is missing as they come.
	if w == nil || w.wr.Opcode != WRRDMARead {
		d.stats.RxDropped.Add(1)
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("%s for no outstanding READ", f.Opcode)})
		return compDone
	}
	r := &qp.req
	if psnCmp(w.firstPSN, r.compPSN) > 0 {
		// A response to this READ says that everything before its request was executed:
		// a READ or atomic before it that still lacks its responses lost them.
		qp.acknowledge(psnAdd(w.firstPSN, psnMask), w.firstPSN)
		if !qp.requesterActive() {
			return compDone
		}
	}
	qp.heard(psn)
	if !qp.requesterActive() {
		return compDone
	}
	want := psnAdd(w.firstPSN, w.next)
	if c := psnCmp(psn, want); c != 0 {
		if c < 0 {
			d.stats.DuplicatesSeen.Add(1)
			return compDone // a duplicate of a response already placed
		}
		// A response is missing: ask again from the first one we lack.
		if _, asked := w.gap(); w.state == wqeSent && !asked {
			qp.askAgain(w, want, fmt.Sprintf("READ response psn %d arrived, %d expected", psn, want))
		}
		return compDone
	}
	if f.AETH != nil && f.AETH.Syndrome().Type() != roce.SyndromeACK {
		return compBadResponse
	}
	qp.placeReadResponse(w, f, psn)
	return compDone
}

// placeReadResponse takes the READ response w expects next: it checks its packet class and
// length, scatters its payload, and completes w with the last one.
func (qp *QP) placeReadResponse(w *sendWQE, f *roce.Frame, psn uint32) {
	r := &qp.req
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
	if err := qp.scatterSGL(w.sgl, off, f.Payload); err != nil {
		if pf := pageFault(err); pf != nil {
			// Its pages went since the READ was sent: the response is dropped, and the READ
			// asked again from here when the retransmit timer fires.
			qp.raiseFault(pf, false)
			return
		}
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

// compFlush takes the answer to a FLUSH: one RDMA READ RESPONSE ONLY without payload at
// the FLUSH's PSN (IBTA 1.5 memory placement extensions; rxe's responder answers FLUSH through
// its READ reply path, and its completer accepts a READ response for a FLUSH WQE). Anything
// else is BAD_RESP_ERR.
func (qp *QP) compFlush() compState {
	a := &qp.comp
	d, f, psn, w := qp.dev, a.f, a.psn, a.w
	if w.state != wqeSent {
		d.stats.RxDropped.Add(1)
		d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: psn, Msg: fmt.Sprintf("%s for a FLUSH not yet sent again", f.Opcode)})
		return compDone
	}
	if f.AETH != nil && f.AETH.Syndrome().Type() != roce.SyndromeACK {
		return compBadResponse
	}
	if f.Info.Class != roce.Only || len(f.Payload) != 0 {
		qp.failWQE(w, WCBadRespErr, fmt.Errorf("FLUSH psn %d answered with %s carrying %d bytes", psn, f.Opcode, len(f.Payload)))
		return compDone
	}
	// Everything before the FLUSH was executed; a READ or atomic before it that lacks its
	// response lost it.
	if qp.ackBefore(w, psn) {
		qp.answered(w, psn)
	}
	return compDone
}

// compBadResponse fails the WQE a READ response or atomic acknowledgement belongs to when its
// AETH is not an ACK: responses carry data, not NAKs, so this is BAD_RESP_ERR.
func (qp *QP) compBadResponse() compState {
	a := &qp.comp
	if w := qp.wqeHolding(a.psn); w != nil {
		qp.failWQE(w, WCBadRespErr, fmt.Errorf("%s psn %d carries %s", a.f.Opcode, a.psn, a.syn))
	}
	return compDone
}
