// Package rdmacm is a host device's connection manager: IB CM over the device's GSI QP (QP1), as
// Linux's ib_cm speaks it on RoCEv2, with rdma_cm's addressing on top (IP addresses and ports,
// the TCP port space's service IDs, rdma_cm's header first in a REQ's private data), and a Go API
// in the spirit of librdmacm: listen, connect with private data and connection parameters, accept,
// reject, disconnect, and an event stream. It moves the QPs it connects through INIT, RTR and RTS
// itself, as the kernel's rdma_cm does. Every timeout runs on the device's clock, so in the
// simulator a connection is set up deterministically in virtual time.
//
// It connects RC QPs in the TCP port space, resolves UD services in the UDP port space (SIDR), and
// tells a peer to wait (MRA) while its consumer has not answered a request. What it does not do:
// LAP/APR (path migration), and UC.
//
// What a peer's messages can make it hold is bounded: requests its consumer has not answered and
// SIDR answers kept for duplicates by Config.Backlog, QP1's address handles kept to 4096 peers.
// Every ID ends on the device's clock whatever the peer does or fails to do: a request nobody
// answers when its sender would have stopped waiting, every message sent when its retries are
// spent, a time wait when it is over.
package rdmacm

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/cm"
	"github.com/softirdma/softirdma/wire/mad"
)

// EventType is what happened to a connection (enum rdma_cm_event_type's names).
type EventType uint8

const (
	ConnectRequest EventType = iota + 1 // a listener got a REQ: Accept or Reject the Event's ID
	Established                         // both ends are connected
	Rejected                            // the peer refused (Reason, Private)
	Unreachable                         // the peer never answered: retries exhausted
	Disconnected                        // a DREQ was sent or received; the QP is in ERR
	TimewaitExit                        // the connection's time wait ended; its QP may be reused
)

var eventNames = [...]string{"", "CONNECT_REQUEST", "ESTABLISHED", "REJECTED", "UNREACHABLE", "DISCONNECTED", "TIMEWAIT_EXIT"}

func (t EventType) String() string {
	if int(t) < len(eventNames) && t != 0 {
		return eventNames[t]
	}
	return fmt.Sprintf("event %d", uint8(t))
}

// Event is one event of a connection.
type Event struct {
	Type EventType
	ID   *ID
	// Private is the peer's private data: the REQ's (after rdma_cm's header) with a
	// ConnectRequest, the REP's with Established on the active side, the REJ's with Rejected.
	Private []byte
	// Reason is a Rejected event's REJ reason.
	Reason cm.RejectReason
	// UD is where a UD service's QP is, with Established on the side that asked (SIDR).
	UD UDParam
	// Status is the SIDR_REP's status of an Unreachable UD request it refused.
	Status cm.SIDRStatus
}

// UDParam is a UD service's QP as a SIDR_REP gives it (rdma_cm's struct rdma_ud_param).
type UDParam struct {
	QPN  uint32
	QKey uint32
	AH   *engine.AH // to the service's address
}

// UDPQKey is the Q_Key rdma_cm gives every UD QP of the UDP port space (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// ConnParam is a connection's parameters (struct rdma_conn_param).
type ConnParam struct {
	Private            []byte // at most 56 bytes in a REQ (92 less rdma_cm's header), 196 in a REP, 148 in a REJ
	ResponderResources uint8  // READs and atomics this side accepts outstanding
	InitiatorDepth     uint8  // READs and atomics this side has outstanding
	RetryCount         uint8  // 0..7 [7]
	RNRRetryCount      uint8  // 0..7 [7]
	MTU                engine.MTU
}

