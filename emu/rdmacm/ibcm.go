package rdmacm

import (
	"math/bits"
	"net/netip"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
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

// handlers take the CM messages by attribute, each parsed before its handler sees it.
var handlers = map[uint16]func(*Manager, received) error{
	cm.AttrREQ:     handler(cm.ParseREQ, (*Manager).onREQ),
	cm.AttrREP:     handler(cm.ParseREP, (*Manager).onREP),
	cm.AttrRTU:     handler(cm.ParseRTU, (*Manager).onRTU),
	cm.AttrREJ:     handler(cm.ParseREJ, (*Manager).onREJ),
	cm.AttrDREQ:    handler(cm.ParseDREQ, (*Manager).onDREQ),
	cm.AttrDREP:    handler(cm.ParseDREP, (*Manager).onDREP),
	cm.AttrMRA:     handler(cm.ParseMRA, (*Manager).onMRA),
	cm.AttrSIDRREQ: handler(cm.ParseSIDRREQ, (*Manager).onSIDRREQ),
	cm.AttrSIDRREP: handler(cm.ParseSIDRREP, (*Manager).onSIDRREP),
}

func handler[T any](parse func([]byte) (T, error), on func(*Manager, received, T)) func(*Manager, received) error {
	return func(m *Manager, in received) error {
		msg, err := parse(in.body)
		if err != nil {
			return err
		}
		on(m, in, msg)
		return nil
	}
}

// receive takes one MAD from the agent: a CM message to its handler, anything else dropped.
func (m *Manager) receive(in received, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Received++
	if err != nil || m.closed || in.hdr.MgmtClass != mad.ClassCM || in.hdr.Method != mad.MethodSend {
		m.stats.Dropped++
		return
	}
	if h := handlers[in.hdr.AttrID]; h == nil || h(m, in) != nil {
		m.stats.Dropped++
	}
}

// sendMAD sends one CM message on QP1, counted in Stats: one that cannot go is lost, as on the
// wire, and sent again by its timer where it has one. m.mu is held.
func (m *Manager) sendMAD(ah *engine.AH, tid uint64, attr uint16, msg []byte) {
	h := cm.MADHeader(tid, attr)
	switch err := m.agent.send(ah, h, msg); err {
	case nil:
		m.stats.Sent++
	case errNoSlot, ErrClosed:
		m.stats.Dropped++
	default:
		m.stats.Dropped++
		m.log.Warn("rdmacm: sending a MAD", "msg", h.AttrName(), "peer", ah.Attr().DGID, "err", err)
	}
}

// encode is a CM message's DataLen bytes as put writes them.
func encode(put func([]byte) error) ([]byte, error) {
	msg := make([]byte, cm.DataLen)
	if err := put(msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// sendOnce sends a message that no timer sends again, as put writes it, and returns it. A Put
// refuses only a buffer of another length, so a refusal is this package's mistake, with no
// caller to return it to: it is counted with the MADs dropped, and logged. m.mu is held.
func (m *Manager) sendOnce(ah *engine.AH, tid uint64, attr uint16, put func([]byte) error) []byte {
	msg, err := encode(put)
	if err != nil {
		m.stats.Dropped++
		m.log.Error("rdmacm: writing a CM message", "msg", cm.MADHeader(tid, attr).AttrName(), "err", err)
		return nil
	}
	m.sendMAD(ah, tid, attr, msg)
	return msg
}

// tidFor is the transaction ID of the messages a connection starts: the manager's high half and
// the communication ID as ib_cm forms it (cm_form_tid: the big-endian ID read as a host integer).
func (m *Manager) tidFor(id *ID) uint64 { return m.hiTID<<32 | uint64(bits.ReverseBytes32(id.local)) }

// guid is the device's node GUID: its MAC as an EUI-64, as rxe derives it.
func (m *Manager) guid() uint64 {
	mac := m.dev.MAC()
	return uint64(mac[0]^2)<<56 | uint64(mac[1])<<48 | uint64(mac[2])<<40 | 0xff<<32 | 0xfe<<24 |
		uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
}

func (m *Manager) newConn(qp *engine.QP, peer netip.Addr, ah *engine.AH, p ConnParam) *ID {
	id := &ID{m: m, qp: qp, peer: peer, ah: ah, param: p, psn: m.rnd.Uint32() & 0xffffff}
	for id.local == 0 || m.conns[id.local] != nil {
		id.local = m.rnd.Uint32()
	}
	m.conns[id.local] = id
	return id
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

// forget ends id: DONE, its timer stopped, out of the table, QP1's handle to its peer given back
// if it was made for it alone. m.mu is held.
func (m *Manager) forget(id *ID) {
	id.stop()
	m.setState(id, stDone)
	if m.conns[id.local] == id {
		delete(m.conns, id.local)
		m.agent.drop(id.ah)
	}
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
	if qp := id.qp; qp != nil && !id.userMoves {
		m.after = append(m.after, func() { m.qpToError(qp) })
	}
}

// qpToError moves a consumer's QP to ERR. No caller waits for the answer, so one that will not
// go is counted (Stats.QPErrors) and logged. m.mu is not held.
func (m *Manager) qpToError(qp *engine.QP) {
	err := qp.Modify(engine.QPAttr{State: engine.QPSErr}, engine.AttrState)
	if err == nil {
		return
	}
	m.mu.Lock()
	m.stats.QPErrors++
	m.mu.Unlock()
	m.log.Warn("rdmacm: a connection's QP did not go to ERR", "qp", qp.Num(), "err", err)
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
	m.sendOnce(id.ah, id.tid, cm.AttrREJ, rej.Put)
}

// sendIDs sends an RTU or a DREP (attr): the two communication IDs and no private data, the
// layout both messages share.
func (m *Manager) sendIDs(ah *engine.AH, tid uint64, attr uint16, local, remote uint32) {
	p := cm.Pair{LocalCommID: local, RemoteCommID: remote}
	m.sendOnce(ah, tid, attr, p.PutRTU)
}

func (m *Manager) sendRTU(id *ID) { m.sendIDs(id.ah, id.tid, cm.AttrRTU, id.local, id.remote) }

// ahLocked is the agent's handle to dst with m.mu held: the lock is released while the handle
// is made.
func (m *Manager) ahLocked(dst netip.Addr) (*engine.AH, error) {
	m.mu.Unlock()
	defer m.mu.Lock()
	return m.agent.ah(dst)
}

// onMRA takes a peer's MRA: the answer to the REQ or REP it names comes within its service
// timeout, so the message is sent again only after that and the path's round trip
// (cm_mra_handler), its retries unspent.
func (m *Manager) onMRA(_ received, r cm.MRA) {
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
