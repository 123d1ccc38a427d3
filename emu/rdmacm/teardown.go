package rdmacm

import (
	"fmt"

	"github.com/softirdma/softirdma/wire/cm"
)

// disconnect sends id's DREQ in a transaction of its own: sent again until the DREP comes when
// the ID waits for it (Disconnect), once when the ID goes (Destroy). m.mu is held.
func (m *Manager) disconnect(id *ID, wait bool) error {
	id.tid = m.tidFor(id)
	dreq := cm.Pair{LocalCommID: id.local, RemoteCommID: id.remote, RemoteQPN: id.remoteQPN()}
	msg, err := encode(dreq.PutDREQ)
	if err != nil {
		return fmt.Errorf("rdmacm: disconnect: %w", err)
	}
	if !wait {
		m.sendMAD(id.ah, id.tid, cm.AttrDREQ, msg)
		return nil
	}
	m.setState(id, stDREQSent)
	m.send(id, cm.AttrDREQ, msg)
	return nil
}

// remoteQPN is the peer's QP number, as the connection's QP has it (or, for a QP its consumer
// moves, as the REQ and REP settled it).
func (id *ID) remoteQPN() uint32 {
	if id.hasPath {
		return id.path.destQPN
	}
	return id.qp.Query().DestQPN
}

func (m *Manager) onDREQ(in received, d cm.Pair) {
	id := m.conns[d.RemoteCommID]
	if id == nil || id.remote != d.LocalCommID {
		// Not ours, or gone: a DREP anyway, so that the peer stops asking (IBTA 12.9.8.1).
		if ah, err := m.ahLocked(in.src); err == nil {
			m.sendIDs(ah, in.hdr.TID, cm.AttrDREP, d.RemoteCommID, d.LocalCommID)
			m.agent.drop(ah)
		}
		return
	}
	id.tid = in.hdr.TID
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
	m.sendIDs(id.ah, in.hdr.TID, cm.AttrDREP, id.local, id.remote)
}

func (m *Manager) onDREP(_ received, d cm.Pair) {
	id := m.conns[d.RemoteCommID]
	if id == nil || id.state != stDREQSent {
		m.stats.Dropped++
		return
	}
	id.stop()
	m.enterTimewait(id)
}

// enterTimewait starts a connection's time wait on its timer: its QP number stays the
// connection's until it ends, then TimewaitExit. m.mu is held.
func (m *Manager) enterTimewait(id *ID) {
	id.stop()
	m.setState(id, stTimewait)
	m.armFor(id, timewait)
}

// destroy ends id as ib_cm's cm_destroy_id does by its state, then takes it out of the tables:
// a listener stops; a request it sent is withdrawn with REJ TIMEOUT, one it answered or owes an
// answer to refused with REJ CONSUMER_DEFINED (a SIDR request with SIDR_REP REJECT); an
// established connection is disconnected with one DREQ. An RC QP goes to ERR. m.mu is held.
func (m *Manager) destroy(id *ID) {
	s := id.state
	switch {
	case s == stListen:
		if sid := cm.ServiceID(id.ps, id.port); m.listeners[sid] == id {
			delete(m.listeners, sid)
		}
	case s.waitsREP():
		m.reject(id, cm.RejTimeout, nil)
	case s.owesAnswer() || s.waitsRTU():
		m.reject(id, cm.RejConsumerDefined, nil)
	case s == stSIDRReqRcvd:
		rep := cm.SIDRREP{RequestID: id.remote, Status: cm.SIDRReject, ServiceID: id.sidr.ServiceID}
		m.sendOnce(id.ah, id.tid, cm.AttrSIDRREP, rep.Put)
	case s == stEstablished:
		if err := m.disconnect(id, false); err != nil {
			m.log.Error("rdmacm: destroy", "err", err)
		}
	}
	if id.ps != cm.PSUDP && (s.waitsREP() || s.waitsRTU() || s == stEstablished) {
		m.toError(id)
	}
	m.forget(id)
	id.destroyed = true
	id.last, id.timer = nil, nil
}
