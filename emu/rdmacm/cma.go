package rdmacm

import (
	"fmt"
	"math/bits"
	"net/netip"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/cm"
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
