package engine

import (
	"fmt"
	"math"

	"github.com/softirdma/softirdma/wire/roce"
)

// responderBudget is how many packets one run of a QP's owed answers sends before it yields,
// so a long READ's responses take turns with other QPs' requests and responses.
const responderBudget = requesterBudget

// answerKind is what an answer sends.
type answerKind uint8

const (
	answerACK    answerKind = iota // an ACKNOWLEDGE: ACK, RNR NAK or NAK
	answerAtomic                   // an ATOMIC ACKNOWLEDGE
	answerRead                     // the READ RESPONSEs of a READ (or a FLUSH's one), from psn on
)

// answer is what the responder owes the requester for one request. Answers leave in the order
// the requests were taken (IBTA: responses in PSN order, and an ACK for a later request must not
// overtake an earlier READ's responses), so while a READ's responses are owed every answer after
// them waits in the queue too.
type answer struct {
	kind answerKind
	syn  roce.Syndrome
	psn  uint32 // the ACK's PSN; for READ responses the next one to send
	msn  uint32 // the MSN when the request was answered
	orig uint64 // an atomic's original value
	// later: an ACK that may wait for the run (see owe); one that must not clears it.
	later bool
	// A READ's responses: from is where this run of them starts (with FIRST, or ONLY), read a
	// copy of the resource (its slot may be recycled while the responses are still owed).
	from uint32
	read rdResource
}

// answers is the responder's queue of owed answers, and the run that works through it.
type answers struct {
	queue     []answer // oldest first, from head
	head      int
	scheduled bool
	run       func() // made once, so scheduling a run does not allocate
}

func (a *answers) owed() bool { return a.head < len(a.queue) }

func (a *answers) clear() { a.queue, a.head = a.queue[:0], 0 }

// owe sends an answer, or queues it behind those still owed. A READ's first budget of responses
// leaves at once, so one that fits in a budget goes out in the step that received its request.
//
// Positive ACKs are coalesced (IBTA 9.7.5.1.2: an ACK acknowledges every request before it). One
// that may wait (sendAckLater) waits for a run scheduled on the clock with no delay, and an ACK
// owed before that run replaces it, so a burst of WRITEs costs one ACK rather than one each:
// the run comes at the same virtual time, after the frames already due then, and in real time
// after the frames already taken off the link. An ACK that may not wait, for a request that
// completes a receive, takes the waiting one's place and leaves at once: the responder's
// application may act on its completion (tear the QP down, say) before any run.
func (qp *QP) owe(x answer) {
	q := &qp.resp.answers
	if x.kind == answerACK && x.syn == roce.ACKUnlimited {
		if qp.coalesceACK(x.psn, x.msn, x.later) {
			return
		}
		if x.later {
			q.queue = append(q.queue, x)
			qp.scheduleAnswers()
			return
		}
	}
	if !q.owed() && x.kind != answerRead {
		qp.sendAnswer(&x)
		return
	}
	q.queue = append(q.queue, x)
	if !q.scheduled {
		qp.sendAnswers(responderBudget)
	}
}

// coalesceACK folds a positive ACK of psn with msn into the one owed last, if the last answer
// owed is one, and reports whether it did; one that may not wait (later false) makes the owed
// one leave at once when nothing is owed before it.
func (qp *QP) coalesceACK(psn, msn uint32, later bool) bool {
	q := &qp.resp.answers
	if !q.owed() {
		return false
	}
	last := &q.queue[len(q.queue)-1]
	if last.kind != answerACK || last.syn != roce.ACKUnlimited {
		return false
	}
	if psnCmp(psn, last.psn) >= 0 {
		last.psn, last.msn = psn, msn
	}
	last.later = last.later && later
	if !last.later && len(q.queue)-q.head == 1 {
		qp.sendAnswers(1)
	}
	return true
}

// sendAck answers psn with an ACKNOWLEDGE carrying syn and the current MSN.
func (qp *QP) sendAck(syn roce.Syndrome, psn uint32) {
	qp.owe(answer{kind: answerACK, syn: syn, psn: psn, msn: qp.resp.msn})
}

// sendAckLater answers psn with an ACK that may wait to be coalesced with the ACKs after it.
// Most of a stream's requests find an ACK owed already and fold into it (coalesceACK) without
// building an answer for owe to take apart.
func (qp *QP) sendAckLater(psn uint32) {
	if qp.coalesceACK(psn, qp.resp.msn, true) {
		return
	}
	qp.owe(answer{kind: answerACK, syn: roce.ACKUnlimited, psn: psn, msn: qp.resp.msn, later: true})
}

// sendAtomicAck answers the atomic at psn with its original value.
func (qp *QP) sendAtomicAck(psn uint32, orig uint64) {
	qp.owe(answer{kind: answerAtomic, syn: roce.ACKUnlimited, psn: psn, msn: qp.resp.msn, orig: orig})
}

