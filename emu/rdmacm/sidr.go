package rdmacm

import (
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/cm"
)

// ConnectUD asks the UD service at dst and port (the UDP port space) for its QP: a SIDR_REQ with
// rdma_cm's header and private data first (rdma_connect on a UD ID). qp, a UD QP, is made ready
// to send with rdma_cm's Q_Key (UDPQKey) if it is not yet. Established carries the service's QPN,
// Q_Key and an address handle in qp's PD; a refusal or silence is Unreachable.
func (m *Manager) ConnectUD(qp *engine.QP, dst netip.Addr, port uint16, private []byte) (*ID, error) {
	if err := fits(private, "SIDR_REQ", cm.SIDRREQPrivateLen-cm.HeaderLen); err != nil {
		return nil, err
	}
	return m.dial(qp, dst, ConnParam{}, func() error { return ReadyUD(qp) }, func(id *ID, hdr cm.Header) (uint16, []byte, error) {
		id.ps = cm.PSUDP
		q := cm.SIDRREQ{RequestID: id.local, PKey: 0xffff, ServiceID: cm.ServiceID(cm.PSUDP, port)}
		if err := withHeader(q.Private[:], hdr, private); err != nil {
			return 0, nil, err
		}
		m.setState(id, stSIDRReqSent)
		msg, err := encode(q.Put)
		return cm.AttrSIDRREQ, msg, err
	})
}

func (m *Manager) onSIDRREQ(in received, q cm.SIDRREQ) {
	r := incoming{remote: q.RequestID, service: q.ServiceID, ps: cm.PSUDP, private: q.Private[:], served: true}
	id, ah, v := m.admit(in, r, stSIDRReqRcvd, nil)
	switch v {
	case admitted:
		id.sidr = q
	case duplicate:
		// The same request again: the answer again if it went (it may be the one lost); one
		// the consumer still owes is kept as long again.
		switch id.state {
		case stSIDRRepSent:
			m.sendMAD(id.ah, id.tid, cm.AttrSIDRREP, id.last)
		case stSIDRReqRcvd:
			m.armFor(id, m.answerWait(nil))
		}
	case unreachable:
		m.stats.Dropped++
	case unserved, unfit:
		// Nobody serves it: UNSUPPORTED, as ib_cm answers (cm_reject_sidr_req).
		rep := cm.SIDRREP{RequestID: q.RequestID, Status: cm.SIDRUnsupported, ServiceID: q.ServiceID}
		m.sendOnce(ah, in.hdr.TID, cm.AttrSIDRREP, rep.Put)
		m.agent.drop(ah)
	case full:
		m.agent.drop(ah) // dropped: its sender asks again
	}
}

// acceptUD answers a SIDR_REQ with qp, a UD QP, made ready with rdma_cm's Q_Key if it is not.
func (id *ID) acceptUD(qp *engine.QP, p ConnParam) error {
	if err := fits(p.Private, "SIDR_REP", cm.SIDRREPPrivateLen); err != nil {
		return err
	}
	if err := ReadyUD(qp); err != nil {
		return fmt.Errorf("rdmacm: accept: %w", err)
	}
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state != stSIDRReqRcvd {
		return fmt.Errorf("rdmacm: accept in %s: %w", id.state, syscall.EINVAL)
	}
	id.qp = qp
	m.sidrReply(id, cm.SIDRSuccess, qp.Num(), UDPQKey, p.Private)
	return nil
}

// sidrReply sends a SIDR request's answer and keeps it, to send again should the request come
// again, as long as a peer of our own timeouts would go on asking. m.mu is held.
func (m *Manager) sidrReply(id *ID, status cm.SIDRStatus, qpn, qkey uint32, private []byte) {
	rep := cm.SIDRREP{RequestID: id.remote, Status: status, QPN: qpn, ServiceID: id.sidr.ServiceID, QKey: qkey}
	copy(rep.Private[:], private)
	msg := m.sendOnce(id.ah, id.tid, cm.AttrSIDRREP, rep.Put)
	if msg == nil || m.answers >= m.cfg.Backlog {
		if msg != nil {
			m.stats.Overflow++ // not kept: a request that comes again is a new one
		}
		m.forget(id)
		return
	}
	id.stop()
	id.last = append(id.last[:0], msg...)
	m.setState(id, stSIDRRepSent)
	m.armFor(id, m.responseTimeout()*time.Duration(m.cfg.MaxRetries+1))
}

func (m *Manager) onSIDRREP(_ received, r cm.SIDRREP) {
	id := m.conns[r.RequestID]
	if id == nil || id.state != stSIDRReqSent {
		m.stats.Dropped++
		return
	}
	m.forget(id)
	private := append([]byte(nil), r.Private[:]...)
	if r.Status != cm.SIDRSuccess {
		m.events = append(m.events, Event{Type: Unreachable, ID: id, Status: r.Status, Private: private})
		return
	}
	// The consumer's address handle is made in its QP's PD, outside the lock.
	m.after = append(m.after, func() {
		ah, err := id.qp.PD().CreateAH(engine.AHAttr{DGID: id.peer, HopLimit: 64})
		m.mu.Lock()
		defer m.mu.Unlock()
		switch {
		case err != nil:
			// The service answered, but its address is of no use here: as if it had not.
			m.log.Warn("rdmacm: an address handle to a UD service", "peer", id.peer, "err", err)
			m.events = append(m.events, Event{Type: Unreachable, ID: id, Status: r.Status, Private: private})
		case id.destroyed:
			// Destroyed meanwhile: nobody takes the handle.
			if err := ah.Destroy(); err != nil {
				m.log.Warn("rdmacm: destroying a UD service's address handle", "err", err)
			}
		default:
			m.events = append(m.events, Event{Type: Established, ID: id, Private: private, UD: UDParam{QPN: r.QPN, QKey: r.QKey, AH: ah}})
		}
	})
}
