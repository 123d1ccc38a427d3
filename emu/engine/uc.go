package engine

import (
	"fmt"

	"github.com/softirdma/softirdma/wire/roce"
)

// ucTransport is Unreliable Connected: one peer, SENDs and RDMA WRITEs segmented as on RC, and
// nothing acknowledged. A message completes at the sender when its last packet leaves; at the
// receiver a lost packet costs the message it belongs to, and only that one (IBTA 9.7.5.1.1,
// 9.8.3: the responder drops the rest of the message and starts again at the next FIRST or
// ONLY).
var ucTransport = transport{
	name:        "UC",
	wire:        roce.UC,
	transitions: ucTransitions,
	// SEND_WITH_INV has no UC opcode (IBTA table 38 gives it to RC and XRC): refused at post
	// rather than failing when sent, as rxe's does.
	sends:     wrs(WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRLocalInv, WRBindMW, WRRegMR),
	connected: true,
	request:   (*QP).ucRequest,
}

// ucTransitions is the verbs state machine for UC QPs (ib_modify_qp_is_ok): RC's without the
// READ and atomic resources, the timeouts and retry counts.
var ucTransitions = map[[2]QPState][2]AttrMask{
	{QPSReset, QPSInit}: {AttrPKeyIndex | AttrPort | AttrAccessFlags, 0},
	{QPSInit, QPSInit}:  {0, AttrPKeyIndex | AttrPort | AttrAccessFlags},
	{QPSInit, QPSRTR}:   {AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN, AttrAltPath | AttrAccessFlags | AttrPKeyIndex},
	{QPSRTR, QPSRTS}:    {AttrSQPSN, AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState},
	{QPSRTS, QPSRTS}:    {0, AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState},
	{QPSRTS, QPSSQD}:    {0, AttrEnSQDAsyncNotify},
	{QPSSQD, QPSRTS}:    {0, AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState},
	{QPSSQD, QPSSQD}:    {0, AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrPathMigState},
	{QPSSQE, QPSRTS}:    {0, AttrCurState | AttrAccessFlags},
}