// Config sets up a Manager.
type Config struct {
	// Events receives every event. It runs on the device's clock or completion path and must
	// not block; it may call the Manager and the IDs.
	Events func(Event)
	// Rand chooses communication IDs and starting PSNs; nil is unpredictable.
	Rand mrand.Source
	// ResponseTimeout is the CM response timeout code a REQ asks its peer to answer within
	// (4.096 us x 2^n) and that this side waits for an answer [20: 4.3 s, Linux's], and
	// MaxRetries how often a REQ, REP or DREQ is sent again before giving up [15, Linux's].
	ResponseTimeout, MaxRetries uint8
	// ServiceTimeout is the code an MRA sends (4.096 us x 2^n): how much longer the peer is asked
	// to wait for an answer its consumer has not given yet [24: 69 s, rdma_cm's CMA_CM_MRA_SETTING].
	ServiceTimeout uint8
	// Backlog is how many requests (REQs and SIDR_REQs) the consumer has not answered yet are
	// kept, and how many SIDR answers are kept to send again [1024]. Past it a REQ is refused
	// with REJ NO_RESOURCES and a SIDR_REQ dropped, and an answer is not kept (Stats.Overflow):
	// a peer that sends requests with ever new communication IDs holds no more than that.
	Backlog int
}

// DefaultBacklog is Config.Backlog's default.
const DefaultBacklog = 1024

// maxAHs is how many peers' address handles QP1 keeps; past it a handle is made for the
// message that needs it and not kept, so that sources a peer makes up hold nothing.
const maxAHs = 4096

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
func (s state) waitsREP() bool   { return s == stREQSent || s == stMRAReqRcvd }
func (s state) owesAnswer() bool { return s == stREQRcvd || s == stMRAReqSent }
func (s state) waitsRTU() bool   { return s == stREPSent || s == stMRARepRcvd }

// waitsConsumer is a request whose answer the consumer owes.
func (s state) waitsConsumer() bool { return s.owesAnswer() || s == stSIDRReqRcvd }

func (s state) String() string { return stateNames[s] }

// ID is one end of a connection, or a listener (struct rdma_cm_id).
type ID struct {
	m      *Manager
	state  state
	port   uint16 // a listener's port
	ps     cm.PortSpace
	qp     *engine.QP
	local  uint32 // local communication ID
	remote uint32
	tid    uint64
	peer   netip.Addr
	ah     *engine.AH
	// The message sent last and not yet answered, sent again on its timer.
	last       []byte
	lastAttrID uint16
	retries    uint8
	timer      engine.Timer
	req        cm.REQ // what a ConnectRequest's REQ said (passive) or what was sent (active)
	// psn is the PSN this side's QP receives from first, the starting PSN of this side's REQ or
	// REP: ib_cm's starting PSN is the one its sender expects to receive (Linux's active side
	// takes its rq_psn from its REQ, the passive side from its REP), so each side sends from the
	// starting PSN of the other's message.
	psn   uint32
	param ConnParam
	// A SIDR request's: what was asked (passive), and the QP that answers it.
	sidr cm.SIDRREQ
}

// State is the connection's state, for tests and tracing.
func (id *ID) State() string {
	id.m.mu.Lock()
	defer id.m.mu.Unlock()
	return id.state.String()
}

// QP is the connection's QP.
func (id *ID) QP() *engine.QP { return id.qp }

// Peer is the other end's address.
func (id *ID) Peer() netip.Addr { return id.peer }

// Manager is a device's connection manager: its GSI QP and every connection through it.
type Manager struct {
	dev   *engine.Device
	clock engine.Clock
	cfg   Config

	mu        sync.Mutex
	pd        *engine.PD
	cq        *engine.CQ
	qp1       *engine.QP
	mr        *engine.MR
	buf       []byte
	sendNext  int
	inflight  int // send slots whose MAD has not completed
	rnd       *mrand.Rand
	listeners map[uint64]*ID // by service ID
	conns     map[uint32]*ID // by local communication ID
	ahs       map[netip.Addr]*engine.AH
	hiTID     uint64
	// waiting counts the IDs whose request the consumer has not answered, answers those of
	// SIDR_REPs kept to send again: what a peer's requests hold, bounded by the backlog.
	waiting, answers int
	events           []Event  // to deliver once the lock is released
	after            []func() // what calls into the device, run once the lock is released
	polling          atomic.Bool
	stats            Stats
}

