package rdmacm

import (
	"net/netip"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/cm"
)

// state is a connection's state in IBTA chapter 12's machine.
type state uint8

const (
	stIdle state = iota
	stListen
	stREQSent
	stREQRcvd
	stREPSent
	stEstablished
	stDREQSent
	stTimewait
	stDone
	stMRAReqSent // the consumer still owes an answer to a REQ sent again: an MRA told the peer
	stMRAReqRcvd // the peer's MRA: its REP comes within its service timeout
	stMRARepRcvd
	stSIDRReqSent
	stSIDRReqRcvd
	stSIDRRepSent // answered; kept a while to answer the same SIDR_REQ again
)

var stateNames = [...]string{"IDLE", "LISTEN", "REQ_SENT", "REQ_RCVD", "REP_SENT", "ESTABLISHED", "DREQ_SENT", "TIMEWAIT", "DONE",
	"MRA_REQ_SENT", "MRA_REQ_RCVD", "MRA_REP_RCVD", "SIDR_REQ_SENT", "SIDR_REQ_RCVD", "SIDR_REP_SENT"}

// waitsREP, owesAnswer and waitsRTU group the states IBTA splits by whether an MRA came.
func (s state) waitsREP() bool { return s == stREQSent || s == stMRAReqRcvd }

func (s state) owesAnswer() bool { return s == stREQRcvd || s == stMRAReqSent }

func (s state) waitsRTU() bool { return s == stREPSent || s == stMRARepRcvd }

// waitsConsumer is a request whose answer the consumer owes.
func (s state) waitsConsumer() bool { return s.owesAnswer() || s == stSIDRReqRcvd }

func (s state) String() string { return stateNames[s] }

// setState moves id to s, counting what its peer's requests hold. m.mu is held.
func (m *Manager) setState(id *ID, s state) {
	if id.state.waitsConsumer() {
		m.waiting--
	}
	if id.state == stSIDRRepSent {
		m.answers--
	}
	if s.waitsConsumer() {
		m.waiting++
	}
	if s == stSIDRRepSent {
		m.answers++
	}
	id.state = s
}

// forget ends id: DONE, its timer stopped, out of the table. m.mu is held.
func (m *Manager) forget(id *ID) {
	id.stop()
	m.setState(id, stDone)
	delete(m.conns, id.local)
}

func (id *ID) stop() {
	if id.timer != nil {
		id.timer.Stop()
	}
	id.last = id.last[:0]
}

// fail ends a connection that never got going: its QP to ERR (a UD QP, which serves any peer,
// stays as it is), an event, forgotten. m.mu is held.
func (m *Manager) fail(id *ID, t EventType) {
	m.forget(id)
	if id.ps != cm.PSUDP {
		m.toError(id)
	}
	m.events = append(m.events, Event{Type: t, ID: id})
}

// toError moves the connection's QP to ERR once the lock is released: a flush may run the
// consumer's completion callbacks, which may call the manager.
func (m *Manager) toError(id *ID) {
	if qp := id.qp; qp != nil {
		m.after = append(m.after, func() { _ = qp.Modify(engine.QPAttr{State: engine.QPSErr}, engine.AttrState) })
	}
}

// byRemote finds the connection with the peer's communication ID, for a duplicate REQ.
func (m *Manager) byRemote(peer netip.Addr, remote uint32) *ID {
	for _, id := range m.conns {
		if id.remote == remote && id.peer == peer {
			return id
		}
	}
	return nil
}

func (m *Manager) onREQ(src netip.Addr, tid uint64, msg []byte) {
	q, _ := cm.ParseREQ(msg)
	if id := m.byRemote(src, q.LocalCommID); id != nil {
		m.dupREQ(id)
		return
	}
	ah, err := m.ahLocked(src)
	if err != nil {
		m.stats.Dropped++
		return
	}
	ps, _, ok := cm.SplitServiceID(q.ServiceID)
	l := m.listeners[q.ServiceID]
	_, herr := cm.ParseHeader(q.Private[:])
	if !ok || ps != cm.PSTCP || l == nil || herr != nil || q.TransportServiceType != 0 {
		// No listener: REJ, as ib_cm answers a REQ for a service nobody listens on.
		rej := cm.REJ{RemoteCommID: q.LocalCommID, MessageRejected: 0, Reason: cm.RejInvalidServiceID}
		if ok && l != nil {
			rej.Reason = cm.RejInvalidTransportType
		}
		m.sendMAD(ah, tid, cm.AttrREJ, encode(rej.Put))
		return
	}
	if m.waiting >= m.cfg.Backlog {
		m.stats.Overflow++
		rej := cm.REJ{RemoteCommID: q.LocalCommID, MessageRejected: 0, Reason: cm.RejNoResources}
		m.sendMAD(ah, tid, cm.AttrREJ, encode(rej.Put))
		return
	}
	id := m.newConn(nil, src, ah, ConnParam{})
	id.remote, id.tid, id.req = q.LocalCommID, tid, q
	m.setState(id, stREQRcvd)
	m.armFor(id, m.answerWait(&q))
	m.events = append(m.events, Event{Type: ConnectRequest, ID: id, Private: append([]byte(nil), q.Private[cm.HeaderLen:]...)})
}

