package engine

import (
	"fmt"
	"syscall"

	"github.com/softirdma/softirdma/wire/roce"
)

// AsyncEventType is what an asynchronous event reports, numbered as libibverbs' enum
// ibv_event_type, so a device model passes it to its guest as it is.
type AsyncEventType uint8

const (
	AsyncCQErr            AsyncEventType = 0  // a completion was lost for want of room in the CQ
	AsyncQPFatal          AsyncEventType = 1  // the QP went to ERR on its own (not by a modify)
	AsyncQPReqErr         AsyncEventType = 2  // the QP's responder refused an invalid request (NAK 0x61) and went to ERR
	AsyncQPAccessErr      AsyncEventType = 3  // the QP's responder refused a request for its rights (NAK 0x62) and went to ERR
	AsyncCommEst          AsyncEventType = 4  // the first packet arrived on a QP in RTR
	AsyncSQDrained        AsyncEventType = 5  // a QP in SQD that asked for it has nothing outstanding
	AsyncDeviceFatal      AsyncEventType = 8  // not raised by the engine
	AsyncPortActive       AsyncEventType = 9  // the port came up
	AsyncPortErr          AsyncEventType = 10 // the port went down
	AsyncSRQErr           AsyncEventType = 14 // not raised by the engine: no failure of its own stops an SRQ
	AsyncSRQLimitReached  AsyncEventType = 15 // an SRQ's posted receives fell below its armed limit
	AsyncQPLastWQEReached AsyncEventType = 16 // a QP on an SRQ went to ERR: it takes no more of the SRQ's receives
)

var asyncEventNames = map[AsyncEventType]string{
	AsyncCQErr: "CQ_ERR", AsyncQPFatal: "QP_FATAL", AsyncQPReqErr: "QP_REQ_ERR", AsyncQPAccessErr: "QP_ACCESS_ERR",
	AsyncCommEst: "COMM_EST", AsyncSQDrained: "SQ_DRAINED", AsyncDeviceFatal: "DEVICE_FATAL",
	AsyncPortActive: "PORT_ACTIVE", AsyncPortErr: "PORT_ERR", AsyncSRQErr: "SRQ_ERR",
	AsyncSRQLimitReached: "SRQ_LIMIT_REACHED", AsyncQPLastWQEReached: "QP_LAST_WQE_REACHED",
}

// String is the name libibverbs gives the event, without IBV_EVENT_.
func (t AsyncEventType) String() string {
	if s, ok := asyncEventNames[t]; ok {
		return s
	}
	return fmt.Sprintf("event-%d", uint8(t))
}

// AsyncEvent is one asynchronous event (struct ibv_async_event). Num is the number of what it
// concerns, which its Type says: a QPN for the QP events, a CQ's Num for CQ_ERR, an SRQ's
// Num for the SRQ events, the port number (PortNum) for the port events. The object may be
// destroyed by the time the handler runs: Device.QP and the other lookups then find nothing.
type AsyncEvent struct {
	Type AsyncEventType
	Num  uint32
}

func (e AsyncEvent) String() string { return fmt.Sprintf("%s 0x%x", e.Type, e.Num) }

// PortNum is the number of the device's one port, as verbs numbers ports from 1.
const PortNum = 1

// asyncEvents queues the events raised under the engine's locks and hands them to the handler
// after, as the loopback hands frames to Receive: from a call scheduled on the device's clock
// with delay zero, never with a lock of the engine held, so a handler may call back into the
// device.
// One delivery runs at a time and takes the events oldest first, so they arrive in the order
// they were raised, in the simulator (one seed, one order) as in real time.
type asyncEvents struct {
	mu        mutex[asyncLock]
	handler   func(AsyncEvent)
	faults    func(PageFault) // OnPageFault's
	queue     []queuedEvent
	head      int
	scheduled bool
	deliver   func() // made once, so raising an event allocates nothing more
}