// Stats counts the MADs the manager sent and received.
type Stats struct {
	Sent, Received, Resent, Dropped uint64
	MRAs                            uint64 // MRAs sent
	// Overflow counts requests refused, and SIDR answers not kept, over Config.Backlog;
	// Expired the requests given up because the consumer did not answer while the peer waited.
	Overflow, Expired uint64
}

// The GSI QP's buffers: receive slots of the GRH area and a MAD (512, as Linux's MAD layer
// posts), and send slots of a MAD, each in use until its send completes.
const (
	recvSlots = 512
	recvSlot  = engine.GRHLen + mad.Len
	sendSlots = 1024
)

// New gives dev a connection manager: its GSI QP, created and moved to RTS, with receives posted.
func New(dev *engine.Device, cfg Config) (*Manager, error) {
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = 20
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 15
	}
	if cfg.ServiceTimeout == 0 {
		cfg.ServiceTimeout = 24
	}
	if cfg.Backlog == 0 {
		cfg.Backlog = DefaultBacklog
	}
	if cfg.ResponseTimeout > 31 || cfg.MaxRetries > 15 || cfg.ServiceTimeout > 31 || cfg.Backlog < 0 {
		return nil, fmt.Errorf("rdmacm: response timeout %d, max retries %d, service timeout %d, backlog %d: %w",
			cfg.ResponseTimeout, cfg.MaxRetries, cfg.ServiceTimeout, cfg.Backlog, syscall.EINVAL)
	}
	src := cfg.Rand
	if src == nil {
		src = mrand.NewPCG(uint64(time.Now().UnixNano()), 0xc0ffee)
	}
	m := &Manager{dev: dev, clock: dev.Clock(), cfg: cfg, rnd: mrand.New(src), listeners: map[uint64]*ID{},
		conns: map[uint32]*ID{}, ahs: map[netip.Addr]*engine.AH{}}
	m.hiTID = uint64(m.rnd.Uint32()&0xff) | 1
	var err error
	if m.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if m.cq, err = dev.CreateCQ(recvSlots + sendSlots + 1); err != nil {
		return nil, err
	}
	m.qp1, err = m.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeGSI, SendCQ: m.cq, RecvCQ: m.cq,
		Cap: engine.QPCap{MaxSendWR: sendSlots, MaxRecvWR: recvSlots, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		a    engine.QPAttr
		mask engine.AttrMask
	}{
		{engine.QPAttr{State: engine.QPSInit, QKey: engine.GSIQKey}, engine.AttrState | engine.AttrPKeyIndex | engine.AttrQKey},
		{engine.QPAttr{State: engine.QPSRTR}, engine.AttrState},
		{engine.QPAttr{State: engine.QPSRTS}, engine.AttrState | engine.AttrSQPSN},
	} {
		if err := m.qp1.Modify(s.a, s.mask); err != nil {
			return nil, err
		}
	}
	m.buf = make([]byte, recvSlots*recvSlot+sendSlots*mad.Len)
	if m.mr, err = m.pd.RegMR(m.buf, engine.AccessLocalWrite); err != nil {
		return nil, err
	}
	for i := range recvSlots {
		if err := m.postRecv(i); err != nil {
			return nil, err
		}
	}
	// The completion callback runs in whatever goroutine released the device's lock, maybe one
	// holding the manager's: the MADs are taken in a step of the clock of their own.
	m.cq.OnCompletion(func() {
		if m.polling.CompareAndSwap(false, true) {
			m.clock.Post(0, m.poll)
		}
	})
	return m, nil
}

func (m *Manager) postRecv(i int) error {
	return m.qp1.PostRecv(engine.RecvWR{ID: uint64(i), SGL: []engine.SGE{{Addr: m.mr.Addr() + uint64(i*recvSlot), Length: recvSlot, LKey: m.mr.LKey()}}})
}

// Stats reports the MADs sent and received.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// Listen makes a listener for port in the TCP port space (rdma_listen): a REQ for its service ID
// is a ConnectRequest event on it.
func (m *Manager) Listen(port uint16) (*ID, error) { return m.listen(cm.PSTCP, port) }