// reject sends a REJ for id's connection. m.mu is held.
func (m *Manager) reject(id *ID, reason cm.RejectReason, private []byte) {
	rej := cm.REJ{LocalCommID: id.local, RemoteCommID: id.remote, Reason: reason}
	if id.state.waitsRTU() || id.state.owesAnswer() {
		rej.MessageRejected = 0 // the REQ
	} else {
		rej.MessageRejected = 1 // the REP
	}
	copy(rej.Private[:], private)
	m.sendMAD(id.ah, id.tid, cm.AttrREJ, encode(rej.Put))
}

func (m *Manager) onREP(msg []byte) {
	r, _ := cm.ParseREP(msg)
	id := m.conns[r.RemoteCommID]
	if id == nil {
		m.stats.Dropped++
		return
	}
	switch id.state {
	case stEstablished:
		// Our RTU was lost: the peer sent its REP again. Answer it again.
		if id.remote == r.LocalCommID {
			m.sendRTU(id)
		}
		return
	case stREQSent, stMRAReqRcvd:
	default:
		m.stats.Dropped++
		return
	}
	id.stop()
	id.remote = r.LocalCommID
	m.setState(id, stEstablished) // a REP again from now on only asks for the RTU again
	p, q, qp := id.param, id.req, id.qp
	m.after = append(m.after, func() {
		err := qp.Modify(engine.QPAttr{State: engine.QPSRTR, AH: engine.AHAttr{DGID: id.peer, HopLimit: 64}, PathMTU: engine.MTU(q.PathMTU),
			DestQPN: r.LocalQPN, RQPSN: id.psn, MaxDestRdAtomic: min(p.ResponderResources, r.InitiatorDepth), MinRNRTimer: engine.DefaultMinRNRTimer},
			engine.AttrState|engine.AttrAV|engine.AttrPathMTU|engine.AttrDestQPN|engine.AttrRQPSN|engine.AttrMaxDestRdAtomic|engine.AttrMinRNRTimer)
		if err == nil {
			err = qp.Modify(engine.QPAttr{State: engine.QPSRTS, SQPSN: r.StartingPSN, Timeout: q.Primary.LocalACKTimeout, RetryCnt: p.RetryCount,
				RNRRetry: r.RNRRetryCount, MaxRdAtomic: min(p.InitiatorDepth, r.ResponderResources)},
				engine.AttrState|engine.AttrSQPSN|engine.AttrTimeout|engine.AttrRetryCnt|engine.AttrRNRRetry|engine.AttrMaxQPRdAtomic)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if err != nil {
			m.reject(id, cm.RejConsumerDefined, nil)
			m.fail(id, Rejected)
			return
		}
		m.sendRTU(id)
		m.events = append(m.events, Event{Type: Established, ID: id, Private: append([]byte(nil), r.Private[:]...)})
	})
}

func (m *Manager) sendRTU(id *ID) { m.sendIDs(id.ah, id.tid, cm.AttrRTU, id.local, id.remote) }

// sendIDs sends an RTU or a DREP (attr): the two communication IDs and no private data, the
// layout both messages share.
func (m *Manager) sendIDs(ah *engine.AH, tid uint64, attr uint16, local, remote uint32) {
	p := cm.Pair{LocalCommID: local, RemoteCommID: remote}
	m.sendMAD(ah, tid, attr, encode(p.PutRTU))
}

func (m *Manager) onRTU(msg []byte) {
	r, _ := cm.ParseRTU(msg)
	id := m.conns[r.RemoteCommID]
	if id == nil || !id.state.waitsRTU() || id.remote != r.LocalCommID {
		m.stats.Dropped++
		return
	}
	id.stop()
	m.setState(id, stEstablished)
	m.events = append(m.events, Event{Type: Established, ID: id})
}

// onREJ takes a REJ of a request this side sent or answered, or of one its consumer still owes
// an answer to: a peer that gave up waiting says so with REJ TIMEOUT, naming the request by its
// own communication ID when it never heard ours (ib_cm's cm_acquire_rejected_id).
func (m *Manager) onREJ(src netip.Addr, msg []byte) {
	r, _ := cm.ParseREJ(msg)
	id := m.conns[r.RemoteCommID]
	if id == nil && r.Reason == cm.RejTimeout {
		id = m.byRemote(src, r.LocalCommID)
	}
	switch {
	case id == nil:
		m.stats.Dropped++
		return
	case id.state.waitsREP():
	case (id.state.waitsRTU() || id.state.owesAnswer()) && id.remote == r.LocalCommID && id.ps != cm.PSUDP:
	default:
		m.stats.Dropped++
		return
	}
	m.forget(id)
	m.toError(id)
	m.events = append(m.events, Event{Type: Rejected, ID: id, Reason: r.Reason, Private: append([]byte(nil), r.Private[:]...)})
}

func (m *Manager) onDREQ(src netip.Addr, tid uint64, msg []byte) {
	d, _ := cm.ParseDREQ(msg)
	id := m.conns[d.RemoteCommID]
	if id == nil || id.remote != d.LocalCommID {
		// Not ours, or gone: a DREP anyway, so that the peer stops asking (IBTA 12.9.8.1).
		if ah, err := m.ahLocked(src); err == nil {
			m.sendIDs(ah, tid, cm.AttrDREP, d.RemoteCommID, d.LocalCommID)
		}
		return
	}
	id.tid = tid
	switch id.state {
	case stEstablished, stREPSent, stMRARepRcvd:
		id.stop()
		m.toError(id)
		m.events = append(m.events, Event{Type: Disconnected, ID: id})
		m.enterTimewait(id)
	case stDREQSent:
		// Both ends disconnected at once: answer, and wait for our own DREP.
	case stTimewait:
	default:
		return
	}
	m.sendIDs(id.ah, tid, cm.AttrDREP, id.local, id.remote)
}

func (m *Manager) onDREP(msg []byte) {
	d, _ := cm.ParseDREP(msg)
	id := m.conns[d.RemoteCommID]
	if id == nil || id.state != stDREQSent {
		m.stats.Dropped++
		return
	}
	id.stop()
	m.enterTimewait(id)
}

// enterTimewait starts a connection's time wait: its QP number stays the connection's until it
// ends, then TimewaitExit. m.mu is held.
func (m *Manager) enterTimewait(id *ID) {
	id.stop()
	m.setState(id, stTimewait)
	m.clock.AfterFunc(timewait, func() {
		m.mu.Lock()
		if id.state == stTimewait {
			m.forget(id)
			m.events = append(m.events, Event{Type: TimewaitExit, ID: id})
		}
		m.mu.Unlock()
		m.deliver()
	})
}

// dupREQ answers a REQ that came again (ib_cm's cm_dup_req_handler): an MRA while the consumer
// still owes its answer, so that the peer waits its service timeout rather than give up (ib_cm
// sends one only when its consumer asks), and the REP again once it went out.
func (m *Manager) dupREQ(id *ID) {
	switch {
	case id.state.owesAnswer():
		mra := cm.MRA{LocalCommID: id.local, RemoteCommID: id.remote, MessageMRAed: 0, ServiceTimeout: m.cfg.ServiceTimeout}
		m.sendMAD(id.ah, id.tid, cm.AttrMRA, encode(mra.Put))
		m.stats.MRAs++
		m.setState(id, stMRAReqSent)
		m.armFor(id, m.answerWait(&id.req)) // the peer is still there: it waits again
	case id.state == stREPSent && len(id.last) > 0:
		m.sendMAD(id.ah, id.tid, cm.AttrREP, id.last)
	}
}

// onMRA takes a peer's MRA: the answer to the REQ or REP it names comes within its service
// timeout, so the message is sent again only after that and the path's round trip
// (cm_mra_handler), its retries unspent.
func (m *Manager) onMRA(msg []byte) {
	r, _ := cm.ParseMRA(msg)
	id := m.conns[r.RemoteCommID]
	switch {
	case id == nil:
		m.stats.Dropped++
		return
	case r.MessageMRAed == 0 && id.state == stREQSent:
		id.remote = r.LocalCommID
		m.setState(id, stMRAReqRcvd)
	case r.MessageMRAed == 1 && id.state == stREPSent && id.remote == r.LocalCommID:
		m.setState(id, stMRARepRcvd)
	default:
		m.stats.Dropped++ // another MRA for the same message, or one for a message we did not send
		return
	}
	if id.timer != nil {
		id.timer.Reset(time.Duration(4096<<r.ServiceTimeout)*time.Nanosecond + m.responseTimeout())
	}
}