// OnAsyncEvent sets the function that receives the device's asynchronous events; nil drops
// them. It is called with no lock of the engine held, one event at a time, in the order the
// events happened, soon after each (scheduled on the device's clock: in the simulator as an
// event of its own); it may call into the device. Events raised while no function is set are
// not kept.
func (d *Device) OnAsyncEvent(f func(AsyncEvent)) {
	a := &d.async
	a.mu.Lock()
	defer a.mu.Unlock()
	a.handler = f
}

// queuedEvent is an asynchronous event or a page fault, which share one queue so that a driver
// hears of them in the order they happened.
type queuedEvent struct {
	ev      AsyncEvent
	fault   PageFault
	isFault bool
}

// raise queues an event for the handler. It runs with the raising QP, CQ or SRQ locked.
func (d *Device) raise(t AsyncEventType, num uint32) {
	if d.tracing() {
		d.event(Event{Kind: EvAsync, Msg: AsyncEvent{t, num}.String()})
	}
	d.queueEvent(queuedEvent{ev: AsyncEvent{Type: t, Num: num}})
}

// queueEvent queues an event or a fault for its handler, if one is set.
func (d *Device) queueEvent(q queuedEvent) {
	a := &d.async
	a.mu.Lock()
	if (q.isFault && a.faults == nil) || (!q.isFault && a.handler == nil) || d.stopped.Load() {
		a.mu.Unlock()
		return
	}
	a.queue = append(a.queue, q)
	post := !a.scheduled
	a.scheduled = true
	if a.deliver == nil {
		a.deliver = d.deliverAsync
	}
	a.mu.Unlock()
	if post {
		d.clock.Post(0, a.deliver)
	}
}

// deliverAsync hands the queued events to the handler, with no lock of the engine held, until none
// is left; events the handler causes are delivered in the same run, after it returns.
func (d *Device) deliverAsync() {
	a := &d.async
	for {
		a.mu.Lock()
		if a.head == len(a.queue) {
			a.queue, a.head = a.queue[:0], 0
			a.scheduled = false
			a.mu.Unlock()
			return
		}
		e := a.queue[a.head]
		a.head++
		f, pf := a.handler, a.faults
		a.mu.Unlock()
		switch {
		case e.isFault && pf != nil:
			pf(e.fault)
		case !e.isFault && f != nil:
			f(e.ev)
		}
	}
}

// SetPortActive brings the device's port up or down, as a NIC's port follows its link (a
// device model calls it when its host's link changes; a Host does when its link fails). A
// down port sends nothing and takes in
// nothing, its own loopback frames included; QPs keep their state and their timers run, so
// requests outstanding meet their retry limit unless the port comes back first, as on a real
// NIC. Each change raises PORT_ERR or PORT_ACTIVE; setting the state the port is in raises
// nothing.
func (d *Device) SetPortActive(active bool) {
	defer d.flush()
	if d.portDown.Swap(!active) == !active {
		return
	}
	if active {
		d.raise(AsyncPortActive, PortNum)
	} else {
		d.raise(AsyncPortErr, PortNum)
	}
}

// PortActive says whether the device's port is up (it is until SetPortActive(false)).
func (d *Device) PortActive() bool {
	defer d.flush()
	return !d.portDown.Load()
}

// qpAsync is what a QP remembers for its asynchronous events.
type qpAsync struct {
	established bool // COMM_EST was raised since the QP entered RTR
	draining    bool // in SQD with an SQ_DRAINED event asked for and not yet raised
}

// fail moves the QP to ERR on its own, raising ev (QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR) for
// it first; a QP already in ERR raises nothing again.
func (qp *QP) fail(ev AsyncEventType, why string) {
	if qp.state == QPSErr {
		return
	}
	qp.dev.raise(ev, qp.qpn)
	qp.setState(QPSErr, why)
}

// responderEvent is the event a responder's refusal raises: QP_REQ_ERR for an invalid request,
// QP_ACCESS_ERR for an access violation (the Invalid Request and Local Access Violation work
// queue errors of IBTA 11.6.3.1, which mlx5 raises as these), QP_FATAL for the rest.
func responderEvent(syn roce.Syndrome) AsyncEventType {
	switch syn {
	case roce.NAKInvalidRequest:
		return AsyncQPReqErr
	case roce.NAKRemoteAccess:
		return AsyncQPAccessErr
	}
	return AsyncQPFatal
}