// ListenUD makes a listener for port in the UDP port space: a SIDR_REQ for its service ID is a
// ConnectRequest event on it, answered by Accept with a UD QP.
func (m *Manager) ListenUD(port uint16) (*ID, error) { return m.listen(cm.PSUDP, port) }

func (m *Manager) listen(ps cm.PortSpace, port uint16) (*ID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sid := cm.ServiceID(ps, port)
	if m.listeners[sid] != nil {
		return nil, fmt.Errorf("rdmacm: %s port %d: %w", ps, port, syscall.EADDRINUSE)
	}
	id := &ID{m: m, state: stListen, port: port, ps: ps}
	m.listeners[sid] = id
	return id, nil
}

// Connect asks the listener at dst and port for a connection for qp, an RC QP in RESET or INIT
// (rdma_connect): it goes to INIT now, and to RTR and RTS when the REP comes.
func (m *Manager) Connect(qp *engine.QP, dst netip.Addr, port uint16, p ConnParam) (*ID, error) {
	if len(p.Private) > cm.REQPrivateLen-cm.HeaderLen {
		return nil, fmt.Errorf("rdmacm: %d bytes of private data, a REQ holds %d: %w", len(p.Private), cm.REQPrivateLen-cm.HeaderLen, syscall.EINVAL)
	}
	p = withDefaults(p)
	ah, err := m.ah(dst)
	if err != nil {
		return nil, err
	}
	if err := toInit(qp, p); err != nil {
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	m.mu.Lock()
	id := m.newConn(qp, dst, ah, p)
	id.tid = m.tidFor(id)
	src := ah.Source()
	hdr := cm.Header{SrcPort: uint16(49152 + m.rnd.IntN(16384)), Src: src, Dst: dst}
	q := cm.REQ{LocalCommID: id.local, ServiceID: cm.ServiceID(cm.PSTCP, port), LocalCAGUID: m.guid(), LocalQPN: qp.Num(),
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth, RemoteCMResponseTimeout: m.cfg.ResponseTimeout,
		StartingPSN: id.psn, LocalCMResponseTimeout: m.cfg.ResponseTimeout, RetryCount: p.RetryCount, PKey: 0xffff,
		PathMTU: uint8(p.MTU), RNRRetryCount: p.RNRRetryCount, MaxCMRetries: m.cfg.MaxRetries,
		// The path as Linux's rdma_cm fills it on RoCE (the captured REQs): permissive LIDs,
		// hop limit 64, local ACK timeout 17.
		Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: src.As16(), RemoteGID: dst.As16(), HopLimit: 64, LocalACKTimeout: 17}}
	if err := hdr.Put(q.Private[:]); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	copy(q.Private[cm.HeaderLen:], p.Private)
	id.req = q
	msg := encode(q.Put)
	m.setState(id, stREQSent)
	m.send(id, cm.AttrREQ, msg, true)
	m.mu.Unlock()
	m.deliver()
	return id, nil
}

// toInit takes a QP in RESET, or in INIT (where rdma_create_qp leaves one, so that receives can
// be posted before the connection), to INIT with the access rdma_cm grants.
func toInit(qp *engine.QP, p ConnParam) error {
	mask := engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrAccessFlags
	if qp.State() == engine.QPSInit {
		mask = engine.AttrState | engine.AttrAccessFlags
	}
	return qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, AccessFlags: accessFor(p)}, mask)
}

func withDefaults(p ConnParam) ConnParam {
	if p.RetryCount == 0 {
		p.RetryCount = 7
	}
	if p.RNRRetryCount == 0 {
		p.RNRRetryCount = 7
	}
	if p.MTU == 0 {
		p.MTU = engine.MTU1024
	}
	return p
}

