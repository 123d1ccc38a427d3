package rdmacm

import (
	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/cm"
)

// incoming is what a REQ and a SIDR_REQ share: the peer's ID for it, the service it asks for in
// the port space of its kind, and the private data that starts with rdma_cm's header.
type incoming struct {
	remote  uint32
	service uint64
	ps      cm.PortSpace
	private []byte
	// served says whether, past its service, the request is one the port space takes.
	served bool
}

// verdict is what admit made of a request.
type verdict uint8

const (
	admitted    verdict = iota // a new ID waits for its consumer's answer
	duplicate                  // the request came again: the ID it made is returned
	unreachable                // QP1 has no handle to the peer: nothing can be answered
	unserved                   // no listener
	unfit                      // a listener, but not of the request's kind, or a request it does not take
	full                       // the backlog of unanswered requests is full
)

// admit takes a request that came in: a new one is an ID in state st, armed to expire when its
// sender would stop waiting for an answer and announced to the consumer. The handle to the
// peer comes with every verdict but duplicate and unreachable, for the refusals. m.mu is held.
func (m *Manager) admit(in received, r incoming, st state, q *cm.REQ) (*ID, *engine.AH, verdict) {
	if id := m.byRemote(in.src, r.remote); id != nil {
		return id, nil, duplicate
	}
	ah, err := m.ahLocked(in.src)
	if err != nil {
		return nil, nil, unreachable
	}
	ps, _, ok := cm.SplitServiceID(r.service)
	listened := ok && m.listeners[r.service] != nil
	hdr, herr := cm.ParseHeader(r.private)
	switch {
	case !listened:
		return nil, ah, unserved
	case ps != r.ps || herr != nil || !r.served:
		return nil, ah, unfit
	case m.waiting >= m.cfg.Backlog:
		m.stats.Overflow++
		return nil, ah, full
	}
	id := m.newConn(nil, in.src, ah, ConnParam{})
	id.ps, id.remote, id.tid, id.hdr = r.ps, r.remote, in.hdr.TID, hdr
	m.setState(id, st)
	m.armFor(id, m.answerWait(q))
	m.events = append(m.events, Event{Type: ConnectRequest, ID: id, Listener: m.listeners[r.service],
		Private: append([]byte(nil), r.private[cm.HeaderLen:]...)})
	return id, ah, admitted
}

func (m *Manager) onREQ(in received, q cm.REQ) {
	r := incoming{remote: q.LocalCommID, service: q.ServiceID, ps: cm.PSTCP, private: q.Private[:], served: q.TransportServiceType == 0}
	id, ah, v := m.admit(in, r, stREQRcvd, &q)
	rej := cm.REJ{RemoteCommID: q.LocalCommID, MessageRejected: 0}
	switch v {
	case admitted:
		id.req = q
		return
	case duplicate:
		m.dupREQ(id)
		return
	case unreachable:
		m.stats.Dropped++
		return
	case unserved:
		// No listener: REJ, as ib_cm answers a REQ for a service nobody listens on.
		rej.Reason = cm.RejInvalidServiceID
	case unfit:
		rej.Reason = cm.RejInvalidTransportType
	case full:
		rej.Reason = cm.RejNoResources
	}
	m.sendOnce(ah, in.hdr.TID, cm.AttrREJ, rej.Put)
	m.agent.drop(ah)
}

// dupREQ answers a REQ that came again (ib_cm's cm_dup_req_handler): an MRA while the consumer
// still owes its answer, so that the peer waits its service timeout rather than give up (ib_cm
// sends one only when its consumer asks), and the REP again once it went out.
func (m *Manager) dupREQ(id *ID) {
	switch {
	case id.state.owesAnswer():
		mra := cm.MRA{LocalCommID: id.local, RemoteCommID: id.remote, MessageMRAed: 0, ServiceTimeout: m.cfg.ServiceTimeout}
		m.sendOnce(id.ah, id.tid, cm.AttrMRA, mra.Put)
		m.stats.MRAs++
		m.setState(id, stMRAReqSent)
		m.armFor(id, m.answerWait(&id.req)) // the peer is still there: it waits again
	case id.state == stREPSent && len(id.last) > 0:
		m.sendMAD(id.ah, id.tid, cm.AttrREP, id.last)
	}
}

func (m *Manager) onREP(_ received, r cm.REP) {
	id := m.conns[r.RemoteCommID]
	if id == nil {
		m.stats.Dropped++
		return
	}
	switch id.state {
	case stEstablished:
		// Our RTU was lost: the peer sent its REP again. Answer it again.
		if id.remote == r.LocalCommID && (!id.userMoves || id.rtuSent) {
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
	path := rcPath{peer: id.peer, mtu: engine.MTU(q.PathMTU), destQPN: r.LocalQPN, rqPSN: id.psn, sqPSN: r.StartingPSN,
		maxDestRdAtomic: min(p.ResponderResources, r.InitiatorDepth), maxRdAtomic: min(p.InitiatorDepth, r.ResponderResources),
		timeout: q.Primary.LocalACKTimeout, retry: p.RetryCount, rnrRetry: r.RNRRetryCount}
	id.path, id.hasPath, id.rep = path, true, r
	if id.userMoves {
		m.events = append(m.events, Event{Type: ConnectResponse, ID: id, Private: append([]byte(nil), r.Private[:]...)})
		return
	}
	m.after = append(m.after, func() {
		err := path.connect(qp)
		m.mu.Lock()
		defer m.mu.Unlock()
		switch {
		case id.destroyed:
			// Destroyed meanwhile: its DREQ went, and its QP goes to ERR.
		case err != nil:
			m.reject(id, cm.RejConsumerDefined, nil)
			m.fail(id, Rejected)
		default:
			m.sendRTU(id)
			m.events = append(m.events, Event{Type: Established, ID: id, Private: append([]byte(nil), r.Private[:]...)})
		}
	})
}

func (m *Manager) onRTU(_ received, r cm.Pair) {
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
func (m *Manager) onREJ(in received, r cm.REJ) {
	id := m.conns[r.RemoteCommID]
	if id == nil && r.Reason == cm.RejTimeout {
		id = m.byRemote(in.src, r.LocalCommID)
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