// stateChanged raises what a QP's move to state s means (setState calls it after the move):
// for a QP on an SRQ, ERR is its last WQE; RTR waits for its first packet; SQD, if SQ_DRAINED
// was asked for (AttrEnSQDAsyncNotify), for the end of what was started.
func (qp *QP) stateChanged(s QPState) {
	qp.async.draining = s == QPSSQD && qp.attr.EnSQDAsyncNotify
	switch s {
	case QPSErr:
		if qp.srq != nil {
			qp.dev.raise(AsyncQPLastWQEReached, qp.qpn)
		}
	case QPSRTR:
		qp.async.established = false
	case QPSSQD:
		qp.checkDrained()
	}
}

// received notes a packet accepted for the QP: the first in RTR establishes communication.
func (qp *QP) received() {
	if qp.state == QPSRTR && !qp.async.established {
		qp.async.established = true
		qp.dev.raise(AsyncCommEst, qp.qpn)
	}
}

// checkDrained raises SQ_DRAINED once a draining QP has no request started and unfinished:
// the requester starts none in SQD and starts them in order, so that is when the oldest WQE
// left, if any, has not started.
func (qp *QP) checkDrained() {
	if !qp.async.draining || qp.state != QPSSQD {
		return
	}
	if qp.sq.n > 0 && qp.sq.at(0).started() {
		return
	}
	qp.async.draining = false
	qp.dev.raise(AsyncSQDrained, qp.qpn)
}

// SRQAttr holds an SRQ's attributes (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR, MaxSGE int
	// Limit arms the SRQ_LIMIT_REACHED event: it fires once when the receives posted to the
	// SRQ fall below Limit, which then goes back to 0 (disarmed). 0 is not armed.
	Limit int
}

// SRQAttrMask says which SRQAttr fields a Modify sets (enum ibv_srq_attr_mask).
type SRQAttrMask uint32

const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0 // resize: not supported
	SRQAttrLimit SRQAttrMask = 1 << 1
)

// Modify changes the SRQ's attributes (ibv_modify_srq). Only the limit can change: a limit
// above the SRQ's size is EINVAL, a resize EOPNOTSUPP. Arming does not look at the receives
// already posted: the event fires when the device takes a receive and fewer than the limit
// are left, as in rxe, which checks when it takes one (posting a receive is no system call).
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	if err := s.check("modify_srq"); err != nil {
		return err
	}
	defer hold(s.pd.dev, &s.mu).release()
	switch {
	case mask&^(SRQAttrMaxWR|SRQAttrLimit) != 0:
		return fmt.Errorf("modify_srq: mask 0x%x: %w", uint32(mask), syscall.EINVAL)
	case mask&SRQAttrMaxWR != 0:
		return fmt.Errorf("modify_srq: resizing an SRQ: %w", syscall.EOPNOTSUPP)
	case mask&SRQAttrLimit != 0 && (attr.Limit < 0 || attr.Limit > len(s.queue.ring)):
		return fmt.Errorf("modify_srq: limit %d for %d receives: %w", attr.Limit, len(s.queue.ring), syscall.EINVAL)
	}
	if mask&SRQAttrLimit != 0 {
		s.limit = attr.Limit
	}
	return nil
}

// Query returns the SRQ's attributes (ibv_query_srq); Limit is 0 once the event has fired.
func (s *SRQ) Query() SRQAttr {
	defer hold(s.pd.dev, &s.mu).release()
	return SRQAttr{MaxWR: len(s.queue.ring), MaxSGE: s.maxSGE, Limit: s.limit}
}

// tookReceive checks the SRQ's limit after the device took one of its receives. The SRQ is
// locked.
func (s *SRQ) tookReceive() {
	if s.limit > 0 && s.queue.source == nil && s.queue.n < s.limit {
		s.limit = 0
		s.pd.dev.raise(AsyncSRQLimitReached, s.num)
	}
}