// accessFor is the remote access rdma_cm grants a QP it connects: READs when it takes them, and
// WRITEs always (rdma_cm's IB_ACCESS_REMOTE_WRITE | IB_ACCESS_LOCAL_WRITE, and REMOTE_READ with
// responder resources).
func accessFor(p ConnParam) engine.Access {
	a := engine.AccessRemoteWrite | engine.AccessLocalWrite
	if p.ResponderResources > 0 {
		a |= engine.AccessRemoteRead | engine.AccessRemoteAtomic
	}
	return a
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

// ah is the address handle of QP1 on dst, made once.
func (m *Manager) ah(dst netip.Addr) (*engine.AH, error) {
	m.mu.Lock()
	ah := m.ahs[dst]
	m.mu.Unlock()
	if ah != nil {
		return ah, nil
	}
	ah, err := m.pd.CreateAH(engine.AHAttr{DGID: dst, HopLimit: 64})
	if err != nil {
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	m.mu.Lock()
	if len(m.ahs) < maxAHs {
		m.ahs[dst] = ah
	}
	m.mu.Unlock()
	return ah, nil
}

// responseTimeout is how long a sent message waits for its answer: the CM response timeout code
// as 4.096 us x 2^n, doubled for the trip there and back.
func (m *Manager) responseTimeout() time.Duration {
	return 2 * time.Duration(4096<<m.cfg.ResponseTimeout) * time.Nanosecond
}

// timewait is how long a closed connection's QP number stays out of use: two local ACK
// timeouts of the default 14 (IBTA 12.9.8.3's reasoning: stray packets die out).
const timewait = 2 * 4096 * time.Nanosecond << 14

// send sends a CM message of attribute attr to id's peer; with retry, it is sent again on the
// response timeout until answered (stop) or MaxRetries, after which the connection fails. m.mu
// is held.
func (m *Manager) send(id *ID, attr uint16, msg []byte, retry bool) {
	m.sendMAD(id.ah, id.tid, attr, msg)
	if !retry {
		return
	}
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

// timeout sends the unanswered message again, or gives the connection up.
func (m *Manager) timeout(id *ID) {
	m.mu.Lock()
	switch {
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

// encode is a CM message's DataLen bytes as put writes them (into a buffer of that size, which
// no Put refuses).
func encode(put func([]byte) error) []byte {
	msg := make([]byte, cm.DataLen)
	_ = put(msg)
	return msg
}

// sendMAD sends one CM MAD on QP1. m.mu is held.
func (m *Manager) sendMAD(ah *engine.AH, tid uint64, attr uint16, msg []byte) {
	if m.inflight == sendSlots {
		m.stats.Dropped++ // every slot is on its way: this one is lost, its timer sends it again
		return
	}
	slot := m.sendNext
	off := recvSlots*recvSlot + slot*mad.Len
	b := m.buf[off : off+mad.Len]
	clear(b[:mad.HeaderLen])
	b[0], b[1], b[2], b[3] = 1, byte(mad.ClassCM), 2, byte(mad.MethodSend)
	binary.BigEndian.PutUint64(b[8:], tid)
	binary.BigEndian.PutUint16(b[16:], attr)
	copy(b[mad.HeaderLen:], msg)
	// Slots are used in order and free in order: a GSI QP's sends complete in posting order.
	if err := m.qp1.PostSend(engine.SendWR{Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: m.mr.Addr() + uint64(off), Length: mad.Len, LKey: m.mr.LKey()}},
		AH: ah, RemoteQPN: 1, RemoteQKey: engine.GSIQKey}); err != nil {
		m.stats.Dropped++
		return
	}
	m.sendNext = (m.sendNext + 1) % sendSlots
	m.inflight++
	m.stats.Sent++
}

// deliver runs what waited for the lock to be released, then hands the events gathered under it
// to the consumer.
func (m *Manager) deliver() {
	for {
		m.mu.Lock()
		after, ev := m.after, m.events
		m.after, m.events = nil, nil
		m.mu.Unlock()
		if len(ev) == 0 && len(after) == 0 {
			return
		}
		for _, f := range after {
			f()
		}
		for _, e := range ev {
			if m.cfg.Events != nil {
				m.cfg.Events(e)
			}
		}
	}
}

// poll takes the GSI QP's completions: each received MAD is handled and its receive posted again.
func (m *Manager) poll() {
	m.polling.Store(false)
	var wcs [16]engine.WC
	for {
		n := m.cq.Poll(wcs[:])
		if n == 0 {
			break
		}
		for _, wc := range wcs[:n] {
			if wc.Opcode != engine.WCRecv {
				m.mu.Lock()
				m.inflight--
				m.mu.Unlock()
				continue
			}
			if wc.Status == engine.WCSuccess && wc.ByteLen >= recvSlot {
				slot := m.buf[int(wc.WRID)*recvSlot : (int(wc.WRID)+1)*recvSlot]
				m.receive(slot, wc)
			}
			if wc.Status != engine.WCWRFlushErr {
				_ = m.postRecv(int(wc.WRID))
			}
		}
	}
	m.deliver()
}

// receive handles one MAD that arrived with its GRH area.
func (m *Manager) receive(slot []byte, wc engine.WC) {
	src, _ := engine.SourceAddr(slot, wc.NetworkHdrType)
	b := slot[engine.GRHLen:]
	h, err := mad.Parse(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.Received++
	if err != nil || h.MgmtClass != mad.ClassCM || h.Method != mad.MethodSend {
		m.stats.Dropped++
		return
	}
	msg := b[mad.HeaderLen : mad.HeaderLen+cm.DataLen]
	switch h.AttrID {
	case cm.AttrREQ:
		m.onREQ(src, h.TID, msg)
	case cm.AttrREP:
		m.onREP(msg)
	case cm.AttrRTU:
		m.onRTU(msg)
	case cm.AttrREJ:
		m.onREJ(src, msg)
	case cm.AttrDREQ:
		m.onDREQ(src, h.TID, msg)
	case cm.AttrDREP:
		m.onDREP(msg)
	case cm.AttrMRA:
		m.onMRA(msg)
	case cm.AttrSIDRREQ:
		m.onSIDRREQ(src, h.TID, msg)
	case cm.AttrSIDRREP:
		m.onSIDRREP(msg)
	default:
		m.stats.Dropped++
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

// ahLocked is ah with m.mu held: it releases the lock while the handle is made.
func (m *Manager) ahLocked(dst netip.Addr) (*engine.AH, error) {
	if ah := m.ahs[dst]; ah != nil {
		return ah, nil
	}
	m.mu.Unlock()
	ah, err := m.ah(dst)
	m.mu.Lock()
	return ah, err
}

// testHookAccept runs in Accept between readying the QP and answering, for a test to end the
// request there.
var testHookAccept func()

// Accept accepts a ConnectRequest with qp, an RC QP in RESET or INIT (rdma_accept): the QP goes
// to RTR and RTS on the REQ's terms, and the REP goes out.
func (id *ID) Accept(qp *engine.QP, p ConnParam) error {
	m := id.m
	if len(p.Private) > cm.REPPrivateLen {
		return fmt.Errorf("rdmacm: %d bytes of private data, a REP holds %d: %w", len(p.Private), cm.REPPrivateLen, syscall.EINVAL)
	}
	p = withDefaults(p)
	m.mu.Lock()
	if id.state == stSIDRReqRcvd {
		m.mu.Unlock()
		return id.acceptUD(qp, p)
	}
	if !id.state.owesAnswer() {
		m.mu.Unlock()
		return fmt.Errorf("rdmacm: accept in %s: %w", id.state, syscall.EINVAL)
	}
	q := id.req
	m.mu.Unlock()
	mtu := engine.MTU(q.PathMTU)
	if mtu.Bytes() == 0 {
		mtu = engine.MTU1024
	}
	mtu = min(mtu, p.MTU)
	if err := toInit(qp, p); err != nil {
		return fmt.Errorf("rdmacm: accept: %w", err)
	}
	steps := []struct {
		a    engine.QPAttr
		mask engine.AttrMask
	}{
		{engine.QPAttr{State: engine.QPSRTR, AH: engine.AHAttr{DGID: id.peer, HopLimit: 64}, PathMTU: mtu, DestQPN: q.LocalQPN, RQPSN: id.psn,
			MaxDestRdAtomic: min(p.ResponderResources, q.InitiatorDepth), MinRNRTimer: engine.DefaultMinRNRTimer},
			engine.AttrState | engine.AttrAV | engine.AttrPathMTU | engine.AttrDestQPN | engine.AttrRQPSN | engine.AttrMaxDestRdAtomic | engine.AttrMinRNRTimer},
		{engine.QPAttr{State: engine.QPSRTS, SQPSN: q.StartingPSN, Timeout: q.Primary.LocalACKTimeout, RetryCnt: q.RetryCount, RNRRetry: q.RNRRetryCount,
			MaxRdAtomic: min(p.InitiatorDepth, q.ResponderResources)},
			engine.AttrState | engine.AttrSQPSN | engine.AttrTimeout | engine.AttrRetryCnt | engine.AttrRNRRetry | engine.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(s.a, s.mask); err != nil {
			return fmt.Errorf("rdmacm: accept: %w", err)
		}
	}
	if testHookAccept != nil {
		testHookAccept()
	}
	m.mu.Lock()
	if !id.state.owesAnswer() {
		// The request ended while its QP was readied: the peer rejected it or gave up.
		st := id.state
		m.mu.Unlock()
		_ = qp.Modify(engine.QPAttr{State: engine.QPSErr}, engine.AttrState)
		return fmt.Errorf("rdmacm: accept: the request ended (%s) before the answer: %w", st, syscall.ECONNABORTED)
	}
	id.qp, id.param = qp, p
	rep := cm.REP{LocalCommID: id.local, RemoteCommID: id.remote, LocalQPN: qp.Num(), StartingPSN: id.psn,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth, TargetACKDelay: 15,
		RNRRetryCount: p.RNRRetryCount, LocalCAGUID: m.guid()}
	copy(rep.Private[:], p.Private)
	msg := encode(rep.Put)
	m.setState(id, stREPSent)
	m.send(id, cm.AttrREP, msg, true)
	m.mu.Unlock()
	m.deliver()
	return nil
}

// Reject refuses a ConnectRequest with private data (rdma_reject): REJ, consumer defined.
func (id *ID) Reject(private []byte) error {
	m := id.m
	if len(private) > cm.REJPrivateLen {
		return fmt.Errorf("rdmacm: %d bytes of private data, a REJ holds %d: %w", len(private), cm.REJPrivateLen, syscall.EINVAL)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state == stSIDRReqRcvd {
		if len(private) > cm.SIDRREPPrivateLen {
			return fmt.Errorf("rdmacm: %d bytes of private data, a SIDR_REP holds %d: %w", len(private), cm.SIDRREPPrivateLen, syscall.EINVAL)
		}
		m.sidrReply(id, cm.SIDRReject, 0, 0, private)
		return nil
	}
	if !id.state.owesAnswer() {
		return fmt.Errorf("rdmacm: reject in %s: %w", id.state, syscall.EINVAL)
	}
	m.reject(id, cm.RejConsumerDefined, private)
	m.forget(id)
	return nil
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

// Disconnect ends an established connection (rdma_disconnect): the QP goes to ERR, the DREQ out,
// and the connection waits out its time wait once the DREP comes.
func (id *ID) Disconnect() error {
	m := id.m
	m.mu.Lock()
	if id.state != stEstablished {
		st := id.state
		m.mu.Unlock()
		return fmt.Errorf("rdmacm: disconnect in %s: %w", st, syscall.EINVAL)
	}
	m.mu.Unlock()
	_ = id.qp.Modify(engine.QPAttr{State: engine.QPSErr}, engine.AttrState)
	m.mu.Lock()
	id.tid = m.tidFor(id)
	dreq := cm.Pair{LocalCommID: id.local, RemoteCommID: id.remote, RemoteQPN: id.remoteQPN()}
	msg := encode(dreq.PutDREQ)
	m.setState(id, stDREQSent)
	m.send(id, cm.AttrDREQ, msg, true)
	m.events = append(m.events, Event{Type: Disconnected, ID: id})
	m.mu.Unlock()
	m.deliver()
	return nil
}

// remoteQPN is the peer's QP number, as the connection's QP has it.
func (id *ID) remoteQPN() uint32 { return id.qp.Query().DestQPN }

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