// ConnectUC takes two UC QPs in RESET through INIT and RTR to RTS, each pointing at the other,
// as ibv_uc_pingpong does after its exchange: path MTU mtu, both sending from PSN 0, the remote
// write right granted.
func ConnectUC(a, b *QP, mtu MTU) error {
	if err := a.check("connect_uc", "QP a"); err != nil {
		return err
	}
	if err := b.check("connect_uc", "QP b"); err != nil {
		return err
	}
	for _, e := range [][2]*QP{{a, b}, {b, a}} {
		qp, peer := e[0], e[1]
		steps := []struct {
			attr QPAttr
			mask AttrMask
		}{
			{QPAttr{State: QPSInit, Port: 1, AccessFlags: AccessRemoteWrite}, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
			{QPAttr{State: QPSRTR, AH: AHAttr{DGID: peer.dev.IP(), HopLimit: 64}, PathMTU: mtu, DestQPN: peer.qpn},
				AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN},
			{QPAttr{State: QPSRTS}, AttrState | AttrSQPSN},
		}
		for _, s := range steps {
			if err := qp.Modify(s.attr, s.mask); err != nil {
				return fmt.Errorf("connect UC QP 0x%06x: %w", qp.qpn, err)
			}
		}
	}
	return nil
}

// ucRequest is UC's responder. It runs RC's checks and execution, but nothing is answered: a
// packet behind or ahead of the expected PSN, or one a check refuses, drops its message (the
// receive it took stays for the next one), and a packet that starts a message, whatever its
// PSN, starts over there. A failure of the receiver's own (a receive too short, its memory
// unwritable) completes the receive in error and moves the QP to ERR, as on RC.
func (qp *QP) ucRequest(f *roce.Frame) {
	if !qp.takesRequests(f) {
		return
	}
	q := request{f: f, psn: f.BTH.PSN(), info: f.Info}
	r := &qp.resp
	start := f.Info.Is(roce.FlagStart)
	if q.psn != r.psn {
		if !start {
			why := fmt.Sprintf("psn %d, %d expected", q.psn, r.psn)
			if r.psn == ucDropping {
				why = "its message is being dropped"
			}
			qp.ucDrop(&q, why)
			return
		}
		// A FIRST or ONLY after a gap: the message in progress is lost, this one begins.
		r.psn = q.psn
		r.inSend, r.inWrite = false, false
	}
	if start {
		r.placed = 0 // a receive kept from a dropped message starts over
	}
	for _, step := range ucSteps {
		v := step(qp, &q)
		if v.refusal != nil {
			qp.ucRefuse(&q, v.refusal)
			return
		}
		if v.next == respDone {
			return
		}
	}
}

// ucSteps are the responder's steps UC takes, in order: RC's, with its own resource check, and
// no acknowledgement.
var ucSteps = [...]func(qp *QP, q *request) verdict{
	(*QP).checkOpSeq,
	(*QP).ucCheckOpValid,
	(*QP).ucCheckResource,
	(*QP).checkLength,
	(*QP).checkRKey,
	(*QP).execute,
	(*QP).completeRequest,
}

// ucCheckOpValid: a WRITE needs the QP's remote write right.
func (qp *QP) ucCheckOpValid(q *request) verdict {
	if q.info.Is(roce.FlagWrite) && qp.attr.AccessFlags&AccessRemoteWrite == 0 {
		return refuse(nak(roce.NAKInvalidRequest, "%s without REMOTE_WRITE in the QP's access flags", q.f.Opcode))
	}
	return proceed(respCheckResource)
}

// ucCheckResource: a SEND or WRITE_WITH_IMM needs a receive; without one its message is
// dropped (UC has no RNR NAK).
func (qp *QP) ucCheckResource(q *request) verdict {
	if !q.info.Is(roce.FlagNeedsRecv) || qp.resp.recv != nil {
		return proceed(respCheckLength)
	}
	if _, ok := qp.recvReady(); !ok {
		return qp.noReceive(q)
	}
	q.recvFound = true
	return proceed(respCheckLength)
}

// ucRefuse handles a refused packet: the receiver's own failure ends the QP, anything else
// drops the message. A receive taken from an SRQ does not stay with a QP whose message was
// dropped: it completes with the error (rxe's class D and E on an SRQ).
func (qp *QP) ucRefuse(q *request, e *respError) {
	r := &qp.resp
	if qp.faultNAK(q, e.err) {
		// Pages missing lose the message as a lost packet does; the receive stays.
		qp.ucDrop(q, e.err.Error())
		return
	}
	switch e.status {
	case WCLocLenErr, WCLocProtErr, WCLocQPOpErr:
		if r.recv != nil {
			w := r.recv
			qp.finishRecv(WC{WRID: w.id, Status: e.status, Opcode: WCRecv, Err: e.err}, false)
		}
		qp.toError(fmt.Sprintf("receive of psn %d failed: %v", q.psn, e.err))
		return
	}
	if r.recv != nil && qp.srq != nil {
		status := WCRemInvReqErr
		if e.syn == roce.NAKRemoteAccess {
			status = WCRemAccessErr
		}
		w := r.recv
		qp.finishRecv(WC{WRID: w.id, Status: status, Opcode: WCRecv, Err: e.err}, false)
	}
	qp.ucDrop(q, e.err.Error())
}

// ucDropping is the PSN a UC responder expects while it drops a message: none, since PSNs have
// 24 bits, so only a FIRST or ONLY, which starts over at its own PSN, is taken.
const ucDropping = 1 << 24

// ucDrop drops a packet and the rest of its message, up to the next FIRST or ONLY.
func (qp *QP) ucDrop(q *request, why string) {
	d, r := qp.dev, &qp.resp
	r.psn = ucDropping
	r.inSend, r.inWrite = false, false
	d.stats.RxDropped.Add(1)
	d.event(Event{QP: qp.qpn, Kind: EvDrop, PSN: q.psn, Msg: fmt.Sprintf("%s psn %d dropped with the rest of its message: %s", q.f.Opcode, q.psn, why)})
}