// sendReadResponses owes the responses of the READ or FLUSH res from the one at PSN from on.
// When responses of the same READ are still owed, they are rewound to from instead, if from is
// earlier, so a duplicate does not send them twice over.
func (qp *QP) sendReadResponses(res *rdResource, from uint32) {
	q := &qp.resp.answers
	for i := q.head; i < len(q.queue); i++ {
		x := &q.queue[i]
		if x.kind == answerRead && x.read.first == res.first && x.read.rkey == res.rkey {
			if psnCmp(from, x.psn) < 0 {
				x.from, x.psn = from, from
			}
			return
		}
	}
	qp.owe(answer{kind: answerRead, syn: roce.ACKUnlimited, psn: from, msn: qp.resp.msn, from: from, read: *res})
}

// scheduleAnswers schedules a run of the owed answers, as kick does for the requester.
func (qp *QP) scheduleAnswers() {
	q := &qp.resp.answers
	if q.scheduled || qp.dev.stopped.Load() {
		return
	}
	if q.run == nil {
		q.run = func() {
			defer hold(qp.dev, &qp.mu).releaseOnClock()
			qp.resp.answers.scheduled = false
			switch qp.state {
			case QPSRTR, QPSRTS, QPSSQD, QPSSQE:
				qp.sendAnswers(responderBudget)
			default:
				qp.resp.answers.clear() // a QP in ERR or RESET answers nothing more
			}
		}
	}
	q.scheduled = true
	qp.dev.clock.Post(0, q.run)
}

// sendAnswers sends up to budget packets of what is owed, oldest first, and schedules a run
// for the rest.
func (qp *QP) sendAnswers(budget int) {
	q := &qp.resp.answers
	for budget > 0 && q.owed() {
		x := &q.queue[q.head]
		if x.kind != answerRead {
			qp.sendAnswer(x)
			q.head++
			budget--
			continue
		}
		for budget > 0 {
			budget--
			psn := x.psn
			if e := qp.sendReadResponse(x); e != nil {
				if pf := pageFault(e.err); pf != nil {
					// Its pages went: the rest of this READ's responses are not sent, and
					// the requester asks for them again.
					qp.raiseFault(pf, false)
					q.head++
					break
				}
				// The READ ends here; what was owed behind it is not sent: the QP goes to ERR.
				q.clear()
				qp.respFail(nil, psn, e)
				return
			}
			if psn == x.read.last {
				q.head++
				break
			}
		}
	}
	if !q.owed() {
		q.clear()
		return
	}
	qp.scheduleAnswers()
}

// sendOwed sends everything still owed, now: a NAK must not overtake the answers of the
// requests before it.
func (qp *QP) sendOwed() {
	if qp.resp.answers.owed() {
		qp.sendAnswers(math.MaxInt)
	}
}

// sendAnswer sends an ACKNOWLEDGE or ATOMIC ACKNOWLEDGE.
func (qp *QP) sendAnswer(x *answer) {
	h := roce.Header{Opcode: roce.RCAcknowledge, DestQP: qp.attr.DestQPN, PSN: x.psn, Syndrome: x.syn, MSN: x.msn}
	if x.kind == answerAtomic {
		h.Opcode, h.Orig = roce.RCAtomicAcknowledge, x.orig
	}
	frame, err := qp.builder.Build(qp.dev.txBuffer(), &h, nil)
	if err == nil && qp.transmit(frame, h.Opcode, x.psn, qp.local, true) && x.syn.Type() != roce.SyndromeACK {
		qp.dev.stats.NAKsSent.Add(1)
	}
}

// sendReadResponse sends the READ response at x.psn and moves x on to the next. Its bytes are
// looked up again: an rkey invalidated or deallocated since the READ was accepted ends the READ
// with NAK 0x62 (rxe_recheck_mr).
func (qp *QP) sendReadResponse(x *answer) *respError {
	res := &x.read
	mtu := uint64(qp.attr.PathMTU.Bytes())
	off := uint64(psnCmp(x.psn, res.first)) * mtu
	n := min(mtu, res.length-off)
	h := roce.Header{DestQP: qp.attr.DestQPN, PSN: x.psn, Syndrome: roce.ACKUnlimited, MSN: x.msn,
		Opcode: readResponseOpcodes[classOf(x.psn == x.from, x.psn == res.last)]}
	var p pinned
	if n > 0 {
		var err error
		if p, err = qp.remoteAccess(res.rkey, res.va+off, n, AccessRemoteRead); err != nil {
			e := accessNAK(err)
			e.err = fmt.Errorf("READ response psn %d: %w", h.PSN, err)
			return e
		}
	}
	defer p.release()
	frame, slot, err := qp.builder.Begin(qp.dev.txBuffer(), &h, int(n))
	if err != nil {
		return nak(roce.NAKRemoteOp, "building READ response psn %d: %v", h.PSN, err)
	}
	if got := p.CopyTo(slot); uint64(got) != n {
		// The memory went away between the lookup and the copy (an implicit MR's range unmapped
		// before its RevokeRange): the rest of the slot is an earlier frame's, never to be sent.
		return nak(roce.NAKRemoteAccess, "READ response psn %d: %d of %d bytes could be read", h.PSN, got, n)
	}
	p.release()
	qp.transmit(frame, h.Opcode, h.PSN, qp.local, qp.sealFor(&qp.builder, frame, qp.local))
	x.psn = psnAdd(x.psn, 1)
	return nil
}
