package rdmacm

import (
	"time"

	"github.com/softirdma/softirdma/wire/cm"
)

// responseTimeout is how long a sent message waits for its answer: the CM response timeout code
// as 4.096 us x 2^n, doubled for the trip there and back.
func (m *Manager) responseTimeout() time.Duration {
	return 2 * time.Duration(4096<<m.cfg.ResponseTimeout) * time.Nanosecond
}

// timewait is how long a closed connection's QP number stays out of use: two local ACK
// timeouts of the default 14 (IBTA 12.9.8.3's reasoning: stray packets die out).
const timewait = 2 * 4096 * time.Nanosecond << 14

// send sends a CM message of attribute attr to id's peer, and again on the response timeout
// until answered (stop) or MaxRetries, after which the connection fails. m.mu is held.
func (m *Manager) send(id *ID, attr uint16, msg []byte) {
	m.sendMAD(id.ah, id.tid, attr, msg)
	id.last = append(id.last[:0], msg...)
	id.lastAttrID = attr
	id.retries = 0
	m.arm(id)
}

func (m *Manager) arm(id *ID) { m.armFor(id, m.responseTimeout()) }

// armFor sets id's timer to run timeout after d. m.mu is held.
func (m *Manager) armFor(id *ID, d time.Duration) {
	if id.timer == nil {
		id.timer = m.clock.NewTimer(func() { m.timeout(id) })
	}
	id.timer.Reset(d)
}

// cmTime is a CM timeout code's time, 4.096 us x 2^code.
func cmTime(code uint8) time.Duration { return time.Duration(4096<<min(code, 31)) * time.Nanosecond }

// answerWait is how long a request the consumer has not answered is kept: as long as its sender
// would go on waiting. That is its retries of the response timeout its REQ asks of this side (a
// SIDR_REQ, which names none, is taken to be sent with this side's own timeouts), or, once an
// MRA told it to, the service timeout and a round trip; each duplicate starts it again. A
// peer's response timeout counts for no more than the service timeout, which an MRA would ask
// for anyway.
func (m *Manager) answerWait(q *cm.REQ) time.Duration {
	d := m.responseTimeout() * time.Duration(m.cfg.MaxRetries+1)
	if q != nil {
		d = max(d, 2*cmTime(min(q.RemoteCMResponseTimeout, m.cfg.ServiceTimeout))*time.Duration(q.MaxCMRetries+1))
	}
	return max(d, cmTime(m.cfg.ServiceTimeout)+m.responseTimeout())
}

// timeout sends the unanswered message again, or gives the connection up, or ends its time
// wait.
func (m *Manager) timeout(id *ID) {
	m.mu.Lock()
	switch {
	case id.state == stTimewait:
		m.forget(id)
		m.events = append(m.events, Event{Type: TimewaitExit, ID: id})
		m.mu.Unlock()
		m.deliver()
		return
	case id.state.waitsConsumer():
		// The peer stopped waiting for the consumer's answer: so does this side. A REJ
		// TIMEOUT tells a peer still there; a SIDR request has no such answer.
		m.stats.Expired++
		if id.ps != cm.PSUDP {
			m.reject(id, cm.RejTimeout, nil)
		}
		m.fail(id, Unreachable)
		m.mu.Unlock()
		m.deliver()
		return
	case id.state == stSIDRRepSent:
		// A peer of our timeouts asks no more: the answer kept for it goes.
		m.forget(id)
		m.mu.Unlock()
		return
	case len(id.last) == 0:
		m.mu.Unlock()
		return
	}
	if id.retries >= m.cfg.MaxRetries {
		id.last = id.last[:0]
		switch {
		case id.state == stSIDRReqSent:
			m.fail(id, Unreachable)
		case id.state.waitsREP() || id.state.waitsRTU():
			// The peer never answered: REJ TIMEOUT so that it forgets us too, and the QP is done.
			m.reject(id, cm.RejTimeout, nil)
			m.fail(id, Unreachable)
		case id.state == stDREQSent:
			m.enterTimewait(id)
		}
		m.mu.Unlock()
		m.deliver()
		return
	}
	id.retries++
	m.stats.Resent++
	m.sendMAD(id.ah, id.tid, id.lastAttrID, id.last)
	m.arm(id)
	m.mu.Unlock()
	m.deliver()
}
