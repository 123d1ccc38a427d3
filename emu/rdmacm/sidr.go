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
	if len(private) > cm.SIDRREQPrivateLen-cm.HeaderLen {
		return nil, fmt.Errorf("rdmacm: %d bytes of private data, a SIDR_REQ holds %d: %w", len(private), cm.SIDRREQPrivateLen-cm.HeaderLen, syscall.EINVAL)
	}
	ah, err := m.ah(dst)
	if err != nil {
		return nil, err
	}
	if err := ReadyUD(qp); err != nil {
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	m.mu.Lock()
	id := m.newConn(qp, dst, ah, ConnParam{})
	id.ps, id.tid = cm.PSUDP, m.tidFor(id)
	hdr := cm.Header{SrcPort: uint16(49152 + m.rnd.IntN(16384)), Src: ah.Source(), Dst: dst}
	q := cm.SIDRREQ{RequestID: id.local, PKey: 0xffff, ServiceID: cm.ServiceID(cm.PSUDP, port)}
	if err := hdr.Put(q.Private[:]); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	copy(q.Private[cm.HeaderLen:], private)
	msg := encode(q.Put)
	m.setState(id, stSIDRReqSent)
	m.send(id, cm.AttrSIDRREQ, msg, true)
	m.mu.Unlock()
	m.deliver()
	return id, nil
}

// ReadyUD takes a UD QP in RESET or INIT to RTS with rdma_cm's Q_Key, as librdmacm's
// rdma_create_qp does for a UD ID, so that receives may be posted before ConnectUD or Accept;
// one in RTS is left as it is.
func ReadyUD(qp *engine.QP) error {
	if qp.Type() != engine.QPTypeUD {
		return fmt.Errorf("QP %#x is not UD: %w", qp.Num(), syscall.EINVAL)
	}
	steps := []struct {
		a    engine.QPAttr
		mask engine.AttrMask
	}{
		{engine.QPAttr{State: engine.QPSInit, Port: 1, QKey: UDPQKey}, engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrQKey},
		{engine.QPAttr{State: engine.QPSRTR}, engine.AttrState},
		{engine.QPAttr{State: engine.QPSRTS}, engine.AttrState | engine.AttrSQPSN},
	}
	switch qp.State() {
	case engine.QPSRTS:
		return nil
	case engine.QPSInit:
		steps = steps[1:]
	case engine.QPSReset:
	default:
		return fmt.Errorf("UD QP %#x in %s: %w", qp.Num(), qp.State(), syscall.EINVAL)
	}
	for _, s := range steps {
		if err := qp.Modify(s.a, s.mask); err != nil {
			return err
		}
	}
	return nil
}

func (m *Manager) onSIDRREQ(src netip.Addr, tid uint64, msg []byte) {
	q, _ := cm.ParseSIDRREQ(msg)
	if id := m.byRemote(src, q.RequestID); id != nil {
		// The same request again: the answer again if it went (it may be the one lost); one
		// the consumer still owes is kept as long again.
		switch id.state {
		case stSIDRRepSent:
			m.sendMAD(id.ah, id.tid, cm.AttrSIDRREP, id.last)
		case stSIDRReqRcvd:
			m.armFor(id, m.answerWait(nil))
		}
		return
	}
	ah, err := m.ahLocked(src)
	if err != nil {
		m.stats.Dropped++
		return
	}
	ps, _, ok := cm.SplitServiceID(q.ServiceID)
	l := m.listeners[q.ServiceID]
	if _, herr := cm.ParseHeader(q.Private[:]); !ok || ps != cm.PSUDP || l == nil || herr != nil {
		// Nobody serves it: UNSUPPORTED, as ib_cm answers (cm_reject_sidr_req).
		rep := cm.SIDRREP{RequestID: q.RequestID, Status: cm.SIDRUnsupported, ServiceID: q.ServiceID}
		m.sendMAD(ah, tid, cm.AttrSIDRREP, encode(rep.Put))
		return
	}
	if m.waiting >= m.cfg.Backlog {
		m.stats.Overflow++ // dropped: its sender asks again
		return
	}
	id := m.newConn(nil, src, ah, ConnParam{})
	id.ps, id.remote, id.tid, id.sidr = cm.PSUDP, q.RequestID, tid, q
	m.setState(id, stSIDRReqRcvd)
	m.armFor(id, m.answerWait(nil))
	m.events = append(m.events, Event{Type: ConnectRequest, ID: id, Private: append([]byte(nil), q.Private[cm.HeaderLen:]...)})
}

// acceptUD answers a SIDR_REQ with qp, a UD QP, made ready with rdma_cm's Q_Key if it is not.
func (id *ID) acceptUD(qp *engine.QP, p ConnParam) error {
	if len(p.Private) > cm.SIDRREPPrivateLen {
		return fmt.Errorf("rdmacm: %d bytes of private data, a SIDR_REP holds %d: %w", len(p.Private), cm.SIDRREPPrivateLen, syscall.EINVAL)
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
	msg := encode(rep.Put)
	m.sendMAD(id.ah, id.tid, cm.AttrSIDRREP, msg)
	if m.answers >= m.cfg.Backlog {
		m.stats.Overflow++ // not kept: a request that comes again is a new one
		m.forget(id)
		return
	}
	id.stop()
	id.last = append(id.last[:0], msg...)
	m.setState(id, stSIDRRepSent)
	m.armFor(id, m.responseTimeout()*time.Duration(m.cfg.MaxRetries+1))
}

func (m *Manager) onSIDRREP(msg []byte) {
	r, _ := cm.ParseSIDRREP(msg)
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
		if err != nil {
			m.events = append(m.events, Event{Type: Unreachable, ID: id, Status: r.Status, Private: private})
			return
		}
		m.events = append(m.events, Event{Type: Established, ID: id, Private: private, UD: UDParam{QPN: r.QPN, QKey: r.QKey, AH: ah}})
	})
}
